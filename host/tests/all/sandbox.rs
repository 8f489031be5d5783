//! The sandbox in a real cluster: a looping plugin and a plugin making forbidden calls cost
//! only their own reconciles; the forbidden calls show up as an Event and metrics, are retried
//! with backoff, and never reach the API server.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kubewasm_host::app::PluginFile;
use kubewasm_testenv::ControlPlane;

use common::{eventually, install_plugin, metric_value};

const CONVERGE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_and_a_forbidden_plugin_cost_only_their_own_reconciles() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, built: &str, config: &str| PluginFile {
        name: name.into(),
        wasm: Some(install_plugin(dir.path(), name, built, config)),
        config: Some(dir.path().join(format!("{name}.yaml"))),
    };
    let mut app = common::app(&client);
    app.add_plugin(&file("looper", "fixture_looper.wasm", "limits: {deadlineMs: 1000}\n")).await.unwrap();
    app.add_plugin(&file("forbidden", "fixture_forbidden.wasm", "")).await.unwrap();
    app.add_plugin(&file("namespace-defaults", "namespace_defaults.wasm", "")).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;

    let ns = cp.namespace("sandbox").await;
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "cm"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await.unwrap();
    let metrics = || prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();

    // The healthy plugin converges while the looper burns its deadline on every ConfigMap.
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    eventually("namespace-defaults converged next to the looper", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    eventually("the looper stopped at its deadline", CONVERGE, || async {
        metric_value(&metrics(), "kubewasm_plugin_limit_hits_total", &[("plugin", "looper"), ("limit", "deadline")])
            .filter(|v| *v >= 1.0)
    })
    .await;

    // The forbidden plugin: an Event on the object, metrics, retries, and nothing written.
    let events = Api::<Event>::namespaced(client.clone(), &ns);
    let event = eventually("an AccessDenied event about the ConfigMap", CONVERGE, || async {
        events.list(&ListParams::default()).await.unwrap().items.into_iter().find(|e| {
            e.reason.as_deref() == Some("AccessDenied")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("cm")
                && e.reporting_controller.as_deref() == Some("kubewasm/forbidden")
        })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let labels = [("plugin", "forbidden"), ("function", "client.apply"), ("result", "forbidden")];
    eventually("forbidden host calls counted", CONVERGE, || async {
        metric_value(&metrics(), "kubewasm_plugin_host_calls_total", &labels).filter(|v| *v >= 1.0)
    })
    .await;
    eventually("the failing key retried with backoff", CONVERGE, || async {
        metric_value(&metrics(), "workqueue_retries_total", &[("name", "forbidden")]).filter(|v| *v >= 1.0)
    })
    .await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    assert!(deployments.get_opt("intruder").await.unwrap().is_none(), "a forbidden write reached the API server");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}
