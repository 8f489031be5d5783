//! Writes the API server rejects (issue 32, item 3), against a real kube-apiserver + etcd: a
//! ConfigMap data key with a `/` is refused with 422 Invalid. On a running host the rejection is
//! a Warning Event on the reconciled object saying which write and why; `kubewasm test
//! --server-dry-run` catches it before deployment and changes nothing on the server.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kubewasm::app::{App, PluginFile};
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::{eventually, install_plugin};

const CONVERGE: Duration = Duration::from_secs(60);

/// The `intruder` fixture's settings: on ConfigMaps labelled `kubewasm.test/intruder=<label>`,
/// apply the controlled ConfigMap `out` whose data key has a `/`, which the API server rejects.
fn slash_key_settings(label: &str) -> Value {
    json!({"selector": format!("kubewasm.test/intruder={label}"),
           "writes": [{"how": "apply", "name": "out", "controlled": true, "data": {"a/b": "x"}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_api_server_rejects_is_a_warning_event_on_the_reconciled_object() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("rejected").await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!("settings: {}\n", slash_key_settings(&ns));
    let file = PluginFile {
        name: "slasher".into(),
        wasm: install_plugin(dir.path(), "slasher", "fixture_intruder.wasm", &config),
        config: Some(dir.path().join("slasher.yaml")),
    };
    let mut app = App::new(client.clone(), None, None).unwrap();
    app.add_plugin(&file).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let trigger = json!({"metadata": {"name": "trigger", "labels": {"kubewasm.test/intruder": ns}}});
    api.create(&PostParams::default(), &serde_json::from_value(trigger).unwrap()).await.unwrap();

    let events = Api::<Event>::namespaced(client.clone(), &ns);
    let event = eventually("a WriteRejected Event from kubewasm/slasher", CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("WriteRejected")
                && e.reporting_controller.as_deref() == Some("kubewasm/slasher")
        })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let regarding = event.regarding.unwrap_or_default();
    assert_eq!((regarding.kind.as_deref(), regarding.name.as_deref()), (Some("ConfigMap"), Some("trigger")));
    let note = event.note.unwrap_or_default();
    assert!(note.contains(&format!("apply v1 ConfigMap {ns}/out")), "names the write: {note}");
    assert!(note.contains("a/b"), "says why, with the server's message: {note}");
    assert!(api.get_opt("out").await.unwrap().is_none(), "the rejected write changed nothing");
    assert!(app.shut_down(Duration::from_secs(15)).await);
}
