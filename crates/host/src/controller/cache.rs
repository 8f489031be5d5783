//! A plugin's view of the informer caches: the `CacheReader` behind its `cache.*` imports.
//!
//! Holds the informers of the kinds the plugin may read (keyed by group and kind, so any
//! version the plugin names finds them). Custom index names are prefixed with the plugin's name
//! and version generation in the shared store, so two plugins (or two versions of one) can both
//! have an index called `refs`. A plugin confined to namespaces (`grants.namespaces`) sees only
//! the objects in them.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::core::{GroupVersionKind, Selector, SelectorExt as _};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::informer::{CONTROLLER_OWNER_INDEX, CachedObject, IndexFunc, Informer, LABEL_INDEX, NAMESPACE_INDEX};
use crate::plugin::api::{CacheReader, CallError, FieldSelector, ListOptions, ObjectList, copy_within, list_page};
use crate::plugin::grants::{KindRef, NamespaceScope};

/// The store name of a custom index of one plugin version (`prefix` is
/// [`PluginCache::index_prefix`]). Built-in index names pass through unchanged.
pub fn index_name(prefix: &str, index: &str) -> String {
    if [NAMESPACE_INDEX, LABEL_INDEX, CONTROLLER_OWNER_INDEX].contains(&index) {
        index.to_owned()
    } else {
        format!("{prefix}/{index}")
    }
}

/// Distinguishes the caches of successive versions of one plugin.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The informers one plugin version reads, filled after its registration is known.
///
/// Each version gets its own cache with its own index names (`<plugin>#<generation>/<index>`),
/// so a new version can change an index's definition while the old one finishes its in-flight
/// reconciles. Dropping the cache (the last reconcile of its version is over) removes its
/// indexes and releases its informers.
pub struct PluginCache {
    plugin: String,
    prefix: String,
    /// A handful per plugin, found by comparing group and kind in place (no allocation per read).
    informers: RwLock<Vec<Informer>>,
    /// Custom indexes this version added, removed on drop.
    indexes: Mutex<Vec<(Informer, String)>>,
    /// The namespaces the plugin is confined to (`grants.namespaces`); `None`: all.
    scope: RwLock<Option<Scope>>,
    /// What the plugin does not read (the host's Secrets, its sensitive kinds outside their
    /// namespaces), installed by the authorizer: again for each authorizer of this version.
    hidden: RwLock<Option<crate::plugin::api::Hidden>>,
}

/// A confined plugin's namespaces, and the Namespace informer its selector is matched on.
struct Scope {
    names: BTreeSet<String>,
    selector: Option<(Selector, Informer)>,
}

impl Scope {
    fn contains(&self, namespace: &str) -> bool {
        self.names.contains(namespace)
            || self.selector.as_ref().is_some_and(|(selector, namespaces)| {
                namespaces.store().get(None, namespace).is_some_and(|ns| selector.matches(&ns.meta().labels.to_map()))
            })
    }
}

impl PluginCache {
    /// An empty view for `plugin` (reads fail until informers are added).
    pub fn new(plugin: &str) -> Self {
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        Self {
            plugin: plugin.to_owned(),
            prefix: format!("{plugin}#{generation}"),
            informers: RwLock::default(),
            indexes: Mutex::default(),
            scope: RwLock::default(),
            hidden: RwLock::default(),
        }
    }

    /// Confines reads (and, through [`CacheReader::in_scope`], writes) to `scope`; a selector
    /// is matched on the labels in `namespaces`, an informer on Namespaces.
    pub fn confine(&self, scope: &NamespaceScope, namespaces: Option<Informer>) {
        let selector = scope.selector.as_ref().zip(namespaces).map(|(s, informer)| (s.selector(), informer));
        *self.scope.write() = Some(Scope { names: scope.names.clone(), selector });
    }

    /// Whether the plugin may see `object` of `kind`: namespaced objects in its scope, and of
    /// Namespaces those in its scope.
    fn visible(&self, kind: &GroupVersionKind, object: &CachedObject) -> bool {
        if self.hidden.read().as_ref().is_some_and(|h| h.hides(kind, object.namespace())) {
            return false;
        }
        let scope = self.scope.read();
        let Some(scope) = scope.as_ref() else { return true };
        match object.namespace() {
            Some(ns) => scope.contains(ns),
            None => !is_namespace(kind) || scope.contains(object.name()),
        }
    }

    /// The JSON of the `objects` the plugin may see, if together within `max_bytes` (counted
    /// on the cached objects before any is copied).
    fn visible_only(
        &self,
        kind: &GroupVersionKind,
        objects: Vec<Arc<CachedObject>>,
        max_bytes: usize,
        what: &str,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let visible: Vec<Arc<CachedObject>> = objects.into_iter().filter(|o| self.visible(kind, o)).collect();
        copy_within(
            &visible,
            |o| o.json().len(),
            |o| o.json().to_vec(),
            max_bytes,
            || format!("{what} of {}", kind.kind),
        )
    }

    /// The prefix of this version's custom index names.
    pub fn index_prefix(&self) -> &str {
        &self.prefix
    }

    /// Serves reads of the informer's kind from it.
    pub fn insert(&self, informer: Informer) {
        let mut informers = self.informers.write();
        informers.retain(|i| !same_kind(i.gvk(), informer.gvk()));
        informers.push(informer);
    }

    /// Replaces every informer at once.
    pub fn replace(&self, informers: impl IntoIterator<Item = Informer>) {
        *self.informers.write() = informers.into_iter().collect();
    }

    /// Adds the plugin's index `index` to `informer` (backfilled), owned by this cache.
    pub fn add_index(&self, informer: &Informer, index: &str, func: IndexFunc) -> Result<(), crate::informer::Error> {
        let name = index_name(&self.prefix, index);
        informer.add_indexers([(name.clone(), func)].into_iter().collect())?;
        self.indexes.lock().push((informer.clone(), name));
        Ok(())
    }

    fn informer(&self, kind: &GroupVersionKind) -> Result<Informer, CallError> {
        self.informers.read().iter().find(|i| same_kind(i.gvk(), kind)).cloned().ok_or_else(|| {
            CallError::Forbidden(format!("{} is not watched for plugin `{}`", KindRef::of(kind), self.plugin))
        })
    }
}

impl Drop for PluginCache {
    fn drop(&mut self) {
        for (informer, name) in self.indexes.get_mut().drain(..) {
            informer.remove_indexers([name.as_str()]);
        }
    }
}

fn same_kind(a: &GroupVersionKind, b: &GroupVersionKind) -> bool {
    a.kind == b.kind && a.group == b.group
}

fn is_namespace(kind: &GroupVersionKind) -> bool {
    kind.group.is_empty() && kind.kind == "Namespace"
}

impl CacheReader for PluginCache {
    fn get(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, CallError> {
        let object = self.informer(kind)?.store().get(namespace, name);
        Ok(object.filter(|o| self.visible(kind, o)).map(|o| o.json().to_vec()))
    }

    fn list(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let informer = self.informer(kind)?;
        let store = informer.store();
        let objects = match (namespace, label_selector) {
            (None, None) => store.list(),
            (Some(ns), None) => store.by_index(NAMESPACE_INDEX, ns).map_err(|e| CallError::Other(e.to_string()))?,
            (ns, Some(selector)) => {
                store.list_selected(ns, selector).map_err(|e| CallError::Invalid(format!("label selector: {e}")))?
            }
        };
        self.visible_only(kind, objects, max_bytes, "cache.list")
    }

    /// Pages over the parsed objects: field selection and ordering read the cached key, never
    /// the JSON, and only the page's objects are copied, within `max_bytes`.
    fn list_page(
        &self,
        kind: &GroupVersionKind,
        options: &ListOptions,
        max_bytes: usize,
    ) -> Result<ObjectList, CallError> {
        let fields = options.field_selector.as_deref().map(FieldSelector::parse).transpose()?;
        let informer = self.informer(kind)?;
        let store = informer.store();
        let objects = match (options.namespace.as_deref(), options.label_selector.as_deref()) {
            (None, None) => store.list(),
            (Some(ns), None) => store.by_index(NAMESPACE_INDEX, ns).map_err(|e| CallError::Other(e.to_string()))?,
            (ns, Some(selector)) => {
                store.list_selected(ns, selector).map_err(|e| CallError::Invalid(format!("label selector: {e}")))?
            }
        };
        let keyed = objects.into_iter().map(|o| (o.key().to_owned(), o));
        let keep = |o: &Arc<CachedObject>| {
            fields.as_ref().is_none_or(|f| f.matches(o.namespace(), o.name())) && self.visible(kind, o)
        };
        let (len, json) = (|o: &Arc<CachedObject>| o.json().len(), |o: Arc<CachedObject>| o.json().to_vec());
        list_page(keyed, options, keep, len, json, max_bytes, || format!("cache.list of {}", kind.kind))
    }

    fn by_index(
        &self,
        kind: &GroupVersionKind,
        index: &str,
        value: &str,
        max_bytes: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        let informer = self.informer(kind)?;
        let name = index_name(&self.prefix, index);
        let objects = informer
            .store()
            .by_index(&name, value)
            .map_err(|_| CallError::Invalid(format!("no index `{index}` on {}", KindRef::of(kind))))?;
        self.visible_only(kind, objects, max_bytes, "cache.by-index")
    }

    fn hide(&self, hidden: crate::plugin::api::Hidden) {
        *self.hidden.write() = Some(hidden);
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.scope.read().as_ref().is_none_or(|s| s.contains(namespace))
    }

    fn for_write(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let informer = self.informer(kind).ok().filter(Informer::has_synced)?;
        informer.store().get(namespace, name).filter(|o| self.visible(kind, o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache over `count` ConfigMaps in `default` of `bytes` of data each.
    fn config_maps(count: usize, bytes: usize) -> (PluginCache, GroupVersionKind) {
        let kind = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let objects = (0..count).map(|i| {
            let json = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": "default"}, "data": {"x": "x".repeat(bytes)}});
            CachedObject::from_json(serde_json::to_vec(&json).unwrap()).unwrap()
        });
        let cache = PluginCache::new("p");
        cache.insert(Informer::seeded(&kind, objects).unwrap());
        (cache, kind)
    }

    #[tokio::test]
    async fn a_list_or_by_index_of_more_bytes_than_the_bound_is_refused_and_within_it_served() {
        let (cache, kind) = config_maps(8, 1 << 10);
        let all = cache.list(&kind, None, None, usize::MAX).unwrap();
        let bytes: usize = all.iter().map(Vec::len).sum();
        let err = cache.list(&kind, None, None, bytes - 1).unwrap_err();
        assert!(
            matches!(&err, CallError::Invalid(m) if m.starts_with("cache.list of ConfigMap would copy 8 KiB")),
            "{err}"
        );
        assert_eq!(cache.list(&kind, Some("default"), None, bytes).unwrap().len(), 8, "at the bound: served");
        let err = cache.by_index(&kind, NAMESPACE_INDEX, "default", bytes - 1).unwrap_err();
        assert!(matches!(&err, CallError::Invalid(m) if m.starts_with("cache.by-index of ConfigMap")), "{err}");
    }

    #[tokio::test]
    async fn a_page_with_a_limit_ends_at_the_bound_and_the_next_page_goes_on_from_there() {
        let (cache, kind) = config_maps(8, 1 << 10);
        let one = cache.get(&kind, Some("default"), "cm-0").unwrap().unwrap().len();
        let mut options = ListOptions { limit: Some(5), ..ListOptions::default() };
        let mut pages = Vec::new();
        loop {
            let page = cache.list_page(&kind, &options, 3 * one).unwrap();
            pages.push(page.items.len());
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        assert_eq!(pages, [3, 3, 2], "pages of at most three objects' bytes, all eight read");
        let unlimited = cache.list_page(&kind, &ListOptions::default(), 3 * one);
        assert!(matches!(unlimited, Err(CallError::Invalid(_))), "a list without a limit over the bound is refused");
    }
}
