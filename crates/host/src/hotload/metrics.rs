//! Hot-load metrics: version changes, rejections, how long a change took to serve, and each
//! WasmPlugin's conditions.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::wasmplugin::Condition;

use super::loaded::Applied;

/// Hot-load metric families; [`HotloadMetrics::default`] records nothing.
#[derive(Clone, Default)]
pub struct HotloadMetrics(Option<Arc<Inner>>);

struct Inner {
    changes: IntCounterVec,
    rejected: IntCounterVec,
    apply_seconds: HistogramVec,
    loaded: IntGaugeVec,
    canary: IntCounterVec,
    conditions: IntGaugeVec,
}

/// The condition types a WasmPlugin's status may hold (`crd_source`), forgotten with it.
const CONDITION_TYPES: [&str; 6] = ["Loaded", "Ready", "Degraded", "Sharded", "RBACMissing", "NamesHeld"];

impl HotloadMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let changes = IntCounterVec::new(
            Opts::new("kubewasm_plugin_version_changes_total", "Plugin versions put into service, by change."),
            &["plugin", "change"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "kubewasm_plugin_rejected_versions_total",
                "New plugin versions rejected while the previous one (if any) kept serving.",
            ),
            &["plugin", "reason"],
        )?;
        let buckets = vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
        let apply_seconds = HistogramVec::new(
            HistogramOpts::new(
                "kubewasm_plugin_apply_duration_seconds",
                "From a version being read to it serving (compile, describe, wiring, swap).",
            )
            .buckets(buckets),
            &["change"],
        )?;
        let loaded = IntGaugeVec::new(
            Opts::new("kubewasm_plugin_loaded", "1 while a version of the plugin serves; its revision is logged."),
            &["plugin"],
        )?;
        let canary = IntCounterVec::new(
            Opts::new(
                "kubewasm_canary_reconciles_total",
                "Reconciles of the serving version compared with a dry-run candidate's, by result (same, differ, failed, skipped).",
            ),
            &["plugin", "result"],
        )?;
        let conditions = IntGaugeVec::new(
            Opts::new(
                "kubewasm_wasmplugin_condition",
                "A WasmPlugin's status conditions, as this host computes them: 1 while True, 0 while False (every replica; the leader writes the status).",
            ),
            &["plugin", "condition"],
        )?;
        registry.register(Box::new(conditions.clone()))?;
        registry.register(Box::new(canary.clone()))?;
        registry.register(Box::new(changes.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        registry.register(Box::new(apply_seconds.clone()))?;
        registry.register(Box::new(loaded.clone()))?;
        Ok(Self(Some(Arc::new(Inner { changes, rejected, apply_seconds, loaded, canary, conditions }))))
    }

    pub(crate) fn applied(&self, plugin: &str, applied: &Applied, took: Duration) {
        if let Some(m) = &self.0 {
            let change = match applied {
                Applied::Unchanged => return,
                Applied::Loaded => "loaded",
                Applied::Swapped => "swapped",
                Applied::Replaced => "replaced",
            };
            m.changes.with_label_values(&[plugin, change]).inc();
            m.apply_seconds.with_label_values(&[change]).observe(took.as_secs_f64());
            m.loaded.with_label_values(&[plugin]).set(1);
        }
    }

    pub(crate) fn rejected(&self, plugin: &str, reason: &'static str) {
        if let Some(m) = &self.0 {
            m.rejected.with_label_values(&[plugin, reason]).inc();
        }
    }

    /// Counts one canary comparison of `plugin` under `result`.
    pub(crate) fn canary(&self, plugin: &str, result: &'static str) {
        if let Some(m) = &self.0 {
            m.canary.with_label_values(&[plugin, result]).inc();
        }
    }

    /// Shows WasmPlugin `plugin`'s status conditions.
    pub(crate) fn conditions(&self, plugin: &str, conditions: &[Condition]) {
        if let Some(m) = &self.0 {
            for c in conditions {
                m.conditions.with_label_values(&[plugin, &c.type_]).set(i64::from(c.status == "True"));
            }
        }
    }

    /// Forgets WasmPlugin `plugin`'s conditions: it is gone.
    pub(crate) fn forget_conditions(&self, plugin: &str) {
        if let Some(m) = &self.0 {
            for condition in CONDITION_TYPES {
                let _ = m.conditions.remove_label_values(&[plugin, condition]);
            }
        }
    }

    pub(crate) fn unloaded(&self, plugin: &str) {
        if let Some(m) = &self.0 {
            m.changes.with_label_values(&[plugin, "unloaded"]).inc();
            m.loaded.with_label_values(&[plugin]).set(0);
        }
    }
}
