//! Fair shares between plugins, against real components (the greedy fixture): no sockets, a cap
//! on concurrency, per-plugin instance-pool shares, no write cap by default but the operator's
//! when set, a cap on indexes and an output budget. No API server: an in-memory cache and a
//! recording writer.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm_host::plugin::api::testing::{MemoryCache, RecordingWriter};
use kubewasm_host::plugin::grants::GrantConfig;
use kubewasm_host::plugin::limits::{LimitHit, Limits};
use kubewasm_host::plugin::metrics::PluginMetrics;
use kubewasm_host::plugin::registration::MAX_INDEXES;
use kubewasm_host::plugin::{Action, CallFailed, LoadError, ObjectKey, Plugin, PluginConfig, Runtime, RuntimeConfig};
use serde_json::{Value, json};

use common::plugin_wasm;

const GREEDY: &str = "fixture_greedy.wasm";

struct Harness {
    runtime: Runtime,
    registry: prometheus::Registry,
    cache: Arc<MemoryCache>,
    writer: Arc<RecordingWriter>,
}

impl Harness {
    fn new(config: RuntimeConfig) -> Self {
        let registry = prometheus::Registry::new();
        let metrics = PluginMetrics::register(&registry).unwrap();
        let runtime = Runtime::new(config.cache_dir(common::test_compile_cache()).metrics(metrics)).unwrap();
        Self { runtime, registry, cache: Arc::default(), writer: Arc::default() }
    }

    async fn load(&self, name: &str, file: &str, config: PluginConfig) -> Result<Plugin, LoadError> {
        self.runtime.load(name, plugin_wasm(file), config, self.cache.clone(), self.writer.clone()).await
    }

    async fn greedy(&self, name: &str, settings: Value, limits: Limits) -> Result<Plugin, LoadError> {
        self.load(name, GREEDY, PluginConfig { limits, ..greedy_config(settings) }).await
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let text = prometheus::TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap();
        common::metric_value(&text, name, labels).unwrap_or(0.0)
    }
}

/// The greedy fixture's config: `settings`, and the ConfigMap write grant it registers for.
fn greedy_config(settings: Value) -> PluginConfig {
    let grants = serde_yaml::from_str::<GrantConfig>("write: [ConfigMap]").unwrap().plus_requests();
    PluginConfig { settings: Some(settings), grants, ..PluginConfig::approving_requests() }
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(Some("default"), name)
}

#[tokio::test]
async fn a_guest_cannot_create_tcp_or_udp_sockets_or_look_up_names() {
    let h = Harness::new(RuntimeConfig::default());
    let greedy = h.greedy("greedy", json!({"sockets": true}), Limits::default()).await.unwrap();
    let err = greedy.reconcile(&key("cm"), 0).await.unwrap_err();
    let CallFailed::Plugin(message) = &err else { panic!("the guest got errors back, no trap: {err:?}") };
    for what in ["tcp: refused", "udp: refused", "lookup: refused"] {
        assert!(message.contains(what), "{what}: {message}");
    }
}

#[tokio::test]
async fn a_plugin_asking_for_u32_max_concurrency_is_clamped_to_the_hosts_cap() {
    let h = Harness::new(RuntimeConfig::default().max_concurrent_cap(16));
    let greedy = h.greedy("greedy", json!({"maxConcurrent": u32::MAX}), Limits::default()).await.unwrap();
    assert_eq!(greedy.max_concurrent(), 16);
    assert_eq!(greedy.registration().max_concurrent, Some(u32::MAX), "the registration says what it asked");
    assert_eq!(greedy.reconcile(&key("cm"), 0).await.unwrap(), Action::Done, "and it serves");
    let config = PluginConfig { max_concurrent: Some(1000), ..PluginConfig::approving_requests() };
    let configured = h.load("configured", "fixture_getter.wasm", config).await.unwrap();
    assert_eq!(configured.max_concurrent(), 16, "the config file's maxConcurrent is clamped too");
}

#[tokio::test]
async fn a_version_whose_pool_share_does_not_fit_is_rejected_and_its_slots_come_back_when_dropped() {
    let h = Harness::new(RuntimeConfig::default().pool_instances(4));
    let config = PluginConfig { max_concurrent: Some(4), ..PluginConfig::approving_requests() };
    let first = h.load("first", "fixture_getter.wasm", config).await.unwrap();
    assert_eq!(h.runtime.pool_reserved(), 4);
    let err = h.load("second", "fixture_getter.wasm", PluginConfig::approving_requests()).await.unwrap_err();
    assert!(matches!(err, LoadError::PoolFull(_)), "{err:?}");
    assert!(err.to_string().contains("plugin `second`") && err.to_string().contains("4 of 4"), "{err}");
    assert_eq!(err.metric_label(), "pool_full");
    drop(first);
    assert_eq!(h.runtime.pool_reserved(), 0);
    h.load("second", "fixture_getter.wasm", PluginConfig::approving_requests()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_at_its_share_waits_and_does_not_fail_another_plugin() {
    let h = Harness::new(RuntimeConfig::default().pool_instances(4));
    let config = PluginConfig { max_concurrent: Some(2), ..greedy_config(json!({"sleepMs": 500})) };
    let greedy = Arc::new(h.load("greedy", GREEDY, config).await.unwrap());
    let getter = h.load("getter", "fixture_getter.wasm", PluginConfig::approving_requests()).await.unwrap();
    assert_eq!(h.runtime.pool_reserved(), 3);
    h.cache.insert(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": {}}));

    // Four slow reconciles at once: on a pool of four they would take every slot.
    let slow: Vec<_> = (0..4)
        .map(|i| {
            let greedy = greedy.clone();
            tokio::spawn(async move { greedy.reconcile(&key(&format!("slow-{i}")), 0).await })
        })
        .collect();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(400) {
        assert_eq!(getter.reconcile(&key("cm"), 0).await.unwrap(), Action::Done, "the neighbour kept its slot");
    }
    for reconcile in slow {
        assert_eq!(reconcile.await.unwrap().unwrap(), Action::Done, "the slow plugin's surplus waited its turn");
    }
    assert!(started.elapsed() >= Duration::from_millis(900), "two rounds of two: {:?}", started.elapsed());
}

#[tokio::test]
async fn writes_past_the_plugins_rate_wait_and_fail_before_the_deadline_passes() {
    let h = Harness::new(RuntimeConfig::default());
    let limits = Limits::default().with_write_rate(1, 2).with_deadline(Duration::from_millis(1500));
    let greedy = h.greedy("greedy", json!({"writes": 5}), limits).await.unwrap();
    let started = Instant::now();
    let err = greedy.reconcile(&key("cm"), 0).await.unwrap_err();
    let CallFailed::Plugin(message) = &err else { panic!("the write failed, the call did not trap: {err:?}") };
    assert!(message.contains("client-side write rate limit: 1 writes/s (burst 2)"), "{message}");
    assert_eq!(h.writer.calls().len(), 3, "two from the burst, one a second later, then no token before the deadline");
    assert!(started.elapsed() < Duration::from_millis(1500), "it failed before the deadline: {:?}", started.elapsed());
    let labels = [("plugin", "greedy")];
    assert_eq!(h.metric("kubewasm_plugin_writes_throttled_total", &[labels[0], ("outcome", "delayed")]), 1.0);
    assert_eq!(h.metric("kubewasm_plugin_writes_throttled_total", &[labels[0], ("outcome", "refused")]), 1.0);
}

#[tokio::test]
async fn a_plugin_is_not_capped_by_default() {
    let h = Harness::new(RuntimeConfig::default());
    // 1,000 writes in one reconcile: 3 s under the former default cap (200/s, burst 400).
    let limits = Limits::default().with_deadline(Duration::from_millis(1500));
    let greedy = h.greedy("greedy", json!({"writes": 1000}), limits).await.unwrap();
    assert_eq!(greedy.reconcile(&key("cm"), 0).await.unwrap(), Action::Done);
    assert_eq!(h.writer.calls().len(), 1000, "every write sent, none throttled");
    let labels = [("plugin", "greedy"), ("outcome", "delayed")];
    assert_eq!(h.metric("kubewasm_plugin_writes_throttled_total", &labels), 0.0);
}

#[tokio::test]
async fn the_hosts_write_rate_applies_to_plugins_whose_limits_set_none() {
    let rate = kubewasm_host::plugin::throttle::WriteRate { qps: 1, burst: 1 };
    let h = Harness::new(RuntimeConfig::default().write_rate(rate));
    let limits = Limits::default().with_deadline(Duration::from_millis(500));
    let greedy = h.greedy("greedy", json!({"writes": 2}), limits).await.unwrap();
    assert!(matches!(greedy.reconcile(&key("cm"), 0).await, Err(CallFailed::Plugin(m)) if m.contains("1 writes/s")));
    let unlimited = Limits::default().with_write_rate(0, 0).with_deadline(Duration::from_millis(500));
    let free = h.greedy("free", json!({"writes": 50}), unlimited).await.unwrap();
    assert_eq!(free.reconcile(&key("cm"), 0).await.unwrap(), Action::Done, "writeQps 0 is no limit");
}

#[tokio::test]
async fn stdout_past_the_output_budget_is_dropped_and_counted_and_the_reconcile_succeeds() {
    let h = Harness::new(RuntimeConfig::default());
    let limits = Limits::default().with_output_bytes(1000);
    let greedy = h.greedy("greedy", json!({"printBytes": 100_000}), limits).await.unwrap();
    assert_eq!(greedy.reconcile(&key("cm"), 0).await.unwrap(), Action::Done);
    let dropped = h.metric("kubewasm_plugin_output_dropped_bytes_total", &[("plugin", "greedy"), ("stream", "stdout")]);
    assert_eq!(dropped, 99_000.0);
}

#[tokio::test]
async fn a_plugin_registering_more_indexes_than_the_cap_is_rejected_at_load() {
    let h = Harness::new(RuntimeConfig::default());
    let err = h.greedy("greedy", json!({"indexes": MAX_INDEXES + 1}), Limits::default()).await.unwrap_err();
    assert!(matches!(&err, LoadError::Registration(e) if e.0.contains(&format!("at most {MAX_INDEXES}"))), "{err}");
    h.greedy("greedy", json!({"indexes": MAX_INDEXES}), Limits::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_spent_waiting_for_a_pool_slot_counts_against_the_deadline() {
    let h = Harness::new(RuntimeConfig::default());
    // One reconcile at a time (the default); each sleeps 200 ms of a 350 ms deadline.
    let limits = Limits::default().with_deadline(Duration::from_millis(350));
    let config = PluginConfig { limits, ..greedy_config(json!({"sleepMs": 200})) };
    let greedy = Arc::new(h.load("greedy", GREEDY, config).await.unwrap());
    let both: Vec<_> = ["a", "b"]
        .map(|name| {
            let greedy = greedy.clone();
            tokio::spawn(async move { greedy.reconcile(&key(name), 0).await })
        })
        .into_iter()
        .collect();
    let mut results = Vec::new();
    for call in both {
        results.push(call.await.unwrap());
    }
    let done = results.iter().filter(|r| matches!(r, Ok(Action::Done))).count();
    let late = results.iter().filter(|r| matches!(r, Err(CallFailed::Limit(LimitHit::Deadline(_))))).count();
    assert_eq!((done, late), (1, 1), "the second waited for the first's slot and ran out of time: {results:?}");
}
