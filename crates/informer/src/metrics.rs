//! Prometheus metrics of the informers, `kubewasm_informer_*`, labelled by kind
//! (`group/version/Kind`, `v1/Kind` for the core group).

use std::{collections::HashMap, time::Instant};

use kube::core::GroupVersionKind;
use parking_lot::Mutex;
use prometheus::{
    GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    core::{Collector, Desc},
    proto::MetricFamily,
};

use super::{Error, Result};

/// The `kind` label value for a GVK.
pub fn kind_label(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{}/{}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind)
    }
}

/// The informer metrics, registered once per factory on the registry passed in.
pub struct InformerMetrics {
    /// `kubewasm_informer_objects{kind}`: objects in the caches of this kind.
    pub objects: IntGaugeVec,
    /// `kubewasm_informer_lists_total{kind}`: initial lists started (paginated or streaming).
    pub lists: IntCounterVec,
    /// `kubewasm_informer_relists_total{kind}`: lists after the first sync (410 Gone, or a
    /// watch that could not be resumed).
    pub relists: IntCounterVec,
    /// `kubewasm_informer_watch_starts_total{kind}`: watch streams started: the first one and
    /// every restart after an error (a silent resume after the server's watch timeout is not
    /// visible through kube-runtime's watcher and is not counted).
    pub watch_starts: IntCounterVec,
    /// `kubewasm_informer_watch_errors_total{kind,reason}`: errors from the watcher.
    pub watch_errors: IntCounterVec,
    last_event: LastEvent,
}

impl InformerMetrics {
    /// Creates the metrics and registers them on `registry`.
    pub fn register(registry: &Registry) -> Result<Self> {
        let m = Self {
            objects: IntGaugeVec::new(opts("objects", "Objects in the informer caches"), &["kind"])
                .map_err(Error::Metrics)?,
            lists: IntCounterVec::new(opts("lists_total", "Initial lists started"), &["kind"])
                .map_err(Error::Metrics)?,
            relists: IntCounterVec::new(opts("relists_total", "Lists after the first sync"), &["kind"])
                .map_err(Error::Metrics)?,
            watch_starts: IntCounterVec::new(opts("watch_starts_total", "Watch streams (re)started"), &["kind"])
                .map_err(Error::Metrics)?,
            watch_errors: IntCounterVec::new(opts("watch_errors_total", "Watcher errors"), &["kind", "reason"])
                .map_err(Error::Metrics)?,
            last_event: LastEvent::new()?,
        };
        registry.register(Box::new(m.objects.clone())).map_err(Error::Metrics)?;
        registry.register(Box::new(m.lists.clone())).map_err(Error::Metrics)?;
        registry.register(Box::new(m.relists.clone())).map_err(Error::Metrics)?;
        registry.register(Box::new(m.watch_starts.clone())).map_err(Error::Metrics)?;
        registry.register(Box::new(m.watch_errors.clone())).map_err(Error::Metrics)?;
        registry.register(Box::new(m.last_event.clone())).map_err(Error::Metrics)?;
        Ok(m)
    }

    /// Records that an event for `kind` arrived now.
    pub fn event_seen(&self, kind: &str) {
        self.last_event.times.lock().insert(kind.to_owned(), Instant::now());
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("kubewasm").subsystem("informer")
}

/// `kubewasm_informer_seconds_since_last_event{kind}`, computed when scraped.
#[derive(Clone)]
struct LastEvent {
    gauge: GaugeVec,
    times: std::sync::Arc<Mutex<HashMap<String, Instant>>>,
}

impl LastEvent {
    fn new() -> Result<Self> {
        Ok(Self {
            gauge: GaugeVec::new(
                opts("seconds_since_last_event", "Seconds since the last watch event of this kind"),
                &["kind"],
            )
            .map_err(Error::Metrics)?,
            times: Default::default(),
        })
    }
}

impl Collector for LastEvent {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let now = Instant::now();
        for (kind, at) in self.times.lock().iter() {
            self.gauge.with_label_values(&[kind]).set(now.duration_since(*at).as_secs_f64());
        }
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use prometheus::Encoder;

    use super::*;

    #[test]
    fn metrics_render_with_the_kubewasm_informer_prefix() {
        let registry = Registry::new();
        let m = InformerMetrics::register(&registry).unwrap();
        let kind = kind_label(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
        m.objects.with_label_values(&[&kind]).set(3);
        m.watch_errors.with_label_values(&[&kind, "gone"]).inc();
        m.event_seen(&kind);
        let mut out = Vec::new();
        prometheus::TextEncoder::new().encode(&registry.gather(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#"kubewasm_informer_objects{kind="v1/ConfigMap"} 3"#), "{text}");
        assert!(text.contains(r#"kubewasm_informer_watch_errors_total{kind="v1/ConfigMap",reason="gone"} 1"#));
        assert!(text.contains(r#"kubewasm_informer_seconds_since_last_event{kind="v1/ConfigMap"}"#));
    }

    #[test]
    fn a_second_registration_on_one_registry_is_an_error() {
        let registry = Registry::new();
        InformerMetrics::register(&registry).unwrap();
        assert!(matches!(InformerMetrics::register(&registry), Err(Error::Metrics(_))));
    }

    #[test]
    fn the_core_group_is_left_out_of_the_kind_label() {
        assert_eq!(kind_label(&GroupVersionKind::gvk("apps", "v1", "Deployment")), "apps/v1/Deployment");
    }
}
