//! `kubewasm_plugin_*` metrics: loads, load errors, limit hits, host calls, writes (sent or
//! unchanged), throttled writes, dropped output, the API server's refusals and memory reserved
//! against the budget.

use std::sync::Arc;

use prometheus::{IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Plugin metrics, registered on a registry passed in; [`PluginMetrics::default`] records
/// nothing (for tests and tools).
#[derive(Clone, Default)]
pub struct PluginMetrics(Option<Arc<Inner>>);

impl std::fmt::Debug for PluginMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginMetrics").field("registered", &self.0.is_some()).finish()
    }
}

struct Inner {
    loads: IntCounterVec,
    load_errors: IntCounterVec,
    limit_hits: IntCounterVec,
    host_calls: IntCounterVec,
    writes_throttled: IntCounterVec,
    writes: IntCounterVec,
    output_dropped: IntCounterVec,
    apiserver_forbidden: IntCounterVec,
    memory_reserved: IntGaugeVec,
    memory_budget: IntGauge,
}

impl PluginMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let counter = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        Ok(Self(Some(Arc::new(Inner {
            loads: counter("kubewasm_plugin_loads_total", "Plugin versions loaded and serving.", &["plugin"])?,
            load_errors: counter(
                "kubewasm_plugin_load_errors_total",
                "Plugin versions rejected at load, by reason.",
                &["plugin", "reason"],
            )?,
            limit_hits: counter(
                "kubewasm_plugin_limit_hits_total",
                "Plugin calls stopped by a sandbox limit (deadline, memory, host_calls, resource).",
                &["plugin", "limit"],
            )?,
            host_calls: counter(
                "kubewasm_plugin_host_calls_total",
                "Host calls made by plugins, by function and result.",
                &["plugin", "function", "result"],
            )?,
            writes_throttled: counter(
                "kubewasm_plugin_writes_throttled_total",
                "Plugin writes held by the plugin's write rate limit: delayed for a token, refused because none came before the deadline, or (Events, which have their own bucket) dropped.",
                &["plugin", "outcome"],
            )?,
            writes: counter(
                "kubewasm_plugin_writes_total",
                "Plugin writes (apply, patch, create, delete) allowed by the authorizer: sent to the API server, or unchanged (an apply that would change nothing, answered from the cache).",
                &["plugin", "outcome"],
            )?,
            output_dropped: counter(
                "kubewasm_plugin_output_dropped_bytes_total",
                "Bytes of plugin stdout/stderr dropped past limits.outputBytes.",
                &["plugin", "stream"],
            )?,
            apiserver_forbidden: counter(
                "kubewasm_plugin_apiserver_forbidden_total",
                "Plugin requests the host allowed and the API server refused as forbidden: the plugin's identity lacks a right (RBACMissing), or an admission policy refused it. The host's own refusals are host_calls_total{result=\"forbidden\"}.",
                &["plugin"],
            )?,
            memory_reserved: {
                let help = "Linear memory reserved by the plugin's loaded versions (instances × limits.memoryBytes), counted against the host's plugin memory budget.";
                let g = IntGaugeVec::new(Opts::new("kubewasm_plugin_memory_reserved_bytes", help), &["plugin"])?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            memory_budget: {
                let help = "The host's plugin memory budget (--plugin-memory-budget, by default from the container's memory limit); 0: unbounded.";
                let g = IntGauge::with_opts(Opts::new("kubewasm_plugin_memory_budget_bytes", help))?;
                registry.register(Box::new(g.clone()))?;
                g
            },
        }))))
    }

    pub(crate) fn loaded(&self, plugin: &str) {
        if let Some(m) = &self.0 {
            m.loads.with_label_values(&[plugin]).inc();
        }
    }

    pub(crate) fn load_error(&self, plugin: &str, reason: &'static str) {
        if let Some(m) = &self.0 {
            m.load_errors.with_label_values(&[plugin, reason]).inc();
        }
    }

    pub(crate) fn limit_hit(&self, plugin: &str, limit: &'static str) {
        if let Some(m) = &self.0 {
            m.limit_hits.with_label_values(&[plugin, limit]).inc();
        }
    }

    pub(crate) fn host_call(&self, plugin: &str, function: &'static str, result: &'static str) {
        if let Some(m) = &self.0 {
            m.host_calls.with_label_values(&[plugin, function, result]).inc();
        }
    }

    pub(crate) fn write_throttled(&self, plugin: &str, outcome: &'static str) {
        if let Some(m) = &self.0 {
            m.writes_throttled.with_label_values(&[plugin, outcome]).inc();
        }
    }

    /// Counts a write of `plugin` by outcome (`kubewasm_plugin_writes_total`: `sent`, `unchanged`).
    pub fn write(&self, plugin: &str, outcome: &'static str) {
        if let Some(m) = &self.0 {
            m.writes.with_label_values(&[plugin, outcome]).inc();
        }
    }

    /// Counts a request of `plugin` the host allowed and the API server refused as forbidden.
    pub(crate) fn apiserver_forbidden(&self, plugin: &str) {
        if let Some(m) = &self.0 {
            m.apiserver_forbidden.with_label_values(&[plugin]).inc();
        }
    }

    /// Adds `bytes` (negative: gives back) to what `plugin`'s versions reserve of the budget.
    pub(crate) fn memory_reserved(&self, plugin: &str, bytes: i64) {
        if let Some(m) = &self.0 {
            m.memory_reserved.with_label_values(&[plugin]).add(bytes);
        }
    }

    /// Records the host's plugin memory budget (`None`: unbounded, 0).
    pub(crate) fn memory_budget(&self, budget: Option<u64>) {
        if let Some(m) = &self.0 {
            m.memory_budget.set(budget.map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)));
        }
    }

    pub(crate) fn output_dropped(&self, plugin: &str, stream: &'static str, bytes: u64) {
        if let Some(m) = &self.0 {
            m.output_dropped.with_label_values(&[plugin, stream]).inc_by(bytes);
        }
    }
}
