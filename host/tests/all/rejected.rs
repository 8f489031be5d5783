//! Writes the API server rejects (issue 32, item 3), against a real kube-apiserver + etcd: a
//! ConfigMap data key with a `/` is refused with 422 Invalid. On a running host the rejection is
//! a Warning Event on the reconciled object saying which write and why; `kubewasm test
//! --server-dry-run` catches it before deployment and changes nothing on the server.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kubewasm_host::app::PluginFile;
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
        wasm: Some(install_plugin(dir.path(), "slasher", "fixture_intruder.wasm", &config)),
        config: Some(dir.path().join("slasher.yaml")),
    };
    let mut app = common::app(&client);
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

async fn kubewasm(args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(args)
        .arg("--compile-cache")
        .arg(common::test_compile_cache())
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dry_run_fails_the_test_with_the_servers_message_and_stores_nothing() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("dry-run").await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!("settings: {}\n", slash_key_settings(&ns));
    let wasm = install_plugin(dir.path(), "slasher", "fixture_intruder.wasm", &config).display().to_string();
    let fixtures = dir.path().join("objects.yaml");
    let trigger = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "trigger", "namespace": ns, "labels": {"kubewasm.test/intruder": ns}}});
    std::fs::write(&fixtures, serde_yaml::to_string(&trigger).unwrap()).unwrap();
    let (fixtures, kubeconfig) = (fixtures.display().to_string(), cp.kubeconfig_path().display().to_string());

    // Offline alone, the write passes.
    let offline = kubewasm(&["test", &wasm, "--objects", &fixtures]).await;
    assert!(offline.status.success(), "{}", String::from_utf8_lossy(&offline.stderr));
    let report: Value = serde_yaml::from_slice(&offline.stdout).unwrap();
    assert_eq!(report[0]["result"], "done", "{report}");

    // With the dry run, the API server's 422 fails it, naming the write.
    let args = ["test", &wasm, "--objects", &fixtures, "--server-dry-run", "--kubeconfig", &kubeconfig];
    let checked = kubewasm(&args).await;
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{stderr}");
    let line = stderr.lines().find(|l| l.contains("the API server rejects apply")).unwrap_or_default();
    assert!(
        line.contains(&format!("reconcile {ns}/trigger: the API server rejects apply v1 ConfigMap {ns}/out")),
        "{stderr}"
    );
    assert!(line.contains("a/b"), "the server's message: {stderr}");
    let report: Value = serde_yaml::from_slice(&checked.stdout).unwrap();
    assert!(report[0]["result"].as_str().unwrap().starts_with("error:"), "the plugin saw the 422: {report}");
    let event = &report[0]["writes"].as_array().unwrap().last().unwrap()["event"];
    assert_eq!(event["reason"], "WriteRejected", "{report}");

    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let stored = api.list(&ListParams::default()).await.unwrap();
    assert!(stored.items.is_empty(), "a dry run stores nothing: {:?}", stored.items);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dry_run_of_a_write_in_a_namespace_the_server_lacks_fails_naming_the_namespace() {
    let Some(cp) = ControlPlane::shared() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = format!("settings: {}\n", json!({"writes": [{"how": "apply", "name": "out", "controlled": true}]}));
    let wasm = install_plugin(dir.path(), "writer", "fixture_intruder.wasm", &config).display().to_string();
    let fixtures = dir.path().join("objects.yaml");
    let trigger =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger", "namespace": "nowhere-32"}});
    std::fs::write(&fixtures, serde_yaml::to_string(&trigger).unwrap()).unwrap();
    let (fixtures, kubeconfig) = (fixtures.display().to_string(), cp.kubeconfig_path().display().to_string());
    let args = ["test", &wasm, "--objects", &fixtures, "--server-dry-run", "--kubeconfig", &kubeconfig];
    let checked = kubewasm(&args).await;
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("namespace nowhere-32 does not exist on the API server"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_dry_run_validates_a_write_in_a_namespace_the_same_reconcile_makes_in_default_and_passes() {
    use common::hostile::{config_map_kind, hostile, namespace_kind};
    let Some(cp) = ControlPlane::shared() else { return };
    let dir = tempfile::tempdir().unwrap();
    let made = format!("made-here-{}", std::process::id());
    // The child first: a desired state's writes are sent together, in any order.
    let settings = json!({"selector": "made=here", "writes": [namespace_kind(), config_map_kind()], "onSelected": [
        {"op": "apply", "kind": config_map_kind(), "namespace": made, "name": "inside", "body": {"data": {"k": "v"}}},
        {"op": "apply", "kind": namespace_kind(), "name": made},
    ]});
    let file = hostile(dir.path(), "maker", "", settings);
    let wasm = file.wasm.unwrap().display().to_string();
    let fixtures = dir.path().join("objects.yaml");
    let trigger = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "trigger", "namespace": "default", "labels": {"made": "here"}}});
    std::fs::write(&fixtures, serde_yaml::to_string(&trigger).unwrap()).unwrap();
    let (fixtures, kubeconfig) = (fixtures.display().to_string(), cp.kubeconfig_path().display().to_string());
    let args = ["test", &wasm, "--objects", &fixtures, "--server-dry-run", "--kubeconfig", &kubeconfig];
    let checked = kubewasm(&args).await;
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{stderr}");
    let said = format!("apply v1 ConfigMap {made}/inside: namespace {made} is made by this reconcile");
    assert!(stderr.contains(&said) && stderr.contains("validated in namespace default instead"), "{stderr}");
    let report: Value = serde_yaml::from_slice(&checked.stdout).unwrap();
    assert_eq!(report[0]["result"], "done", "{report}");
}
