//! controller-runtime's controller metrics, so existing dashboards work unchanged.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Metric families shared by every controller, registered once on a registry passed in.
#[derive(Clone)]
pub struct ControllerMetrics(Arc<Families>);

struct Families {
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    terminal_errors: IntCounterVec,
    reconcile_time: HistogramVec,
    reconcile_panics: IntCounterVec,
    max_concurrent: IntGaugeVec,
    active_workers: IntGaugeVec,
    dropped: IntCounterVec,
    map_dropped: IntCounterVec,
}

/// Reconcile time buckets, as controller-runtime's `reconcile_time_seconds`.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
    1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

impl ControllerMetrics {
    /// Creates and registers the families.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone())).map(|()| c)
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["controller"])?;
            registry.register(Box::new(g.clone())).map(|()| g)
        };
        let reconcile_time = HistogramVec::new(
            HistogramOpts::new(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
            )
            .buckets(RECONCILE_BUCKETS.to_vec()),
            &["controller"],
        )?;
        registry.register(Box::new(reconcile_time.clone()))?;
        Ok(Self(Arc::new(Families {
            reconcile_total: counter(
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            )?,
            reconcile_errors: counter(
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                &["controller"],
            )?,
            terminal_errors: counter(
                "controller_runtime_terminal_reconcile_errors_total",
                "Total number of terminal reconciliation errors per controller",
                &["controller"],
            )?,
            reconcile_time,
            reconcile_panics: counter(
                "controller_runtime_reconcile_panics_total",
                "Total number of reconciliation panics (plugin traps and host panics) per controller",
                &["controller"],
            )?,
            max_concurrent: gauge(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            )?,
            active_workers: gauge(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            )?,
            dropped: counter(
                "kubewasm_controller_dropped_keys_total",
                "Keys dropped after max retries per controller",
                &["controller"],
            )?,
            map_dropped: counter(
                "kubewasm_controller_map_dropped_total",
                "Changes of watched objects dropped after map failed too often, per controller",
                &["controller"],
            )?,
        })))
    }

    /// The handles of one controller.
    pub fn controller(&self, name: &str) -> Handles {
        let f = &self.0;
        Handles {
            success: f.reconcile_total.with_label_values(&[name, "success"]),
            error: f.reconcile_total.with_label_values(&[name, "error"]),
            requeue_after: f.reconcile_total.with_label_values(&[name, "requeue_after"]),
            errors: f.reconcile_errors.with_label_values(&[name]),
            terminal: f.terminal_errors.with_label_values(&[name]),
            panics: f.reconcile_panics.with_label_values(&[name]),
            time: f.reconcile_time.with_label_values(&[name]),
            max_concurrent: f.max_concurrent.with_label_values(&[name]),
            active_workers: f.active_workers.with_label_values(&[name]),
            dropped: f.dropped.with_label_values(&[name]),
            map_dropped: f.map_dropped.with_label_values(&[name]),
        }
    }
}

/// One controller's metric handles (resolved once, not per reconcile).
#[derive(Clone)]
pub struct Handles {
    pub(crate) success: IntCounter,
    pub(crate) error: IntCounter,
    pub(crate) requeue_after: IntCounter,
    pub(crate) errors: IntCounter,
    pub(crate) terminal: IntCounter,
    pub(crate) panics: IntCounter,
    pub(crate) time: Histogram,
    pub(crate) max_concurrent: IntGauge,
    pub(crate) active_workers: IntGauge,
    pub(crate) dropped: IntCounter,
    pub(crate) map_dropped: IntCounter,
}

impl Handles {
    pub(crate) fn observe(&self, took: Duration) {
        self.time.observe(took.as_secs_f64());
    }
}
