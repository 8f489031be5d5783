//! The timer heap behind `add_after`: keys waiting for their deadline, earliest deadline wins.
//!
//! client-go's `delaying_queue.go` keeps the same heap in a goroutine fed through a channel; here
//! it lives under the queue's lock (so `add_after` never blocks on a full channel) and one tokio
//! task per queue sleeps until the earliest deadline and moves due keys into the queue.

use std::{
    cmp::Ordering,
    collections::{BinaryHeap, HashMap, hash_map::Entry},
    hash::Hash,
    sync::{Arc, Weak},
};

use tokio::{sync::Notify, time::Instant};

/// Keys waiting for a deadline. A key appears once; a later `insert` can only move it earlier.
pub(super) struct Waiting<K> {
    /// Min-heap on (deadline, insertion order). Entries whose deadline no longer matches
    /// `deadlines` were superseded by an earlier one and are skipped when they surface.
    heap: BinaryHeap<Timer<K>>,
    deadlines: HashMap<K, Instant>,
    seq: u64,
}

struct Timer<K> {
    at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Timer<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<K> Eq for Timer<K> {}
impl<K> PartialOrd for Timer<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K> Ord for Timer<K> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest deadline first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<K> Default for Waiting<K> {
    fn default() -> Self {
        Self { heap: BinaryHeap::new(), deadlines: HashMap::new(), seq: 0 }
    }
}

impl<K: Clone + Eq + Hash> Waiting<K> {
    /// Schedules `key` at `at` unless it already waits for an earlier (or equal) deadline.
    /// Returns whether `at` became the earliest deadline, i.e. the timer must be re-armed.
    pub(super) fn insert(&mut self, key: K, at: Instant) -> bool {
        let key = match self.deadlines.entry(key) {
            Entry::Occupied(existing) if *existing.get() <= at => return false,
            Entry::Occupied(mut existing) => {
                existing.insert(at);
                existing.key().clone()
            }
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                vacant.insert(at);
                key
            }
        };
        self.seq += 1;
        let seq = self.seq;
        self.heap.push(Timer { at, seq, key });
        self.heap.peek().is_some_and(|top| top.seq == seq)
    }

    /// Removes and returns the next key whose deadline is at or before `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<K> {
        while self.heap.peek().is_some_and(|top| top.at <= now) {
            let timer = self.heap.pop()?;
            if self.deadlines.get(&timer.key) == Some(&timer.at) {
                self.deadlines.remove(&timer.key);
                return Some(timer.key);
            }
        }
        None
    }

    /// The earliest live deadline, dropping superseded entries on the way.
    pub(super) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(top) = self.heap.peek() {
            if self.deadlines.get(&top.key) == Some(&top.at) {
                return Some(top.at);
            }
            self.heap.pop();
        }
        None
    }

    /// Forgets every waiting key (on shutdown).
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.deadlines.clear();
    }

    /// How many keys are waiting.
    pub(super) fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// Whether no key is waiting.
    pub(super) fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }
}

/// The queue as seen by its timer task.
pub(super) trait Promote: Send + Sync {
    /// Moves every due key into the queue. Returns `Err(())` once the queue is shut down,
    /// otherwise the next deadline to sleep until.
    fn promote_due(&self) -> Result<Option<Instant>, ()>;
}

/// One per queue, started by the first delayed add: sleeps until the earliest deadline (or until
/// woken because an earlier one arrived) and promotes due keys. It holds the queue weakly and
/// ends when the queue shuts down or is dropped (both wake it).
pub(super) async fn run_timer(queue: Weak<dyn Promote>, wake: Arc<Notify>) {
    loop {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let next = {
            let Some(queue) = queue.upgrade() else { return };
            match queue.promote_due() {
                Ok(next) => next,
                Err(()) => return,
            }
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = &mut woken => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => woken.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_earliest_deadline_wins_for_the_same_key() {
        let now = Instant::now();
        let s = Duration::from_secs(1);
        let mut waiting = Waiting::default();
        assert!(waiting.insert("a", now + 10 * s));
        assert!(!waiting.insert("a", now + 20 * s), "a later deadline is ignored");
        assert!(waiting.insert("a", now + 5 * s), "an earlier one replaces it");
        assert!(!waiting.insert("b", now + 7 * s));
        assert_eq!(waiting.len(), 2);
        assert_eq!(waiting.next_deadline(), Some(now + 5 * s));
        assert_eq!(waiting.pop_due(now + 4 * s), None);
        assert_eq!(waiting.pop_due(now + 30 * s), Some("a"));
        assert_eq!(waiting.pop_due(now + 30 * s), Some("b"));
        assert_eq!(waiting.pop_due(now + 30 * s), None, "a's superseded entry is gone");
        assert_eq!(waiting.next_deadline(), None);
    }
}
