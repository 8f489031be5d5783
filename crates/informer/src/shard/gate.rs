//! The shard gate: which hash range this replica serves now, and which it caches; workers
//! reconcile a key only under the gate, so a range change waits for their reconciles to end.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use tokio::sync::{OwnedRwLockReadGuard, RwLock, watch};

use super::range::{HashRange, key_hash};

/// Shared by the membership task (which moves ranges) and every controller's workers. Cloning
/// is cheap; clones share the state. The default gate (no sharding) admits every key.
#[derive(Clone, Debug, Default)]
pub struct ShardGate {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    /// The range workers may reconcile; `None` while serving nothing. Readers are reconciles in
    /// flight; the membership task takes it for writing to change it, which waits for them.
    serving: Arc<RwLock<Option<HashRange>>>,
    /// The range sharded informers list and watch; `None` until this replica has one.
    caching: watch::Sender<Option<HashRange>>,
    /// Bumped whenever `serving` grows: controllers requeue what they cache in the new range.
    resync: watch::Sender<u64>,
    /// Per sharded informer, the range its last complete list covered.
    listed: parking_lot::Mutex<(u64, HashMap<u64, Option<HashRange>>)>,
    /// `kubewasm_shard_client_side_filter{kind}`: 1 while the server ignores the selector.
    client_side_filter: IntGaugeVec,
}

/// A sharded informer's report of the range its cache holds; unregisters when dropped.
#[derive(Debug)]
pub struct ListedRange {
    inner: Arc<Inner>,
    id: u64,
}

impl ListedRange {
    /// The informer's cache now holds exactly `range` (a list with its selector completed).
    pub fn listed(&self, range: HashRange) {
        self.inner.listed.lock().1.insert(self.id, Some(range));
    }
}

impl Drop for ListedRange {
    fn drop(&mut self) {
        self.inner.listed.lock().1.remove(&self.id);
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardGate").field("caching", &*self.caching.borrow()).finish_non_exhaustive()
    }
}

/// Proof that a key may be reconciled now; the range cannot change until it is dropped.
#[derive(Debug)]
pub struct Admission(#[allow(dead_code)] Option<OwnedRwLockReadGuard<Option<HashRange>>>);

impl ShardGate {
    /// A gate for a sharded replica, serving and caching nothing yet.
    pub fn sharded() -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                serving: Arc::new(RwLock::new(None)),
                caching: watch::Sender::new(None),
                resync: watch::Sender::new(0),
                listed: parking_lot::Mutex::default(),
                client_side_filter: IntGaugeVec::new(
                    Opts::new(
                        "kubewasm_shard_client_side_filter",
                        "1 while the API server ignores the shard selector for a kind and the host filters its list and watch itself",
                    ),
                    &["kind"],
                )
                .expect("a valid metric"),
            })),
        }
    }

    /// Whether this replica shards at all.
    pub fn is_sharded(&self) -> bool {
        self.inner.is_some()
    }

    /// Admits the queue key `namespace/name` if its shard hash is in the range served now;
    /// `None` if another replica owns it (the caller drops the key: its owner has it queued).
    pub async fn admit(&self, key: &str) -> Option<Admission> {
        let Some(inner) = &self.inner else { return Some(Admission(None)) };
        let guard = inner.serving.clone().read_owned().await;
        guard.is_some_and(|range| range.contains(key_hash(key))).then(|| Admission(Some(guard)))
    }

    /// The range served now (`None`: nothing, or not sharded).
    pub async fn serving(&self) -> Option<HashRange> {
        *self.inner.as_ref()?.serving.read().await
    }

    /// Changes the served range once every reconcile in flight has finished; none starts
    /// meanwhile (tokio's `RwLock` is fair: waiting readers queue behind the writer).
    pub async fn serve(&self, range: Option<HashRange>) {
        let Some(inner) = &self.inner else { return };
        let mut serving = inner.serving.write().await;
        let grew = range.is_some_and(|new| *serving != Some(new));
        *serving = range;
        drop(serving);
        if grew {
            inner.resync.send_modify(|n| *n += 1);
        }
    }

    /// Sets the range sharded informers list and watch (they relist when it changes).
    pub fn cache(&self, range: HashRange) {
        if let Some(inner) = &self.inner {
            inner.caching.send_if_modified(|current| current.replace(range) != Some(range));
        }
    }

    /// The range sharded informers follow; `None` if not sharded.
    pub fn caching(&self) -> Option<watch::Receiver<Option<HashRange>>> {
        self.inner.as_ref().map(|inner| inner.caching.subscribe())
    }

    /// Registers `kubewasm_shard_client_side_filter` on `registry` (no-op if not sharded).
    pub fn register_metrics(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        match &self.inner {
            Some(inner) => registry.register(Box::new(inner.client_side_filter.clone())),
            None => Ok(()),
        }
    }

    /// The gauge saying whether `kind`'s informer filters on the client.
    pub fn client_side_filter(&self, kind: &str) -> Option<IntGauge> {
        Some(self.inner.as_ref()?.client_side_filter.with_label_values(&[kind]))
    }

    /// Registers a sharded informer, which reports each range it has listed; `None` if not
    /// sharded.
    pub fn register_informer(&self) -> Option<ListedRange> {
        let inner = self.inner.as_ref()?;
        let mut listed = inner.listed.lock();
        listed.0 += 1;
        let id = listed.0;
        listed.1.insert(id, None);
        Some(ListedRange { inner: inner.clone(), id })
    }

    /// Whether every sharded informer holds exactly `range`: serving it before would show a
    /// reconcile an object of the range as missing (deleted) while its list is under way.
    pub fn listed_everywhere(&self, range: HashRange) -> bool {
        self.inner.as_ref().is_none_or(|inner| inner.listed.lock().1.values().all(|l| *l == Some(range)))
    }

    /// Changes each time the served range grows; `None` if not sharded.
    pub fn resyncs(&self) -> Option<watch::Receiver<u64>> {
        self.inner.as_ref().map(|inner| inner.resync.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::super::range::{fnv1a64, split};
    use super::*;

    fn owner_of(namespace: &str, ranges: &[HashRange]) -> HashRange {
        *ranges.iter().find(|r| r.contains(fnv1a64(namespace))).unwrap()
    }

    #[tokio::test]
    async fn an_unsharded_gate_admits_every_key() {
        assert!(ShardGate::default().admit("any/key").await.is_some());
    }

    #[tokio::test]
    async fn a_sharded_gate_admits_only_keys_in_the_served_range() {
        let gate = ShardGate::sharded();
        assert!(gate.admit("a/x").await.is_none(), "serving nothing admits nothing");
        let ranges = split(2);
        let mine = owner_of("a", &ranges);
        gate.serve(Some(mine)).await;
        assert!(gate.admit("a/x").await.is_some());
        let other = ["b", "ns-0", "team-a", "kube-system"].into_iter().find(|ns| !mine.contains(fnv1a64(ns))).unwrap();
        assert!(gate.admit(&format!("{other}/x")).await.is_none());
    }

    #[tokio::test]
    async fn a_range_changes_only_after_the_reconciles_in_flight_end() {
        let gate = ShardGate::sharded();
        gate.serve(Some(HashRange::FULL)).await;
        let admission = gate.admit("a/x").await.unwrap();
        let change = tokio::spawn({
            let gate = gate.clone();
            async move { gate.serve(None).await }
        });
        tokio::task::yield_now().await;
        assert!(!change.is_finished(), "the change waits for the reconcile in flight");
        drop(admission);
        change.await.unwrap();
        assert!(gate.admit("a/x").await.is_none());
    }

    #[test]
    fn a_range_is_listed_once_every_sharded_informer_listed_it() {
        let gate = ShardGate::sharded();
        let [a, b] = split(2)[..] else { panic!() };
        assert!(gate.listed_everywhere(a), "no sharded informer yet");
        let (one, two) = (gate.register_informer().unwrap(), gate.register_informer().unwrap());
        one.listed(a);
        assert!(!gate.listed_everywhere(a));
        two.listed(b);
        assert!(!gate.listed_everywhere(a));
        two.listed(a);
        assert!(gate.listed_everywhere(a));
        drop(one);
        assert!(!gate.listed_everywhere(b));
    }

    #[tokio::test]
    async fn growing_the_served_range_asks_for_a_resync() {
        let gate = ShardGate::sharded();
        let mut resyncs = gate.resyncs().unwrap();
        gate.serve(Some(HashRange::FULL)).await;
        assert!(resyncs.has_changed().unwrap());
        resyncs.mark_unchanged();
        gate.serve(None).await;
        assert!(!resyncs.has_changed().unwrap(), "stopping needs no resync");
    }
}
