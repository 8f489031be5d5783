//! Per-plugin shares of the engine's instance pool and of the host's plugin memory budget: each
//! plugin version reserves the slots and the linear memory its concurrency needs at load, and
//! its calls wait for one of its own instances, never another's.
//!
//! wasmtime's pooling allocator has a fixed number of slots shared by every store; without
//! shares, one slow plugin at high concurrency fills them and every other plugin's calls fail to
//! instantiate. Likewise each instance may grow its memories to `limits.memoryBytes`: a plugin's
//! budget is its instances × that, and the sum over loaded versions may not pass the host's
//! budget (`--plugin-memory-budget`, by default from the container's memory limit), so sixteen
//! reconciles near their per-instance limit cannot take the host past its own. The ledger is
//! hand-written (wasmtime has no per-tenant quota); the waiting is a tokio [`Semaphore`].

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::Component;

use super::metrics::PluginMetrics;

/// Every version's reservation would not fit in the pool or the memory budget. The version is
/// rejected; the versions serving keep their reservations.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolFull {
    /// Not enough pool slots.
    #[error(
        "the instance pool cannot reserve {asked} more slots for plugin `{plugin}`: {reserved} of {capacity} are reserved by loaded plugin versions; lower its maxConcurrent (or --max-concurrent-cap) or raise --pool-instances"
    )]
    Slots {
        /// The plugin.
        plugin: String,
        /// Slots asked for.
        asked: u32,
        /// Slots already reserved by others.
        reserved: u32,
        /// The pool's size.
        capacity: u32,
    },
    /// Not enough of the host's plugin memory budget.
    #[error(
        "plugin `{plugin}` needs {} MiB more linear memory (each instance may grow to limits.memoryBytes), but {} of the host's {} MiB plugin memory budget are reserved by loaded plugin versions; lower its maxConcurrent or limits.memoryBytes, or raise --plugin-memory-budget",
        .asked >> 20, .reserved >> 20, .budget >> 20
    )]
    Memory {
        /// The plugin.
        plugin: String,
        /// Bytes asked for.
        asked: u64,
        /// Bytes already reserved.
        reserved: u64,
        /// The host's budget.
        budget: u64,
    },
}

/// The host-wide count of reserved pool slots and memory. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Ledger(Arc<LedgerInner>);

#[derive(Debug)]
struct LedgerInner {
    capacity: u32,
    /// The plugins' memory budget in bytes; `None`: unbounded.
    budget: Option<u64>,
    /// Slots and bytes reserved.
    reserved: Mutex<(u32, u64)>,
    /// Where each plugin's reserved bytes are shown.
    metrics: PluginMetrics,
}

impl Ledger {
    /// A ledger for a pool of `capacity` component instances and `budget` bytes of plugin memory,
    /// each plugin's reservation shown in `metrics`.
    pub(crate) fn new(capacity: u32, budget: Option<u64>, metrics: PluginMetrics) -> Self {
        metrics.memory_budget(budget);
        Self(Arc::new(LedgerInner { capacity, budget, reserved: Mutex::new((0, 0)), metrics }))
    }

    /// Slots reserved now, by every loaded plugin version.
    pub(crate) fn reserved(&self) -> u32 {
        self.0.reserved.lock().0
    }

    /// Bytes of linear memory reserved now, by every loaded plugin version.
    #[cfg(test)]
    pub(crate) fn reserved_bytes(&self) -> u64 {
        self.0.reserved.lock().1
    }

    fn take(&self, plugin: &str, slots: u32, bytes: u64) -> Result<(), PoolFull> {
        let mut reserved = self.0.reserved.lock();
        let (held_slots, held_bytes) = *reserved;
        let Some(total) = held_slots.checked_add(slots).filter(|&total| total <= self.0.capacity) else {
            let capacity = self.0.capacity;
            return Err(PoolFull::Slots { plugin: plugin.into(), asked: slots, reserved: held_slots, capacity });
        };
        let total_bytes = held_bytes.saturating_add(bytes);
        if let Some(budget) = self.0.budget.filter(|&budget| total_bytes > budget) {
            return Err(PoolFull::Memory { plugin: plugin.into(), asked: bytes, reserved: held_bytes, budget });
        }
        *reserved = (total, total_bytes);
        self.0.metrics.memory_reserved(plugin, i64::try_from(bytes).unwrap_or(i64::MAX));
        Ok(())
    }

    /// Reserves `instances` concurrent instances of a component that takes `weight` slots and
    /// may grow to `bytes` of linear memory each.
    pub(crate) fn reserve(&self, plugin: &str, weight: Weight, instances: u32) -> Result<Share, PoolFull> {
        let (slots, bytes) = weight.times(instances);
        self.take(plugin, slots, bytes)?;
        let semaphore = Arc::new(Semaphore::new(instances as usize));
        Ok(Share { ledger: self.clone(), plugin: plugin.into(), weight, instances, slots, bytes, semaphore })
    }
}

/// What one instance of a plugin version takes: pool slots and linear memory at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Weight {
    /// Pool slots.
    pub(crate) slots: u32,
    /// Bytes its memories may grow to.
    pub(crate) bytes: u64,
}

impl Weight {
    fn times(self, instances: u32) -> (u32, u64) {
        (self.slots.saturating_mul(instances), self.bytes.saturating_mul(u64::from(instances)))
    }
}

/// One plugin version's reserved slots; given back when the version is dropped (after its last
/// call finished and its idle instances went).
#[derive(Debug)]
pub(crate) struct Share {
    ledger: Ledger,
    plugin: String,
    weight: Weight,
    instances: u32,
    slots: u32,
    bytes: u64,
    semaphore: Arc<Semaphore>,
}

impl Share {
    /// Grows the share to `instances` concurrent instances (a share never shrinks).
    pub(crate) fn grow_to(&mut self, instances: u32) -> Result<(), PoolFull> {
        let Some(more) = instances.checked_sub(self.instances).filter(|&n| n > 0) else { return Ok(()) };
        let (slots, bytes) = self.weight.times(more);
        self.ledger.take(&self.plugin, slots, bytes)?;
        self.slots += slots;
        self.bytes += bytes;
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
        let mut reserved = self.ledger.0.reserved.lock();
        reserved.0 -= self.slots;
        reserved.1 -= self.bytes;
        self.ledger.0.metrics.memory_reserved(&self.plugin, -i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

/// Linear memories one pool slot holds: a slot is one component instance, whatever its
/// memories. 2: every component the SDKs build has one, and a composed component (a library or
/// adapter with its own memory) fits. Each memory slot reserves ≈ 4 GiB of address space (no
/// bounds checks): 4 TiB at the engine's default of 1000 instances with one per slot, 8 TiB
/// with two, of x86-64's 128 TiB.
pub const MEMORIES_PER_INSTANCE: u32 = 2;

/// Tables one pool slot holds (the SDKs' components have two).
pub const TABLES_PER_INSTANCE: u32 = 4;

/// A component with more memories or tables per instance than a pool slot holds; rejected at
/// load instead of failing at its first instantiation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the component has {memories} linear memories and {tables} tables per instance; a pool slot holds at most {MEMORIES_PER_INSTANCE} and {TABLES_PER_INSTANCE}"
)]
pub struct Oversized {
    /// Its memories.
    pub memories: u32,
    /// Its tables.
    pub tables: u32,
}

/// What one instance of `component` takes under `memory_bytes` per memory: one pool slot (the
/// pool holds [`MEMORIES_PER_INSTANCE`] memories and [`TABLES_PER_INSTANCE`] tables per slot,
/// `engine.rs`), and `memory_bytes` for each of its memories. Before, a slot held one memory,
/// so a component of several memories reserved several slots per instance (issue 33). Core
/// instances are not weighed: wasmtime does not tell a component's count, and the pool's four
/// per slot fit the Rust, Python, JavaScript and Go components the SDKs build.
pub(crate) fn weight(component: &Component, memory_bytes: u64) -> Result<Weight, Oversized> {
    let (memories, tables) = component.resources_required().map_or((1, 0), |r| (r.num_memories, r.num_tables));
    if memories > MEMORIES_PER_INSTANCE || tables > TABLES_PER_INSTANCE {
        return Err(Oversized { memories, tables });
    }
    Ok(Weight { slots: 1, bytes: memory_bytes.saturating_mul(u64::from(memories.max(1))) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(n: u32) -> Weight {
        Weight { slots: n, bytes: 0 }
    }

    #[test]
    fn reservations_past_the_pool_are_refused_and_say_why() {
        let ledger = Ledger::new(10, None, PluginMetrics::default());
        let a = ledger.reserve("a", slots(2), 4).unwrap();
        let err = ledger.reserve("b", slots(1), 3).unwrap_err();
        assert_eq!(err, PoolFull::Slots { plugin: "b".into(), asked: 3, reserved: 8, capacity: 10 });
        assert!(err.to_string().contains("--pool-instances"), "{err}");
        let b = ledger.reserve("b", slots(1), 2).unwrap();
        assert_eq!(ledger.reserved(), 10);
        drop(a);
        assert_eq!(ledger.reserved(), 2, "a dropped version gives its slots back");
        drop(b);
        assert_eq!(ledger.reserved(), 0);
    }

    #[test]
    fn a_share_grows_only_if_the_pool_has_room() {
        let ledger = Ledger::new(5, None, PluginMetrics::default());
        let mut share = ledger.reserve("a", slots(1), 1).unwrap();
        share.grow_to(4).unwrap();
        assert_eq!((share.instances, ledger.reserved()), (4, 4));
        let err = share.grow_to(6).unwrap_err();
        assert!(matches!(err, PoolFull::Slots { asked: 2, reserved: 4, .. }), "{err:?}");
        assert_eq!((share.instances, ledger.reserved()), (4, 4), "a refused growth leaves the share as it was");
        share.grow_to(2).unwrap();
        assert_eq!(share.instances, 4, "a share never shrinks");
    }

    #[test]
    fn a_plugins_instances_times_their_memory_must_fit_the_hosts_budget() {
        const MIB: u64 = 1 << 20;
        let ledger = Ledger::new(100, Some(512 * MIB), PluginMetrics::default());
        let per_instance = Weight { slots: 1, bytes: 64 * MIB };
        let mut a = ledger.reserve("a", per_instance, 4).unwrap();
        assert_eq!(ledger.reserved_bytes(), 256 * MIB);
        let err = ledger.reserve("greedy", per_instance, 16).unwrap_err();
        assert_eq!(
            err,
            PoolFull::Memory { plugin: "greedy".into(), asked: 1024 * MIB, reserved: 256 * MIB, budget: 512 * MIB }
        );
        assert!(err.to_string().contains("--plugin-memory-budget"), "{err}");
        assert_eq!(ledger.reserved(), 4, "a refused reservation takes no slots either");
        a.grow_to(8).unwrap();
        assert!(matches!(a.grow_to(9), Err(PoolFull::Memory { .. })));
        drop(a);
        assert_eq!(ledger.reserved_bytes(), 0, "a dropped version gives its memory back");
    }

    #[test]
    fn each_plugins_reserved_memory_and_the_budget_are_gauges() {
        const MIB: u64 = 1 << 20;
        let registry = prometheus::Registry::new();
        let ledger = Ledger::new(100, Some(512 * MIB), PluginMetrics::register(&registry).unwrap());
        let gauge = |name: &str, plugin: Option<&str>| -> Option<f64> {
            let family = registry.gather().into_iter().find(|f| f.name() == name)?;
            let mut series = family.get_metric().iter();
            let found = series.find(|m| plugin.is_none_or(|p| m.get_label().iter().any(|l| l.value() == p)))?;
            Some(found.get_gauge().get_value())
        };
        assert_eq!(gauge("kubewasm_plugin_memory_budget_bytes", None), Some((512 * MIB) as f64));
        let per_instance = Weight { slots: 1, bytes: 64 * MIB };
        let mut a = ledger.reserve("a", per_instance, 2).unwrap();
        a.grow_to(4).unwrap();
        assert!(ledger.reserve("greedy", per_instance, 16).is_err());
        assert_eq!(gauge("kubewasm_plugin_memory_reserved_bytes", Some("a")), Some((256 * MIB) as f64));
        assert_eq!(gauge("kubewasm_plugin_memory_reserved_bytes", Some("greedy")), None, "refused: nothing reserved");
        drop(a);
        assert_eq!(gauge("kubewasm_plugin_memory_reserved_bytes", Some("a")), Some(0.0), "given back");
    }

    /// A component instantiating a core module with one memory `instances` times: header, one
    /// core module section (the module: header and a memory section, `(memory 1)`), one core
    /// instance section with `instances` argument-less instantiations of module 0.
    fn component_with_memories(instances: u8) -> Component {
        let mut wasm = b"\0asm\x0d\0\x01\0".to_vec();
        let module = b"\0asm\x01\0\0\0\x05\x03\x01\x00\x01";
        wasm.extend([0x01, module.len() as u8]);
        wasm.extend(module);
        wasm.extend([0x02, 1 + 3 * instances, instances]);
        wasm.extend((0..instances).flat_map(|_| [0x00, 0x00, 0x00]));
        let engine = wasmtime::Engine::new(wasmtime::Config::new().wasm_component_model(true)).unwrap();
        Component::new(&engine, &wasm).unwrap()
    }

    #[test]
    fn an_instance_takes_one_slot_whatever_its_memories_and_each_memory_counts_against_the_budget() {
        assert_eq!(weight(&component_with_memories(1), 64).unwrap(), Weight { slots: 1, bytes: 64 });
        assert_eq!(weight(&component_with_memories(2), 64).unwrap(), Weight { slots: 1, bytes: 128 });
    }

    #[test]
    fn a_component_with_more_memories_than_a_slot_holds_is_refused_and_says_so() {
        let err = weight(&component_with_memories(3), 64).unwrap_err();
        assert_eq!(err, Oversized { memories: 3, tables: 0 });
        assert!(err.to_string().contains("at most 2"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_plugin_at_its_share_waits_for_its_own_instance() {
        let ledger = Ledger::new(3, None, PluginMetrics::default());
        let share = ledger.reserve("a", slots(1), 2).unwrap();
        let first = share.acquire().await;
        let _second = share.acquire().await;
        let third = tokio::time::timeout(std::time::Duration::from_secs(1), share.acquire()).await;
        assert!(third.is_err(), "a third instance waited");
        drop(first);
        let _third = share.acquire().await;
    }
}
