//! Greedy-neighbour benchmark: how long namespace-defaults takes to converge a new Namespace
//! (created → its ResourceQuota and NetworkPolicy readable) and its reconcile time, alone and
//! beside a greedy plugin: `max-concurrent` u32::MAX (clamped to 16), 100 ms reconciles and a
//! loop of 20 writes per reconcile that re-triggers itself, on 32 ConfigMaps. Both run in one
//! host against the real control plane. Goal (issue 15): p99 beside the neighbour ≤ 1.2× alone.
//!
//! Run: `make plugins control-plane && cargo bench -p kubewasm --bench neighbour`.
//! `NEIGHBOUR_NAMESPACES` changes the number of Namespaces per variant (default 200).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams, PostParams};
use kubewasm::app::{App, PluginFile};
use kubewasm_testenv::ControlPlane;
use serde_json::json;

const GREEDY_OBJECTS: usize = 32;

async fn create_namespace(client: &kube::Client, name: &str, labels: serde_json::Value) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

/// Starts the greedy plugin on its own namespace and waits until it writes.
async fn add_greedy(app: &mut App, client: &kube::Client, dir: &std::path::Path) {
    let ns = "greedy-neighbour";
    create_namespace(client, ns, json!({"kubewasm.dev/no-defaults": "true"})).await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for i in 0..GREEDY_OBJECTS {
        let cm = json!({"metadata": {"name": format!("cm-{i}"), "labels": {"kubewasm.test/greedy": ns}}});
        configmaps.create(&PostParams::default(), &serde_json::from_value(cm).unwrap()).await.unwrap();
    }
    let config = json!({
        "grants": {"write": ["ConfigMap"]},
        "settings": {"maxConcurrent": u32::MAX, "selector": format!("kubewasm.test/greedy={ns}"), "sleepMs": 100, "writes": 20},
    });
    let path = dir.join("greedy.yaml");
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    let wasm = common::plugin_dir().join("fixture_greedy.wasm");
    app.add_plugin(&PluginFile { name: "greedy".into(), wasm, config: Some(path) }).await.unwrap();
    common::eventually("the greedy plugin writing", Duration::from_secs(120), || async {
        let list = configmaps.list(&ListParams::default()).await.unwrap();
        (list.items.iter().filter(|c| c.metadata.annotations.is_some()).count() == GREEDY_OBJECTS).then_some(())
    })
    .await;
}

/// Converge latency of `count` Namespaces created one after another, sorted; and
/// namespace-defaults' reconcile-time p99 from its histogram (a bucket's upper bound).
async fn measure(client: &kube::Client, greedy: bool, count: usize) -> (Vec<Duration>, f64) {
    let dir = tempfile::tempdir().unwrap();
    let mut app = App::new(client.clone(), Some(&common::test_compile_cache()), None).unwrap();
    if greedy {
        add_greedy(&mut app, client, dir.path()).await;
    }
    let wasm = common::plugin_dir().join("namespace_defaults.wasm");
    app.add_plugin(&PluginFile { name: "namespace-defaults".into(), wasm, config: None }).await.unwrap();
    common::eventually("readiness", Duration::from_secs(60), || async { app.readiness().is_ready().then_some(()) })
        .await;
    let variant = if greedy { "beside" } else { "alone" };
    let mut took = Vec::with_capacity(count);
    for i in 0..count {
        let ns = format!("nb-{variant}-{i}");
        let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
        let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns);
        let started = Instant::now();
        create_namespace(client, &ns, json!({})).await;
        loop {
            let done = quotas.get_opt("default-quota").await.unwrap().is_some()
                && policies.get_opt("default-deny").await.unwrap().is_some();
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        took.push(started.elapsed());
    }
    took.sort();
    let p99 = reconcile_p99(app.registry());
    app.shut_down(Duration::from_secs(30)).await;
    (took, p99)
}

fn reconcile_p99(registry: &prometheus::Registry) -> f64 {
    let families = registry.gather();
    let family = families.iter().find(|f| f.name() == "controller_runtime_reconcile_time_seconds").unwrap();
    let metric = family
        .get_metric()
        .iter()
        .find(|m| m.get_label().iter().any(|l| l.name() == "controller" && l.value() == "namespace-defaults"))
        .unwrap();
    let histogram = metric.get_histogram();
    let want = (histogram.get_sample_count() as f64 * 0.99).ceil() as u64;
    histogram.get_bucket().iter().find(|b| b.cumulative_count() >= want).map_or(f64::INFINITY, |b| b.upper_bound())
}

fn report(label: &str, took: &[Duration], reconcile_p99: f64) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label:<34} namespaces={:<4} converge p50={:>7.1} ms  p99={:>7.1} ms  reconcile p99 ≤ {:>5.0} ms",
        took.len(),
        ms(p(0.5)),
        ms(p(0.99)),
        reconcile_p99 * 1e3
    );
}

fn main() {
    let cp = ControlPlane::shared().expect("the neighbour benchmark needs the control plane: `make control-plane`");
    let count = std::env::var("NEIGHBOUR_NAMESPACES").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = cp.admin_client().await;
        let (alone, alone_p99) = measure(&client, false, count).await;
        report("namespace-defaults alone", &alone, alone_p99);
        let (beside, beside_p99) = measure(&client, true, count).await;
        report("namespace-defaults beside greedy", &beside, beside_p99);
        let p99 = |t: &[Duration]| t[((t.len() - 1) as f64 * 0.99).round() as usize].as_secs_f64();
        println!("converge p99 ratio beside/alone: {:.2}× (goal ≤ 1.2×)", p99(&beside) / p99(&alone));
    });
}
