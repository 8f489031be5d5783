//! Triggers: informer events → keys of the plugin's for kind (controller-runtime's For, Owns
//! and Watches).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use super::ObjectKey;
use super::worker::Workers;
use crate::informer::{CachedObject, Enqueue, Informer, ResourceEventHandler};
use crate::plugin::api::PLUGIN_LABEL;
use crate::plugin::grants::KindRef;
use crate::queue::{Config as QueueConfig, Next, WorkQueue};

/// For: every change to an object enqueues its own key.
pub(crate) fn for_trigger(workers: Arc<Workers>) -> impl ResourceEventHandler {
    Enqueue::new(|obj: &CachedObject| Some(ObjectKey::of(obj)), move |key| workers.enqueue(key))
}

/// Owns: a change to an object enqueues the key of its controller owner, if that owner is of
/// kind `owner` (client-go's `handleObject`); the owner lives in the object's namespace when
/// `owner_namespaced`. An owner change enqueues both owners. An object another plugin made (its
/// `kubewasm.dev/plugin` mark is not `mark`) enqueues nothing: several plugins owning one kind
/// under the same owner would otherwise wake each other for every child (issue 45 measured ten
/// plugins making 46,000 reconciles for 5,040 Namespace–plugin pairs); unmarked objects still do.
pub(crate) fn owns_trigger(
    enqueue: impl Fn(ObjectKey) + Send + Sync + 'static,
    mark: &str,
    owner: KindRef,
    owner_namespaced: bool,
) -> impl ResourceEventHandler {
    let mark: Arc<str> = mark.into();
    let owner_key = move |obj: &CachedObject| {
        if obj.meta().labels.get(PLUGIN_LABEL).is_some_and(|made_by| made_by != &*mark) {
            return None;
        }
        let controller = obj.meta().controller_owner()?;
        let group = controller.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        (group == owner.group && controller.kind == owner.kind)
            .then(|| ObjectKey::new(if owner_namespaced { obj.namespace() } else { None }, &controller.name))
    };
    Enqueue::new(owner_key, enqueue).old_state_too()
}

/// A watched object waiting to be mapped: which watch, and its cache key.
type MapItem = (usize, Arc<str>);

/// Most retries of a failed `map` of one object before it is dropped (with its old states and
/// tombstone): 5, as client-go's `examples/workqueue` controller ("retries 5 times if something
/// goes wrong"). Protects the mapper from retrying a state `map` can never handle forever.
pub(crate) const MAX_MAP_RETRIES: u32 = 5;

/// Most old states of one object kept until it is mapped: the first (what the last map saw)
/// and the newest are always kept, states in between are dropped past this. Bounds memory when
/// an object changes faster than `map` runs.
pub(crate) const MAX_PENDING_STATES: usize = 8;

/// Watches: changed objects go through the plugin's `map` export, which names the keys to
/// reconcile. `map` is a wasm call, so handlers only enqueue the object's key on a deduplicating
/// queue (memory bounded by object count); a mapper task calls the plugin with the latest state
/// and with every earlier state it has not mapped yet: an update's old object (as
/// controller-runtime's `EnqueueRequestsFromMapFunc` maps both `ObjectOld` and `ObjectNew`, so a
/// key only the old state pointed to is reconciled too) and a deleted object's last state.
pub(crate) struct Mapper {
    queue: WorkQueue<MapItem>,
    watched: Vec<Informer>,
    /// The for kind's cache: a mapped key is queued only if it names an object there.
    for_kind: Informer,
    /// States to map besides the cached one (old states of updates, tombstones), until mapped.
    pending: Mutex<HashMap<MapItem, Vec<Arc<CachedObject>>>>,
}

/// Appends `state` to `states` unless it is already there, within [`MAX_PENDING_STATES`].
fn push_state(states: &mut Vec<Arc<CachedObject>>, state: Arc<CachedObject>) {
    // A resync replays an unchanged object: same resourceVersion, nothing new to map.
    let rv = state.meta().resource_version.as_deref();
    let same =
        |s: &Arc<CachedObject>| Arc::ptr_eq(s, &state) || (rv.is_some() && s.meta().resource_version.as_deref() == rv);
    if states.iter().any(same) {
        return;
    }
    if states.len() >= MAX_PENDING_STATES {
        states.remove(1);
    }
    states.push(state);
}

impl Mapper {
    pub(crate) fn new(name: &str, watched: Vec<Informer>, for_kind: Informer) -> Arc<Self> {
        let queue = WorkQueue::new(QueueConfig::default().name(format!("{name}-map")));
        Arc::new(Self { queue, watched, for_kind, pending: Mutex::default() })
    }

    /// The handler for watch number `index`.
    pub(crate) fn trigger(self: &Arc<Self>, index: usize) -> WatchTrigger {
        WatchTrigger { mapper: self.clone(), index }
    }

    fn remember(&self, item: &MapItem, state: Arc<CachedObject>) {
        push_state(self.pending.lock().entry(item.clone()).or_default(), state);
    }

    /// Puts `earlier` back before the states recorded while they were being mapped.
    fn restore(&self, item: &MapItem, earlier: Vec<Arc<CachedObject>>) {
        let mut pending = self.pending.lock();
        let slot = pending.entry(item.clone()).or_default();
        let newer = std::mem::replace(slot, earlier);
        for state in newer {
            push_state(slot, state);
        }
        if slot.is_empty() {
            pending.remove(item);
        }
    }

    /// Maps queued objects until the queue shuts down.
    pub(crate) async fn run(self: Arc<Self>, workers: Arc<Workers>) {
        crate::queue::run(&self.queue, |item| self.map_one(item, &workers)).await;
    }

    /// Maps every pending state of `item` and its cached state; enqueues the union of their
    /// keys. A failure retries them all with backoff, at most [`MAX_MAP_RETRIES`] times.
    async fn map_one(&self, item: MapItem, workers: &Workers) -> Next {
        let item = &item;
        let informer = &self.watched[item.0];
        let earlier = self.pending.lock().remove(item).unwrap_or_default();
        let mut states = earlier.clone();
        if let Some(current) = informer.store().get_by_key(&item.1) {
            push_state(&mut states, current);
        }
        let plugin = workers.plugin();
        // A confined plugin maps only what it may see (old states and tombstones included).
        states.retain(|s| plugin.sees(informer.gvk(), s.namespace(), s.name()));
        let mut keys = BTreeSet::new();
        let for_kind = self.for_kind.store();
        let mut failed = None;
        for state in &states {
            match plugin.map(informer.gvk(), state.json()).await {
                Ok(mapped) => {
                    for key in mapped {
                        match key {
                            // A key that names no cached object of the for kind has nothing to
                            // reconcile (the object's own add or delete queues it); queued, a
                            // plugin mapping every change to new names would grow host memory
                            // without bound (held-out round of issue 49).
                            Ok(key) if for_kind.get(key.namespace(), key.name()).is_some() => {
                                keys.insert(key);
                            }
                            Ok(_) => {}
                            Err(err) => {
                                tracing::warn!(error = %err, object = %item.1, "map returned an invalid key; skipped")
                            }
                        }
                    }
                }
                Err(err) => {
                    failed = Some(err);
                    break;
                }
            }
        }
        if let Some(err) = failed {
            let failures = self.queue.num_requeues(item) + 1;
            if failures <= MAX_MAP_RETRIES {
                tracing::warn!(error = %err, object = %item.1, failures, "map failed; retrying with backoff");
                self.restore(item, earlier);
                return Next::Backoff;
            }
            tracing::warn!(error = %err, object = %item.1, failures, "map failed too often; dropping the object's changes");
            workers.metrics().map_dropped.inc();
        }
        for key in keys {
            workers.enqueue(key);
        }
        Next::Forget
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
    fn on_update(&self, old: Arc<CachedObject>, new: Arc<CachedObject>) {
        let item: MapItem = (self.index, new.key().into());
        self.mapper.remember(&item, old);
        self.mapper.queue.add(item);
    }
    fn on_delete(&self, obj: Arc<CachedObject>, _: bool) {
        let item: MapItem = (self.index, obj.key().into());
        self.mapper.remember(&item, obj);
        self.mapper.queue.add(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(rv: u32) -> Arc<CachedObject> {
        let json = format!(r#"{{"metadata":{{"name":"a","namespace":"n","resourceVersion":"{rv}"}}}}"#);
        Arc::new(CachedObject::from_json(json.into_bytes()).unwrap())
    }

    fn versions(states: &[Arc<CachedObject>]) -> Vec<&str> {
        states.iter().map(|s| s.meta().resource_version.as_deref().unwrap()).collect()
    }

    /// A ConfigMap in `n` controlled by Namespace `n`, with `labels` (JSON).
    fn child(labels: &str) -> Arc<CachedObject> {
        let json = format!(
            r#"{{"metadata":{{"name":"c","namespace":"n","labels":{labels},"ownerReferences":[{{"apiVersion":"v1","kind":"Namespace","name":"n","uid":"u","controller":true}}]}}}}"#
        );
        Arc::new(CachedObject::from_json(json.into_bytes()).unwrap())
    }

    #[test]
    fn an_owned_object_wakes_its_owner_unless_another_plugin_made_it() {
        let keys = Arc::new(Mutex::new(Vec::new()));
        let seen = keys.clone();
        let namespace = KindRef { group: String::new(), kind: "Namespace".into() };
        let trigger = owns_trigger(move |key| seen.lock().push(key), "mine", namespace, false);
        trigger.on_add(child(r#"{"kubewasm.dev/plugin":"mine"}"#), false);
        trigger.on_add(child("{}"), false);
        assert_eq!(keys.lock().len(), 2, "its own child and an unmarked one wake the owner");
        trigger.on_add(child(r#"{"kubewasm.dev/plugin":"other"}"#), false);
        trigger.on_update(
            child(r#"{"kubewasm.dev/plugin":"other"}"#),
            child(r#"{"kubewasm.dev/plugin":"other","a":"b"}"#),
        );
        trigger.on_delete(child(r#"{"kubewasm.dev/plugin":"other"}"#), false);
        assert_eq!(keys.lock().len(), 2, "another plugin's child wakes nothing");
        assert_eq!(keys.lock()[0], ObjectKey::new(None, "n"));
    }

    #[test]
    fn pending_states_skip_repeats_and_keep_the_first_and_the_newest_past_the_bound() {
        let mut states = Vec::new();
        push_state(&mut states, state(1));
        push_state(&mut states, state(1));
        assert_eq!(versions(&states), ["1"], "a resync of the same version adds nothing");
        for rv in 2..=20 {
            push_state(&mut states, state(rv));
        }
        assert_eq!(states.len(), MAX_PENDING_STATES);
        assert_eq!(versions(&states)[0], "1", "the state the last map saw stays");
        assert_eq!(versions(&states)[MAX_PENDING_STATES - 1], "20", "the newest stays");
    }
}
