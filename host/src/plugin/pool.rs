//! Per-plugin shares of the engine's instance pool: each plugin version reserves the slots its
//! concurrency needs at load, and its calls wait for one of its own slots, never another's.
//!
//! wasmtime's pooling allocator has a fixed number of slots shared by every store; without
//! shares, one slow plugin at high concurrency fills them and every other plugin's calls fail to
//! instantiate. The ledger is hand-written (wasmtime has no per-tenant quota); the waiting is a
//! tokio [`Semaphore`].

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::Component;

/// Every version's reservation would not fit in the pool. The version is rejected; the versions
/// serving keep their slots.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the instance pool cannot reserve {asked} more slots for plugin `{plugin}`: {reserved} of {capacity} are reserved by loaded plugin versions; lower its maxConcurrent (or --max-concurrent-cap) or raise --pool-instances"
)]
pub struct PoolFull {
    /// The plugin.
    pub plugin: String,
    /// Slots asked for.
    pub asked: u32,
    /// Slots already reserved by others.
    pub reserved: u32,
    /// The pool's size.
    pub capacity: u32,
}

/// The host-wide count of reserved pool slots. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Ledger(Arc<LedgerInner>);

#[derive(Debug)]
struct LedgerInner {
    capacity: u32,
    reserved: Mutex<u32>,
}

impl Ledger {
    /// A ledger for a pool of `capacity` component instances.
    pub(crate) fn new(capacity: u32) -> Self {
        Self(Arc::new(LedgerInner { capacity, reserved: Mutex::new(0) }))
    }

    /// Slots reserved now, by every loaded plugin version.
    pub(crate) fn reserved(&self) -> u32 {
        *self.0.reserved.lock()
    }

    fn take(&self, plugin: &str, slots: u32) -> Result<(), PoolFull> {
        let mut reserved = self.0.reserved.lock();
        match reserved.checked_add(slots).filter(|&total| total <= self.0.capacity) {
            Some(total) => {
                *reserved = total;
                Ok(())
            }
            None => {
                Err(PoolFull { plugin: plugin.into(), asked: slots, reserved: *reserved, capacity: self.0.capacity })
            }
        }
    }

    /// Reserves `instances` concurrent instances of a component that takes `weight` slots each.
    pub(crate) fn reserve(&self, plugin: &str, weight: u32, instances: u32) -> Result<Share, PoolFull> {
        let slots = weight.saturating_mul(instances);
        self.take(plugin, slots)?;
        let semaphore = Arc::new(Semaphore::new(instances as usize));
        Ok(Share { ledger: self.clone(), plugin: plugin.into(), weight, instances, slots, semaphore })
    }
}

/// One plugin version's reserved slots; given back when the version is dropped (after its last
/// call finished and its idle instances went).
#[derive(Debug)]
pub(crate) struct Share {
    ledger: Ledger,
    plugin: String,
    weight: u32,
    instances: u32,
    slots: u32,
    semaphore: Arc<Semaphore>,
}

impl Share {
    /// Grows the share to `instances` concurrent instances (a share never shrinks).
    pub(crate) fn grow_to(&mut self, instances: u32) -> Result<(), PoolFull> {
        let Some(more) = instances.checked_sub(self.instances).filter(|&n| n > 0) else { return Ok(()) };
        let slots = self.weight.saturating_mul(more);
        self.ledger.take(&self.plugin, slots)?;
        self.slots += slots;
        self.instances = instances;
        self.semaphore.add_permits(more as usize);
        Ok(())
    }

    /// Waits for one of the share's instances. Hold the permit for as long as the instance
    /// lives, idle or not, and drop it after the store.
    pub(crate) async fn acquire(&self) -> OwnedSemaphorePermit {
        self.semaphore.clone().acquire_owned().await.expect("the share's semaphore is never closed")
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        *self.ledger.0.reserved.lock() -= self.slots;
    }
}

/// Pool slots one instance of `component` takes. The pool holds one linear memory and four
/// tables per component instance (`engine.rs`), so a component with more memories or tables per
/// instance counts as several. Core instances are not weighed: wasmtime does not tell a
/// component's count, and the pool's four per slot fit the Rust, Python and JavaScript
/// components the SDKs build.
pub(crate) fn weight(component: &Component) -> u32 {
    component.resources_required().map_or(1, |r| r.num_memories.max(r.num_tables.div_ceil(4)).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_past_the_pool_are_refused_and_say_why() {
        let ledger = Ledger::new(10);
        let a = ledger.reserve("a", 2, 4).unwrap();
        let err = ledger.reserve("b", 1, 3).unwrap_err();
        assert_eq!(err, PoolFull { plugin: "b".into(), asked: 3, reserved: 8, capacity: 10 });
        assert!(err.to_string().contains("--pool-instances"), "{err}");
        let b = ledger.reserve("b", 1, 2).unwrap();
        assert_eq!(ledger.reserved(), 10);
        drop(a);
        assert_eq!(ledger.reserved(), 2, "a dropped version gives its slots back");
        drop(b);
        assert_eq!(ledger.reserved(), 0);
    }

    #[test]
    fn a_share_grows_only_if_the_pool_has_room() {
        let ledger = Ledger::new(5);
        let mut share = ledger.reserve("a", 1, 1).unwrap();
        share.grow_to(4).unwrap();
        assert_eq!((share.instances, ledger.reserved()), (4, 4));
        let err = share.grow_to(6).unwrap_err();
        assert_eq!((err.asked, err.reserved), (2, 4));
        assert_eq!((share.instances, ledger.reserved()), (4, 4), "a refused growth leaves the share as it was");
        share.grow_to(2).unwrap();
        assert_eq!(share.instances, 4, "a share never shrinks");
    }

    #[tokio::test(start_paused = true)]
    async fn a_plugin_at_its_share_waits_for_its_own_instance() {
        let ledger = Ledger::new(3);
        let share = ledger.reserve("a", 1, 2).unwrap();
        let first = share.acquire().await;
        let _second = share.acquire().await;
        let third = tokio::time::timeout(std::time::Duration::from_secs(1), share.acquire()).await;
        assert!(third.is_err(), "a third instance waited");
        drop(first);
        let _third = share.acquire().await;
    }
}
