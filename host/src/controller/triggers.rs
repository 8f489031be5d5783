//! Triggers: informer events → keys of the plugin's for kind (controller-runtime's For, Owns
//! and Watches).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::NamespacedKey;
use super::worker::Reconciler;
use crate::informer::{CachedObject, Informer, ResourceEventHandler};
use crate::plugin::grants::KindRef;
use crate::queue::{Config as QueueConfig, WorkQueue};

/// For: every change to an object enqueues its own key.
pub(crate) struct ForTrigger(pub(crate) WorkQueue<NamespacedKey>);

impl ResourceEventHandler for ForTrigger {
    fn on_add(&self, obj: Arc<CachedObject>, _: bool) {
        self.0.add(NamespacedKey::of(&obj));
    }
    fn on_update(&self, _: Arc<CachedObject>, new: Arc<CachedObject>) {
        self.0.add(NamespacedKey::of(&new));
    }
    fn on_delete(&self, obj: Arc<CachedObject>, _: bool) {
        self.0.add(NamespacedKey::of(&obj));
    }
}

/// Owns: a change to an object enqueues the key of its controller owner, if that owner is of
/// the for kind (client-go's `handleObject`). An owner change enqueues both owners.
pub(crate) struct OwnsTrigger {
    pub(crate) queue: WorkQueue<NamespacedKey>,
    pub(crate) owner: KindRef,
    /// Whether the for kind is namespaced (then the owner lives in the object's namespace).
    pub(crate) owner_namespaced: bool,
}

impl OwnsTrigger {
    fn owner_key(&self, obj: &CachedObject) -> Option<NamespacedKey> {
        let owner = obj.meta().controller_owner()?;
        let group = owner.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        (group == self.owner.group && owner.kind == self.owner.kind)
            .then(|| NamespacedKey::new(if self.owner_namespaced { obj.namespace() } else { None }, &owner.name))
    }

    fn enqueue(&self, obj: &CachedObject) {
        if let Some(key) = self.owner_key(obj) {
            self.queue.add(key);
        }
    }
}

impl ResourceEventHandler for OwnsTrigger {
    fn on_add(&self, obj: Arc<CachedObject>, _: bool) {
        self.enqueue(&obj);
    }
    fn on_update(&self, old: Arc<CachedObject>, new: Arc<CachedObject>) {
        self.enqueue(&old);
        self.enqueue(&new);
    }
    fn on_delete(&self, obj: Arc<CachedObject>, _: bool) {
        self.enqueue(&obj);
    }
}

/// A watched object waiting to be mapped: which watch, and its cache key.
type MapItem = (usize, Arc<str>);

/// Watches: changed objects go through the plugin's `map` export, which names the keys to
/// reconcile. `map` is a wasm call, so handlers only enqueue the object's key on a deduplicating
/// queue (memory bounded by object count); a mapper task calls the plugin with the latest state.
pub(crate) struct Mapper {
    queue: WorkQueue<MapItem>,
    watched: Vec<Informer>,
    /// Last states of deleted objects, until mapped.
    tombstones: Mutex<HashMap<MapItem, Arc<CachedObject>>>,
}

impl Mapper {
    pub(crate) fn new(name: &str, watched: Vec<Informer>) -> Arc<Self> {
        let queue = WorkQueue::new(QueueConfig::default().name(format!("{name}-map")));
        Arc::new(Self { queue, watched, tombstones: Mutex::default() })
    }

    /// The handler for watch number `index`.
    pub(crate) fn trigger(self: &Arc<Self>, index: usize) -> WatchTrigger {
        WatchTrigger { mapper: self.clone(), index }
    }

    /// Maps queued objects until the queue shuts down.
    pub(crate) async fn run(self: Arc<Self>, reconciler: Arc<Reconciler>) {
        while let Some(item) = self.queue.get().await {
            let informer = &self.watched[item.0];
            // A deleted object's tombstone stays until it has been mapped, so a failed map is
            // retried with the same last state; success also clears a tombstone left behind by
            // a delete-then-recreate.
            let obj = informer.store().get_by_key(&item.1).or_else(|| self.tombstones.lock().get(&item).cloned());
            if let Some(obj) = obj {
                match reconciler.plugin().map(informer.gvk(), obj.json()).await {
                    Ok(keys) => {
                        self.tombstones.lock().remove(&item);
                        self.queue.forget(&item);
                        for key in &keys {
                            match NamespacedKey::try_from(key) {
                                Ok(key) => reconciler.queue().add(key),
                                Err(err) => {
                                    tracing::warn!(error = %err, object = %item.1, "map returned an invalid key; skipped")
                                }
                            }
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, object = %item.1, "map failed; retrying with backoff");
                        self.queue.add_rate_limited(item.clone());
                    }
                }
            }
            self.queue.done(&item);
        }
    }

    pub(crate) fn watched_informer(&self, index: usize) -> &Informer {
        &self.watched[index]
    }

    pub(crate) fn shut_down(&self) {
        self.queue.shut_down();
    }
}

/// The handler of one watched informer.
pub(crate) struct WatchTrigger {
    mapper: Arc<Mapper>,
    index: usize,
}

impl ResourceEventHandler for WatchTrigger {
    fn on_add(&self, obj: Arc<CachedObject>, _: bool) {
        self.mapper.queue.add((self.index, obj.key().into()));
    }
    fn on_update(&self, _: Arc<CachedObject>, new: Arc<CachedObject>) {
        self.mapper.queue.add((self.index, new.key().into()));
    }
    fn on_delete(&self, obj: Arc<CachedObject>, _: bool) {
        let item: MapItem = (self.index, obj.key().into());
        self.mapper.tombstones.lock().insert(item.clone(), obj);
        self.mapper.queue.add(item);
    }
}
