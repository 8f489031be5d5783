//! Fair shares end to end against a real kube-apiserver + etcd: a greedy plugin (asks for
//! `u32::MAX` workers, slow reconciles, a tight write loop) runs clamped beside namespace-defaults,
//! which still converges.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams, PostParams};
use kubewasm::app::{App, PluginFile};
use kubewasm_testenv::ControlPlane;
use serde_json::json;

use common::{eventually, plugin_dir};

const CONVERGE: Duration = Duration::from_secs(60);

/// ConfigMaps the greedy plugin reconciles (each reconcile re-triggers it: a write loop).
const GREEDY_OBJECTS: usize = 32;

async fn create_namespace(client: &kube::Client, name: &str, labels: serde_json::Value) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_neighbour_is_clamped_and_namespace_defaults_still_converges_beside_it() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let greedy_ns = format!("greedy-{}", std::process::id());
    create_namespace(&client, &greedy_ns, json!({"kubewasm.dev/no-defaults": "true"})).await;
    let selector = format!("kubewasm.test/greedy={greedy_ns}");
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &greedy_ns);
    for i in 0..GREEDY_OBJECTS {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("cm-{i}"), "labels": {"kubewasm.test/greedy": greedy_ns}}
        }))
        .unwrap();
        configmaps.create(&PostParams::default(), &cm).await.unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("greedy.yaml");
    let settings = json!({
        "grants": {"write": ["ConfigMap"]},
        "settings": {"maxConcurrent": u32::MAX, "selector": selector, "sleepMs": 100, "writes": 20},
    });
    std::fs::write(&config, serde_yaml::to_string(&settings).unwrap()).unwrap();
    let greedy =
        PluginFile { name: "greedy".into(), wasm: plugin_dir().join("fixture_greedy.wasm"), config: Some(config) };
    let defaults = PluginFile {
        name: "namespace-defaults".into(),
        wasm: plugin_dir().join("namespace_defaults.wasm"),
        config: None,
    };

    let mut app = App::new(client.clone(), None, None).unwrap();
    app.add_plugin(&greedy).await.unwrap();
    app.add_plugin(&defaults).await.unwrap();
    let plugin = app.manager().plugin("greedy").await.unwrap();
    assert_eq!(plugin.max_concurrent(), 16, "u32::MAX clamped to the default cap");
    let workers = app.manager().workers("greedy").await.unwrap();
    eventually("the greedy plugin's 16 workers", CONVERGE, || async { (workers.running() == 16).then_some(()) }).await;
    eventually("the greedy plugin writing", CONVERGE, || async {
        let list = configmaps.list(&ListParams::default().labels(&format!("kubewasm.test/greedy={greedy_ns}"))).await;
        let annotated = list.unwrap().items.iter().filter(|c| c.metadata.annotations.is_some()).count();
        (annotated == GREEDY_OBJECTS).then_some(())
    })
    .await;

    // Beside it, namespace-defaults converges a new namespace.
    let ns = format!("neighbour-{}", std::process::id());
    create_namespace(&client, &ns, json!({})).await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns);
    eventually("namespace-defaults' quota beside the greedy plugin", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    eventually("namespace-defaults' policy beside the greedy plugin", CONVERGE, || async {
        policies.get_opt("default-deny").await.unwrap()
    })
    .await;
    assert!(workers.running() <= 16, "never more workers than the cap");
    assert!(app.shut_down(Duration::from_secs(20)).await, "in-flight reconciles finished within the grace period");
}
