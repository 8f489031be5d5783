//! One plugin version's wiring: the informers it reads, its indexes, its Owns and Watches
//! triggers. A new version builds new wiring beside the old one, sharing whatever is unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::core::GroupVersionKind;
use tokio::task::JoinHandle;

use super::filter::add_filtered;
use super::triggers::{Mapper, owns_trigger};
use super::{Context, Error, PluginCache, Workers, indexes};
use crate::informer::{HandlerRegistration, Informer, InformerParams};
use crate::plugin::Plugin;
use crate::plugin::grants::KindRef;
use crate::plugin::registration::{EventFilter, Registration};

/// A kind and the label selector its informer is opened with.
pub(crate) type Watched = (KindRef, Option<String>);

/// A watch: its kind, the 0.1 selector its informer is opened with, its 0.2 event filter.
type WatchUse = (KindRef, Option<String>, EventFilter);

fn params(selector: Option<&str>) -> InformerParams {
    InformerParams::default().labels(selector.unwrap_or_default())
}

fn informer_err(kind: &GroupVersionKind) -> impl FnOnce(crate::informer::Error) -> Error + use<> {
    let kind = KindRef::of(kind);
    move |source| Error::Informer { kind, source }
}

/// The informers one plugin version reads, by kind, with the label selector each is opened
/// with.
pub fn wanted_informers(plugin: &Plugin) -> BTreeMap<KindRef, (GroupVersionKind, Option<String>)> {
    let namespace_labels = plugin.grants().namespaces().is_some_and(|s| s.selector.is_some());
    wanted_kinds(plugin.registration(), namespace_labels)
}

/// Every kind `reg` uses, with the selector its informer is opened with. A contract-0.1 selector
/// (of the for kind or a watch) narrows the informer only where every use of the kind has that
/// same selector: owned and read kinds, and Namespaces when a confined plugin needs their labels
/// (`namespace_labels`), are cached whole, and the selector then filters the trigger alone (it
/// is also the use's event filter). Before, an owned kind shared a for or watch selector's
/// narrowed informer, so writes to owned objects outside it were judged on a cache miss.
fn wanted_kinds(reg: &Registration, namespace_labels: bool) -> BTreeMap<KindRef, (GroupVersionKind, Option<String>)> {
    let namespace = GroupVersionKind::gvk("", "v1", "Namespace");
    let mut uses = vec![(&reg.for_kind, reg.for_label_selector.as_ref())];
    uses.extend(reg.watches.iter().map(|w| (&w.kind, w.label_selector.as_ref())));
    uses.extend(reg.owns.iter().chain(&reg.reads).map(|kind| (kind, None)));
    if namespace_labels {
        uses.push((&namespace, None));
    }
    let mut wanted: BTreeMap<KindRef, (GroupVersionKind, Option<String>)> = BTreeMap::new();
    for (kind, selector) in uses {
        wanted
            .entry(KindRef::of(kind))
            .and_modify(|(_, opened)| {
                if opened.as_ref() != selector {
                    *opened = None;
                }
            })
            .or_insert_with(|| (kind.clone(), selector.cloned()));
    }
    wanted
}

/// Serves `plugin`'s reads from `informers` (those of [`wanted_informers`]) through `cache`:
/// its custom indexes, and its confinement to namespaces (`grants.namespaces`).
pub fn serve_reads(
    plugin: &Plugin,
    cache: &PluginCache,
    informers: &BTreeMap<KindRef, Informer>,
) -> Result<(), Box<Error>> {
    for index in &plugin.registration().indexes {
        let informer = informers.get(&KindRef::of(&index.kind)).ok_or_else(|| Error::Index(index.name.clone()))?;
        let func = indexes::index_func(&index.source).ok_or_else(|| Error::Index(index.name.clone()))?;
        cache.add_index(informer, &index.name, func).map_err(informer_err(&index.kind))?;
    }
    cache.replace(informers.values().cloned());
    if let Some(scope) = plugin.grants().namespaces() {
        let namespaces = informers.values().find(|i| i.gvk().group.is_empty() && i.gvk().kind == "Namespace");
        cache.confine(scope, namespaces.cloned());
    }
    Ok(())
}

/// Which kinds a plugin's informers shard (module doc of [`crate::shard`]): the for kind, and
/// the kinds it owns when it is namespaced and neither reads nor watches them.
fn sharded_kinds(reg: &crate::plugin::registration::Registration, owner: &Owner) -> Vec<KindRef> {
    let mut sharded = vec![KindRef::of(&reg.for_kind)];
    if owner.namespaced {
        let unsharded: Vec<KindRef> =
            reg.reads.iter().chain(reg.watches.iter().map(|w| &w.kind)).map(KindRef::of).collect();
        sharded.extend(reg.owns.iter().map(KindRef::of).filter(|k| !unsharded.contains(k)));
    }
    sharded
}

/// The for kind's identity (it stays the same across swaps) and its scope.
#[derive(Clone)]
pub(crate) struct Owner {
    pub(crate) kind: KindRef,
    pub(crate) namespaced: bool,
}

/// The Watches half: a mapper, its handlers and its task; shared by versions with equal watches.
struct Watches {
    spec: Vec<WatchUse>,
    mapper: Arc<Mapper>,
    _registrations: Vec<HandlerRegistration>,
    task: JoinHandle<()>,
}

impl Drop for Watches {
    /// The last version using these watches is gone: stop mapping (also if still waiting for
    /// the caches to sync, which would otherwise hold the informers forever).
    fn drop(&mut self) {
        self.mapper.shut_down();
        self.task.abort();
    }
}

/// What one plugin version wired.
pub(crate) struct Wiring {
    pub(crate) cache: Arc<PluginCache>,
    informers: Vec<Informer>,
    owns: BTreeMap<KindRef, (EventFilter, Arc<HandlerRegistration>)>,
    watches: Option<Arc<Watches>>,
}

impl Wiring {
    /// Wires `plugin`'s reads, indexes and triggers into `workers`'s queue, reusing the
    /// triggers of `previous` that the new registration keeps (so they do not replay their
    /// objects). `previous` itself is left intact: dropping the result undoes everything.
    pub(crate) async fn new(
        ctx: &Context,
        plugin: &Plugin,
        cache: Arc<PluginCache>,
        workers: &Arc<Workers>,
        owner: &Owner,
        previous: Option<&Wiring>,
    ) -> Result<Self, Error> {
        let reg = plugin.registration();
        let sharded = if ctx.shard.is_sharded() { sharded_kinds(reg, owner) } else { Vec::new() };
        let mut informers: BTreeMap<KindRef, Informer> = BTreeMap::new();
        for (key, (gvk, selector)) in wanted_informers(plugin) {
            let params = params(selector.as_deref()).sharded(sharded.contains(&key));
            let informer = ctx.factory.informer(&gvk, params).await.map_err(informer_err(&gvk))?;
            informers.insert(key, informer);
        }
        serve_reads(plugin, &cache, &informers).map_err(|e| *e)?;

        let mut owns = BTreeMap::new();
        for (i, kind) in reg.owns.iter().enumerate() {
            let kind = KindRef::of(kind);
            let filter = reg.owns_filters.get(i).cloned().unwrap_or_default();
            let kept = previous.and_then(|p| p.owns.get(&kind)).filter(|(f, _)| *f == filter).map(|(_, r)| r.clone());
            let registration = kept.unwrap_or_else(|| {
                let workers = workers.clone();
                let enqueue = move |key| workers.enqueue(key);
                let trigger = owns_trigger(enqueue, plugin.mark(), owner.kind.clone(), owner.namespaced);
                Arc::new(add_filtered(&informers[&kind], Some(&filter), trigger))
            });
            owns.insert(kind, (filter, registration));
        }

        let spec: Vec<WatchUse> =
            reg.watches.iter().map(|w| (KindRef::of(&w.kind), w.label_selector.clone(), w.filter.clone())).collect();
        let watches = match previous.and_then(|p| p.watches.as_ref()) {
            Some(kept) if kept.spec == spec => Some(kept.clone()),
            _ if spec.is_empty() => None,
            _ => {
                let watched: Vec<Informer> = spec.iter().map(|(kind, _, _)| informers[kind].clone()).collect();
                let mapper = Mapper::new(plugin.name(), watched.clone(), informers[&owner.kind].clone());
                let registrations = (0..spec.len())
                    .map(|i| add_filtered(mapper.watched_informer(i), Some(&spec[i].2), mapper.trigger(i)))
                    .collect();
                let (mapper_run, workers, leader) = (mapper.clone(), workers.clone(), ctx.leader.clone());
                // Map only once every watched cache is complete: `map` may read them. `map` is
                // plugin code and may write, so only the leader runs it.
                let task = tokio::spawn(async move {
                    for informer in &watched {
                        if informer.wait_for_sync().await.is_err() {
                            return;
                        }
                    }
                    leader.leading().await;
                    mapper_run.run(workers).await;
                });
                Some(Arc::new(Watches { spec, mapper, _registrations: registrations, task }))
            }
        };
        Ok(Self { cache, informers: informers.into_values().collect(), owns, watches })
    }

    /// Every informer this version reads.
    pub(crate) fn informers(&self) -> &[Informer] {
        &self.informers
    }

    /// Waits until every informer of this version has synced, at most `timeout`.
    pub(crate) async fn wait_for_sync(&self, timeout: Duration) -> Result<(), Error> {
        for informer in &self.informers {
            let synced = tokio::time::timeout(timeout, informer.wait_for_sync()).await;
            if !matches!(synced, Ok(Ok(()))) {
                let (kind, last_error) = (KindRef::of(informer.gvk()), informer.last_error());
                return Err(Error::NotSynced { kind, timeout, last_error });
            }
        }
        Ok(())
    }

    /// Stops the mapper (if this is its last holder, it stops after its current map).
    pub(crate) fn shut_down_watches(&self) {
        if let Some(watches) = &self.watches {
            watches.mapper.shut_down();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::registration::WatchSpec;

    fn cm() -> GroupVersionKind {
        GroupVersionKind::gvk("", "v1", "ConfigMap")
    }

    fn selected(reg: &Registration, namespace_labels: bool) -> Vec<(String, Option<String>)> {
        wanted_kinds(reg, namespace_labels).into_values().map(|(gvk, s)| (gvk.kind, s)).collect()
    }

    #[test]
    fn a_for_selector_narrows_the_informer_when_the_kind_has_no_other_use() {
        let mut reg = Registration::new(cm());
        reg.for_label_selector = Some("app=web".into());
        assert_eq!(selected(&reg, false), [("ConfigMap".into(), Some("app=web".into()))]);
    }

    #[test]
    fn an_owned_or_read_kind_is_cached_whole_even_if_the_for_kind_is_selected() {
        let mut owned = Registration::new(cm());
        owned.for_label_selector = Some("app=web".into());
        owned.owns.push(cm());
        assert_eq!(selected(&owned, false), [("ConfigMap".into(), None)]);
        let mut read = Registration::new(GroupVersionKind::gvk("", "v1", "Service"));
        read.watches.push(WatchSpec { kind: cm(), label_selector: Some("x=1".into()), filter: EventFilter::default() });
        read.reads.push(cm());
        assert_eq!(selected(&read, false), [("ConfigMap".into(), None), ("Service".into(), None)]);
    }

    #[test]
    fn two_uses_with_different_selectors_share_the_whole_kind() {
        let mut reg = Registration::new(cm());
        reg.for_label_selector = Some("app=web".into());
        reg.watches.push(WatchSpec {
            kind: cm(),
            label_selector: Some("app=db".into()),
            filter: EventFilter::default(),
        });
        assert_eq!(selected(&reg, false), [("ConfigMap".into(), None)]);
        reg.watches[0].label_selector = Some("app=web".into());
        assert_eq!(selected(&reg, false), [("ConfigMap".into(), Some("app=web".into()))], "the same selector narrows");
    }

    #[test]
    fn a_plugin_confined_by_namespace_labels_caches_every_namespace() {
        let mut reg = Registration::new(GroupVersionKind::gvk("", "v1", "Namespace"));
        reg.for_label_selector = Some("team=a".into());
        assert_eq!(selected(&reg, true), [("Namespace".into(), None)]);
    }
}
