//! Fair shares end to end against a real kube-apiserver + etcd: a greedy plugin (asks for
//! `u32::MAX` workers, slow reconciles, a tight write loop) runs clamped and uncapped beside
//! namespace-defaults, which still converges; and when the API server's priority and fairness
//! rejects the greedy plugin's flow (429), the host pauses that plugin, its write seats shrink and
//! the neighbour still converges.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::Options;
use kubewasm_host::plugin::RuntimeConfig;
use kubewasm_host::rbac::Identity;
use kubewasm_testenv::ControlPlane;
use serde_json::json;

use common::{eventually, metric_value};

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

    let settings = json!({
        "grants": {"write": ["ConfigMap"]},
        "settings": {"maxConcurrent": u32::MAX, "selector": selector, "sleepMs": 100, "writes": 20},
    });
    let greedy = common::fixture_file("greedy", "fixture_greedy.wasm", &serde_yaml::to_string(&settings).unwrap());
    let defaults = common::fixture_file("namespace-defaults", "namespace_defaults.wasm", "");

    let mut app = common::app(&client);
    app.add_plugin(&greedy).await.unwrap();
    app.add_plugin(&defaults).await.unwrap();
    let plugin = app.plugins().plugin("greedy").await.unwrap();
    assert_eq!(plugin.max_concurrent(), 16, "u32::MAX clamped to the default cap");
    let workers = app.plugins().workers("greedy").await.unwrap();
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

/// Makes `configmaps` for the greedy plugin to loop over, labelled `kubewasm.test/greedy=<ns>`.
async fn greedy_objects(client: &kube::Client, ns: &str) {
    create_namespace(client, ns, json!({"kubewasm.dev/no-defaults": "true"})).await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    for i in 0..GREEDY_OBJECTS {
        let cm = json!({"metadata": {"name": format!("cm-{i}"), "labels": {"kubewasm.test/greedy": ns}}});
        configmaps.create(&PostParams::default(), &serde_json::from_value(cm).unwrap()).await.unwrap();
    }
}

/// A priority level of one seat that rejects (429) what does not fit, and a FlowSchema putting
/// plugin `plugin`'s ServiceAccount in it, both named `name`.
async fn reject_flow_of(client: &kube::Client, name: &str, plugin: &str) {
    let level = json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"},
        }},
    });
    let schema = json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                    "name": kubewasm_host::identity::service_account_name(plugin),
                    "namespace": kubewasm_host::leader::default_namespace(),
                }}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": true}],
            }],
        },
    });
    let params = PostParams::default();
    let levels = Api::<PriorityLevelConfiguration>::all(client.clone());
    levels.create(&params, &serde_json::from_value(level).unwrap()).await.unwrap();
    Api::<FlowSchema>::all(client.clone()).create(&params, &serde_json::from_value(schema).unwrap()).await.unwrap();
}

/// Requests kube-apiserver's priority and fairness rejected at priority level `level`.
async fn rejected_at(client: &kube::Client, level: &str) -> f64 {
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_rejected_requests_total{"))
        .filter(|l| l.contains(&format!("priority_level=\"{level}\"")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_api_server_rejects_a_greedy_plugins_flow_the_host_pauses_it_shrinks_the_seats_and_its_neighbour_converges()
 {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let id = std::process::id();
    let (plugin, name, greedy_ns) =
        (format!("pushed-{id}"), format!("kubewasm-test-pushed-{id}"), format!("pushed-{id}"));
    greedy_objects(&client, &greedy_ns).await;
    reject_flow_of(&client, &name, &plugin).await;

    let settings = json!({
        "grants": {"write": ["ConfigMap"]},
        "settings": {"maxConcurrent": 16, "selector": format!("kubewasm.test/greedy={greedy_ns}"), "writes": 20},
    });
    let greedy = common::fixture_file(&plugin, "fixture_greedy.wasm", &serde_yaml::to_string(&settings).unwrap());
    let defaults = common::fixture_file("namespace-defaults", "namespace_defaults.wasm", "");
    // As `kubewasm run` sends plugins' requests: without kube's own retries, so the host sees
    // each 429.
    let identity =
        Identity { namespace: kubewasm_host::leader::default_namespace(), host_service_account: "kubewasm".into() };
    let options = Options { identity: Some(identity), provision_rbac: true, ..Options::default() };
    let plugin_client = kubewasm_host::app::plugin_client(cp.admin_config()).unwrap();
    let runtime = RuntimeConfig::default();
    let mut app = App::with_plugin_client(client.clone(), plugin_client, runtime, None, options).unwrap();
    app.add_plugin(&greedy).await.unwrap();
    app.add_plugin(&defaults).await.unwrap();

    eventually("the API server rejecting the greedy plugin's flow (429)", CONVERGE, || async {
        (rejected_at(&client, &name).await > 0.0).then_some(())
    })
    .await;
    let registry = app.registry().clone();
    let metric = |name: &str, labels: &[(&str, &str)]| {
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
        metric_value(&text, name, labels).unwrap_or(0.0)
    };
    eventually("the host pausing the pushed-back plugin", CONVERGE, || async {
        (metric("kubewasm_plugin_write_pushbacks_total", &[("plugin", &plugin)]) > 0.0).then_some(())
    })
    .await;
    eventually("the host's write seats shrinking", CONVERGE, || async {
        (metric("kubewasm_write_seats", &[]) < kubewasm_host::writer::fair::DEFAULT_MAX_SEATS as f64).then_some(())
    })
    .await;

    let ns = format!("pushed-neighbour-{id}");
    create_namespace(&client, &ns, json!({})).await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    eventually("namespace-defaults' quota beside the pushed-back plugin", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(20)).await, "in-flight reconciles finished within the grace period");
    let params = DeleteParams::default();
    Api::<FlowSchema>::all(client.clone()).delete(&name, &params).await.unwrap();
    Api::<PriorityLevelConfiguration>::all(client.clone()).delete(&name, &params).await.unwrap();
}
