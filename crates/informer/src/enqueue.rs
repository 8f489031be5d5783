//! The one enqueue primitive every trigger is built from: events → keys → a queue
//! (controller-runtime's `handler.EnqueueRequestsFromMapFunc`).

use std::sync::Arc;

use crate::handler::ResourceEventHandler;
use crate::object::CachedObject;

/// A handler that maps every object an event names to keys and hands each key to `enqueue`.
/// controller-runtime's `EnqueueRequestForObject` is the map to the object's own key, its
/// `EnqueueRequestForOwner` the map to the controller owner's key. An update maps the new state,
/// and with [`Enqueue::old_state_too`] the old one as well, so an object whose keys change (a new
/// owner) is seen by both. Filters (predicates, selectors) wrap it as they wrap any handler.
///
/// `Enqueue::new(|obj| Some(ObjectKey::of(obj)), move |key| queue.add(key))`
pub struct Enqueue<M, E> {
    map: M,
    enqueue: E,
    old_too: bool,
}

impl<M, E> Enqueue<M, E> {
    /// Keys from `map` for every object an event names, handed to `enqueue`; an update maps only
    /// its new state.
    pub fn new(map: M, enqueue: E) -> Self {
        Self { map, enqueue, old_too: false }
    }

    /// Maps an update's old state too.
    #[must_use]
    pub fn old_state_too(mut self) -> Self {
        self.old_too = true;
        self
    }
}

impl<M, E, I, K> Enqueue<M, E>
where
    M: Fn(&CachedObject) -> I,
    I: IntoIterator<Item = K>,
    E: Fn(K),
{
    fn each(&self, obj: &CachedObject) {
        for key in (self.map)(obj) {
            (self.enqueue)(key);
        }
    }
}

impl<M, E, I, K> ResourceEventHandler for Enqueue<M, E>
where
    M: Fn(&CachedObject) -> I + Send + Sync + 'static,
    I: IntoIterator<Item = K>,
    E: Fn(K) + Send + Sync + 'static,
{
    fn on_add(&self, obj: Arc<CachedObject>, _: bool) {
        self.each(&obj);
    }

    fn on_update(&self, old: Arc<CachedObject>, new: Arc<CachedObject>) {
        if self.old_too {
            self.each(&old);
        }
        self.each(&new);
    }

    fn on_delete(&self, obj: Arc<CachedObject>, _: bool) {
        self.each(&obj);
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;
    use crate::key::ObjectKey;

    fn object(name: &str, owner: &str) -> Arc<CachedObject> {
        let json = format!(
            r#"{{"metadata":{{"namespace":"n","name":"{name}","ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"{owner}","uid":"u-{owner}","controller":true}}]}}}}"#
        );
        Arc::new(CachedObject::from_json(json.into_bytes()).unwrap())
    }

    fn owner_key(obj: &CachedObject) -> Option<ObjectKey> {
        obj.meta().controller_owner().map(|owner| ObjectKey::new(obj.namespace(), &owner.name))
    }

    #[test]
    fn each_event_enqueues_the_keys_its_object_maps_to() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let handler = Enqueue::new(|obj: &CachedObject| Some(ObjectKey::of(obj)), move |key| sink.lock().push(key));
        handler.on_add(object("a", "x"), true);
        handler.on_update(object("a", "x"), object("a", "y"));
        handler.on_delete(object("b", "x"), false);
        let keys: Vec<_> = seen.lock().iter().map(ToString::to_string).collect();
        assert_eq!(keys, ["n/a", "n/a", "n/b"]);
    }

    #[test]
    fn an_update_maps_its_old_state_only_when_asked() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (new_only, both) = (seen.clone(), seen.clone());
        Enqueue::new(owner_key, move |key| new_only.lock().push(key)).on_update(object("a", "x"), object("a", "y"));
        assert_eq!(seen.lock().drain(..).map(|k| k.to_string()).collect::<Vec<_>>(), ["n/y"]);
        Enqueue::new(owner_key, move |key| both.lock().push(key))
            .old_state_too()
            .on_update(object("a", "x"), object("a", "y"));
        assert_eq!(seen.lock().drain(..).map(|k| k.to_string()).collect::<Vec<_>>(), ["n/x", "n/y"]);
    }

    #[test]
    fn an_object_that_maps_to_no_key_enqueues_nothing() {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = seen.clone();
        let handler = Enqueue::new(|_: &CachedObject| Vec::<String>::new(), move |key| sink.lock().push(key));
        handler.on_add(object("a", "x"), false);
        assert!(seen.lock().is_empty());
    }
}
