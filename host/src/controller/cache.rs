//! A plugin's view of the informer caches: the `CacheReader` behind its `cache.*` imports.
//!
//! Holds the informers of the kinds the plugin may read (keyed by group and kind, so any
//! version the plugin names finds them). Custom index names are prefixed with the plugin's name
//! in the shared store, so two plugins can both have an index called `refs`.

use std::sync::Arc;

use kube::core::GroupVersionKind;
use parking_lot::RwLock;

use crate::informer::{CONTROLLER_OWNER_INDEX, CachedObject, Informer, LABEL_INDEX, NAMESPACE_INDEX};
use crate::plugin::grants::KindRef;
use crate::plugin::host::{CacheReader, CallError};

/// The store name of a plugin's custom index.
pub fn index_name(plugin: &str, index: &str) -> String {
    if [NAMESPACE_INDEX, LABEL_INDEX, CONTROLLER_OWNER_INDEX].contains(&index) {
        index.to_owned()
    } else {
        format!("{plugin}/{index}")
    }
}

/// The informers one plugin reads, filled after its registration is known.
pub struct PluginCache {
    plugin: String,
    /// A handful per plugin, found by comparing group and kind in place (no allocation per read).
    informers: RwLock<Vec<Informer>>,
}

impl PluginCache {
    /// An empty view for `plugin` (reads fail until informers are added).
    pub fn new(plugin: &str) -> Self {
        Self { plugin: plugin.to_owned(), informers: RwLock::default() }
    }

    /// Serves reads of the informer's kind from it.
    pub fn insert(&self, informer: Informer) {
        let mut informers = self.informers.write();
        informers.retain(|i| !same_kind(i.gvk(), informer.gvk()));
        informers.push(informer);
    }

    /// Replaces every informer at once (a new plugin version with another registration).
    pub fn replace(&self, informers: impl IntoIterator<Item = Informer>) {
        *self.informers.write() = informers.into_iter().collect();
    }

    fn informer(&self, kind: &GroupVersionKind) -> Result<Informer, CallError> {
        self.informers.read().iter().find(|i| same_kind(i.gvk(), kind)).cloned().ok_or_else(|| {
            CallError::Forbidden(format!("{} is not watched for plugin `{}`", KindRef::of(kind), self.plugin))
        })
    }
}

fn same_kind(a: &GroupVersionKind, b: &GroupVersionKind) -> bool {
    a.kind == b.kind && a.group == b.group
}

fn bytes(objects: Vec<Arc<CachedObject>>) -> Vec<Vec<u8>> {
    objects.iter().map(|o| o.json().to_vec()).collect()
}

impl CacheReader for PluginCache {
    fn get(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, CallError> {
        Ok(self.informer(kind)?.store().get(namespace, name).map(|o| o.json().to_vec()))
    }

    fn list(
        &self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        label_selector: Option<&str>,
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
        Ok(bytes(objects))
    }

    fn by_index(&self, kind: &GroupVersionKind, index: &str, value: &str) -> Result<Vec<Vec<u8>>, CallError> {
        let informer = self.informer(kind)?;
        let name = index_name(&self.plugin, index);
        informer
            .store()
            .by_index(&name, value)
            .map(bytes)
            .map_err(|_| CallError::Invalid(format!("no index `{index}` on {}", KindRef::of(kind))))
    }
}
