//! Limits on what one reconcile may use: wall time, linear memory, instances, tables, host calls.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::ResourceLimiter;

/// Reconcile deadline. Protects workers from a plugin that loops: past it the reconcile traps
/// and its key is retried with backoff. 10 s, as DESIGN.md's sandbox defaults (controller-runtime
/// sets no per-reconcile timeout; a reconcile that takes longer is usually stuck).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// How long a plugin's write may wait for the API server before it fails as `unavailable`
/// and trips the breaker: 5 s, half the default reconcile deadline
/// ([`DEFAULT_DEADLINE`]), so a hung API server
/// (SIGSTOP, a dead peer behind a live TCP connection) shows as an outage before the deadline
/// cuts the reconcile. kube's client has no response timeout by default (nor has client-go's);
/// kube-apiserver itself answers a request it cannot finish with 504 after 60 s.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Linear memory per instance, in bytes. Protects the host's memory from a plugin that
/// allocates without bound: growing past it traps with [`LimitHit::Memory`]. 64 MiB.
pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;

/// Core instances per component instance. Protects the instance pool; a Rust component uses a
/// handful, interpreters built with componentize-py or jco a few dozen.
pub const DEFAULT_INSTANCES: u32 = 100;

/// Tables per component instance (same reasoning as [`DEFAULT_INSTANCES`]).
pub const DEFAULT_TABLES: u32 = 100;

/// Linear memories per component instance.
pub const DEFAULT_MEMORIES: u32 = 16;

/// Elements per table. Protects host memory from a plugin that grows tables without bound.
pub const DEFAULT_TABLE_ELEMENTS: usize = 100_000;

/// Host calls per reconcile. Protects the API server and the cache from a plugin stuck in a loop
/// of calls, which the deadline alone would let run for 10 s at full speed.
pub const DEFAULT_HOST_CALLS: u32 = 10_000;

/// Reconciles one instance serves before it is replaced; 0 and 1 mean a fresh instance for every
/// call. Protects the design's "nothing leaks between keys" (DESIGN.md): reuse is an operator's
/// opt-in for plugins whose instantiation dominates a reconcile (interpreters built with
/// componentize-py or componentize-js; see BENCHMARKS.md). 0.
pub const DEFAULT_REUSE_INSTANCES: u32 = 0;

/// Bytes of stdout and stderr one call may write; past it the rest of the call's output is
/// dropped (and counted in `kubewasm_plugin_output_dropped_bytes_total`). Protects the host's log
/// pipeline, as the host-call budget does for `log`. Dropped rather than trapped: output is a
/// debugging aid, so too much of it should not fail a reconcile, the way a log pipeline drops
/// lines over its rate (journald's `RateLimitBurst`). 64 KiB: a few hundred lines of println
/// debugging per call.
pub const DEFAULT_OUTPUT_BYTES: u64 = 64 << 10;

/// Per-plugin limits; every field has a named default above. Config field names are camelCase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// Reconcile deadline in milliseconds.
    pub deadline_ms: u64,
    /// Linear memory per instance in bytes.
    pub memory_bytes: u64,
    /// Core instances per component instance.
    pub instances: u32,
    /// Tables per component instance.
    pub tables: u32,
    /// Linear memories per component instance.
    pub memories: u32,
    /// Elements per table.
    pub table_elements: usize,
    /// Host calls per reconcile.
    pub host_calls: u32,
    /// Calls one instance serves before it is replaced (0 or 1: a fresh instance per call). An
    /// instance is also replaced after any error, trap or limit hit, so state a failing call
    /// left behind never reaches the next key.
    pub reuse_instances: u32,
    /// Bytes of stdout and stderr per call; the rest is dropped.
    pub output_bytes: u64,
    /// A hard cap on writes per second (apply, patch, create, delete, status, events), a token
    /// bucket; 0: no cap. Default: the host's `--plugin-write-qps` (0: plugins share the API
    /// server through the host's fair write scheduler, uncapped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_qps: Option<u32>,
    /// Writes the bucket holds (a burst after a quiet spell). Default: the host's
    /// `--plugin-write-burst` (0: twice `writeQps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_burst: Option<u32>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline_ms: DEFAULT_DEADLINE.as_millis() as u64,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            instances: DEFAULT_INSTANCES,
            tables: DEFAULT_TABLES,
            memories: DEFAULT_MEMORIES,
            table_elements: DEFAULT_TABLE_ELEMENTS,
            host_calls: DEFAULT_HOST_CALLS,
            reuse_instances: DEFAULT_REUSE_INSTANCES,
            output_bytes: DEFAULT_OUTPUT_BYTES,
            write_qps: None,
            write_burst: None,
        }
    }
}

impl Limits {
    /// The reconcile deadline as a [`Duration`].
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }

    /// Sets the reconcile deadline.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline_ms = deadline.as_millis() as u64;
        self
    }

    /// Sets the linear memory cap in bytes.
    #[must_use]
    pub fn with_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets the host-call budget per reconcile.
    #[must_use]
    pub fn with_host_calls(mut self, calls: u32) -> Self {
        self.host_calls = calls;
        self
    }

    /// Sets the stdout and stderr bytes per call.
    #[must_use]
    pub fn with_output_bytes(mut self, bytes: u64) -> Self {
        self.output_bytes = bytes;
        self
    }

    /// Sets the write rate: `qps` writes a second, `burst` at once.
    #[must_use]
    pub fn with_write_rate(mut self, qps: u32, burst: u32) -> Self {
        self.write_qps = Some(qps);
        self.write_burst = Some(burst);
        self
    }

    /// Lets one instance serve `calls` calls before it is replaced (see [`Limits::reuse_instances`]).
    #[must_use]
    pub fn with_reuse_instances(mut self, calls: u32) -> Self {
        self.reuse_instances = calls;
        self
    }
}

/// Which limit a reconcile ran into; carried as the trap's error so the dispatcher can tell a
/// limit from a plugin bug.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitHit {
    /// The plugin tried to grow linear memory past its cap.
    #[error("memory limit: the plugin asked for {requested} bytes of linear memory, its limit is {limit} bytes")]
    Memory {
        /// Bytes the plugin asked for.
        requested: usize,
        /// The cap.
        limit: u64,
    },
    /// The plugin ran past its deadline.
    #[error("deadline: the reconcile ran longer than {0:?}")]
    Deadline(Duration),
    /// The plugin made more host calls than its per-reconcile budget.
    #[error("host-call budget: more than {0} host calls in one reconcile")]
    HostCalls(u32),
    /// The plugin asked for more instances, tables or table elements than allowed.
    #[error("resource limit: {0}")]
    Resource(String),
}

/// wasmtime [`ResourceLimiter`] for one store; records the first limit hit and the linear
/// memory its instance holds.
#[derive(Debug)]
pub(crate) struct Limiter {
    limits: Limits,
    pub(crate) hit: Option<LimitHit>,
    /// Bytes of linear memory granted so far, over all the instance's memories (wasmtime asks
    /// from 0 when it creates a memory, so this counts initial sizes too).
    linear: u64,
}

impl Limiter {
    pub(crate) fn new(limits: Limits) -> Self {
        Self { limits, hit: None, linear: 0 }
    }

    /// Bytes of `limits.memoryBytes` the instance's linear memory leaves: what the host may
    /// copy for it in one call, so linear memory and the host's copy together stay within the
    /// plugin's limit.
    pub(crate) fn memory_left(&self) -> u64 {
        self.limits.memory_bytes.saturating_sub(self.linear)
    }

    fn fail(&mut self, hit: LimitHit) -> wasmtime::Result<bool> {
        self.hit.get_or_insert(hit.clone());
        Err(wasmtime::Error::new(hit))
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.limits.memory_bytes {
            return self.fail(LimitHit::Memory { requested: desired, limit: self.limits.memory_bytes });
        }
        self.linear = self.linear.saturating_add(desired.saturating_sub(current) as u64);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limits.table_elements {
            let msg = format!("a table of {desired} elements exceeds the limit of {}", self.limits.table_elements);
            return self.fail(LimitHit::Resource(msg));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.limits.instances as usize
    }

    fn tables(&self) -> usize {
        self.limits.tables as usize
    }

    fn memories(&self) -> usize {
        self.limits.memories as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_growth_past_the_cap_is_refused_and_recorded() {
        let mut limiter = Limiter::new(Limits::default().with_memory_bytes(1 << 20));
        assert!(limiter.memory_growing(0, 1 << 20, None).unwrap());
        let err = limiter.memory_growing(1 << 20, (1 << 20) + 65536, None).unwrap_err();
        assert!(err.to_string().contains("memory limit"), "{err}");
        assert!(matches!(limiter.hit, Some(LimitHit::Memory { limit, .. }) if limit == 1 << 20));
    }

    #[test]
    fn what_the_memory_limit_leaves_shrinks_as_each_memory_grows() {
        let mut limiter = Limiter::new(Limits::default().with_memory_bytes(8 << 20));
        assert_eq!(limiter.memory_left(), 8 << 20);
        assert!(limiter.memory_growing(0, 1 << 20, None).unwrap());
        assert!(limiter.memory_growing(1 << 20, 3 << 20, None).unwrap());
        assert!(limiter.memory_growing(0, 1 << 20, None).unwrap(), "a second memory");
        assert_eq!(limiter.memory_left(), 4 << 20);
        assert!(limiter.memory_growing(0, 5 << 20, None).unwrap());
        assert_eq!(limiter.memory_left(), 0, "never below nothing");
    }

    #[test]
    fn limits_parse_from_camel_case_config_with_defaults_for_missing_fields() {
        let limits: Limits = serde_json::from_str(r#"{"deadlineMs": 250, "memoryBytes": 1048576}"#).unwrap();
        assert_eq!(limits.deadline(), Duration::from_millis(250));
        assert_eq!(limits.memory_bytes, 1 << 20);
        assert_eq!(limits.host_calls, DEFAULT_HOST_CALLS);
        assert!(serde_json::from_str::<Limits>(r#"{"deadline": 1}"#).is_err(), "unknown fields are rejected");
        let reuse: Limits = serde_json::from_str(r#"{"reuseInstances": 100}"#).unwrap();
        assert_eq!((reuse.reuse_instances, Limits::default().reuse_instances), (100, 0));
        let fair: Limits = serde_json::from_str(r#"{"writeQps": 50, "writeBurst": 5, "outputBytes": 10}"#).unwrap();
        assert_eq!((fair.write_qps, fair.write_burst, fair.output_bytes), (Some(50), Some(5), 10));
        assert_eq!(Limits::default().write_qps, None, "unset: the host's default applies");
    }
}
