//! Event handlers and the per-handler buffer that delivers to them (client-go
//! `ResourceEventHandler` and `processorListener`).
//!
//! client-go gives every listener an unbounded ring buffer of notifications, so a stalled
//! consumer grows memory with the *event* count. Here each handler gets a buffer keyed by object
//! key that coalesces pending notifications: memory is bounded by the number of objects, the
//! watch never waits on a handler, and a handler still sees correct `old`/`new` pairs — `old` is
//! the state it last saw, `new` the latest.

use std::{
    collections::{HashMap, VecDeque},
    panic::AssertUnwindSafe,
    sync::Arc,
};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::object::CachedObject;

/// One change, as handed to a [`ResourceEventHandler`].
#[derive(Clone, Debug)]
pub enum Notification {
    /// An object appeared. `is_in_initial_list` is true for the initial list and for the
    /// replay a late subscriber gets of objects already cached.
    Add {
        /// The object.
        obj: Arc<CachedObject>,
        /// Whether it came from the initial list or a replay.
        is_in_initial_list: bool,
    },
    /// An object changed (or is re-delivered unchanged by a resync, then `old` is `new`).
    Update {
        /// The state this handler saw last.
        old: Arc<CachedObject>,
        /// The latest state.
        new: Arc<CachedObject>,
    },
    /// An object is gone.
    Delete {
        /// The last state known: the object from the delete event, or, when
        /// `final_state_unknown`, the last cached state.
        obj: Arc<CachedObject>,
        /// The deletion was inferred from a relist after the watch was down, so the final
        /// state was never seen (client-go's `DeletedFinalStateUnknown` tombstone).
        final_state_unknown: bool,
    },
}

/// Receives an informer's changes (client-go `ResourceEventHandler`). Methods run on the
/// handler's own delivery task, one at a time and in order per key; a slow handler delays only
/// itself. Keep them short (e.g. push a key onto a work queue). Any `Fn(Notification)` closure
/// is a handler.
pub trait ResourceEventHandler: Send + Sync + 'static {
    /// An object appeared.
    fn on_add(&self, obj: Arc<CachedObject>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }
    /// An object changed (`old` is `new` on a resync).
    fn on_update(&self, old: Arc<CachedObject>, new: Arc<CachedObject>) {
        let _ = (old, new);
    }
    /// An object is gone; see [`Notification::Delete`].
    fn on_delete(&self, last_known: Arc<CachedObject>, final_state_unknown: bool) {
        let _ = (last_known, final_state_unknown);
    }
}

impl<F: Fn(Notification) + Send + Sync + 'static> ResourceEventHandler for F {
    fn on_add(&self, obj: Arc<CachedObject>, is_in_initial_list: bool) {
        self(Notification::Add { obj, is_in_initial_list });
    }
    fn on_update(&self, old: Arc<CachedObject>, new: Arc<CachedObject>) {
        self(Notification::Update { old, new });
    }
    fn on_delete(&self, obj: Arc<CachedObject>, final_state_unknown: bool) {
        self(Notification::Delete { obj, final_state_unknown });
    }
}

/// Latest known state of a pending key.
enum Latest {
    Present { obj: Arc<CachedObject>, initial: bool },
    Deleted { obj: Arc<CachedObject>, final_state_unknown: bool },
}

struct Pending {
    /// What the handler last saw of this key (`None`: nothing, or it saw it deleted).
    seen: Option<Arc<CachedObject>>,
    latest: Latest,
}

#[derive(Default)]
struct Buffer {
    order: VecDeque<Arc<str>>,
    pending: HashMap<Arc<str>, Pending>,
}

/// A handler's dedup'ing buffer: at most one pending entry per object key.
#[derive(Default)]
pub(crate) struct Listener {
    buffer: Mutex<Buffer>,
    notify: Notify,
}

impl Listener {
    /// Records an add or update; `seen` is the previous cached state.
    pub(crate) fn upserted(&self, seen: Option<&Arc<CachedObject>>, obj: &Arc<CachedObject>, initial: bool) {
        let latest = Latest::Present { obj: obj.clone(), initial };
        self.enqueue(obj.key_arc(), seen.cloned(), latest);
    }

    /// Records a deletion.
    pub(crate) fn deleted(&self, obj: &Arc<CachedObject>, final_state_unknown: bool) {
        let latest = Latest::Deleted { obj: obj.clone(), final_state_unknown };
        self.enqueue(obj.key_arc(), Some(obj.clone()), latest);
    }

    /// Queues `update(obj, obj)` unless the key already has something pending.
    pub(crate) fn resync(&self, obj: &Arc<CachedObject>) {
        let mut buf = self.buffer.lock();
        if !buf.pending.contains_key(obj.key()) {
            let latest = Latest::Present { obj: obj.clone(), initial: false };
            buf.pending.insert(obj.key_arc().clone(), Pending { seen: Some(obj.clone()), latest });
            buf.order.push_back(obj.key_arc().clone());
            drop(buf);
            self.notify.notify_one();
        }
    }

    fn enqueue(&self, key: &Arc<str>, seen: Option<Arc<CachedObject>>, latest: Latest) {
        let mut buf = self.buffer.lock();
        if let Some(p) = buf.pending.get_mut(key) {
            // An object of the initial list stays "in the initial list" when an update
            // coalesces into its pending add.
            let was_initial = matches!(p.latest, Latest::Present { initial: true, .. });
            p.latest = match latest {
                Latest::Present { obj, initial } => Latest::Present { obj, initial: initial || was_initial },
                deleted @ Latest::Deleted { .. } => deleted,
            };
            return;
        }
        buf.pending.insert(key.clone(), Pending { seen, latest });
        buf.order.push_back(key.clone());
        drop(buf);
        self.notify.notify_one();
    }

    /// Number of keys waiting for delivery.
    pub(crate) fn pending(&self) -> usize {
        self.buffer.lock().order.len()
    }

    /// Takes the next key's coalesced notifications (zero, one, or delete+add when the object
    /// was replaced by a new one with the same name).
    fn pop(&self) -> Option<Vec<Notification>> {
        let mut buf = self.buffer.lock();
        let key = buf.order.pop_front()?;
        let p = buf.pending.remove(&key).expect("every queued key has a pending entry");
        Some(match (p.seen, p.latest) {
            (None, Latest::Present { obj, initial }) => vec![Notification::Add { obj, is_in_initial_list: initial }],
            // Replaced by a new object of the same name: the handler never saw the old one's
            // final state, so its delete is a tombstone.
            (Some(old), Latest::Present { obj, initial }) if old.meta().uid != obj.meta().uid => vec![
                Notification::Delete { obj: old, final_state_unknown: true },
                Notification::Add { obj, is_in_initial_list: initial },
            ],
            (Some(old), Latest::Present { obj, .. }) => vec![Notification::Update { old, new: obj }],
            (Some(_), Latest::Deleted { obj, final_state_unknown }) => {
                vec![Notification::Delete { obj, final_state_unknown }]
            }
            (None, Latest::Deleted { .. }) => Vec::new(),
        })
    }

    /// Delivers everything pending to `handler`, then waits for more; runs until aborted.
    pub(crate) async fn run(self: Arc<Self>, handler: Arc<dyn ResourceEventHandler>) {
        loop {
            while let Some(batch) = self.pop() {
                for n in batch {
                    deliver(handler.as_ref(), n);
                }
            }
            self.notify.notified().await;
        }
    }
}

fn deliver(handler: &dyn ResourceEventHandler, n: Notification) {
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| match n {
        Notification::Add { obj, is_in_initial_list } => handler.on_add(obj, is_in_initial_list),
        Notification::Update { old, new } => handler.on_update(old, new),
        Notification::Delete { obj, final_state_unknown } => handler.on_delete(obj, final_state_unknown),
    }));
    if result.is_err() {
        tracing::error!("informer event handler panicked; the event is dropped");
    }
}

#[cfg(test)]
#[path = "handler_tests.rs"]
mod tests;
