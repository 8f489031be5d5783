//! `kubewasm record` against a real kube-apiserver + etcd, replayed offline by `kubewasm test`.

use crate::common;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::Api;
use kubewasm_testenv::ControlPlane;

async fn kubewasm(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(args)
        .arg("--compile-cache")
        .arg(common::test_compile_cache())
        .envs(envs.iter().copied())
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_recorded_against_the_apiserver_replays_offline_with_the_same_writes() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("record").await;
    let uid = Api::<Namespace>::all(client.clone()).get(&ns).await.unwrap().metadata.uid.unwrap();
    let out = tempfile::tempdir().unwrap();
    let file = common::fixture_file("namespace-defaults", "namespace_defaults.wasm", "");
    let wasm = file.wasm.unwrap().display().to_string();
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    let dir = out.path().display().to_string();

    let recorded = kubewasm(&["record", &wasm, "--key", &ns, "--out", &dir, "--kubeconfig", &kubeconfig], &[]).await;
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert!(recorded.status.success(), "record failed: {stderr}");
    let file = out.path().join(format!("{ns}.yaml"));
    assert_eq!(String::from_utf8_lossy(&recorded.stdout).trim(), file.display().to_string());
    let fixture = kubewasm::offline::fixtures::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let recording = fixture.recording.expect("a recording header");
    assert_eq!(recording.key, ns);
    let read: Vec<_> = fixture.objects.iter().map(|o| (o["kind"].as_str(), o["metadata"]["name"].as_str())).collect();
    assert_eq!(read, [(Some("Namespace"), Some(ns.as_str()))], "the objects the reconcile read, nothing else");
    let writes = recording.expect[0]["writes"].as_array().unwrap();
    assert_eq!(writes[0]["apply"]["kind"], "ResourceQuota");
    assert_eq!(writes[0]["apply"]["metadata"]["ownerReferences"][0]["uid"], uid.as_str(), "the cluster's uid");
    let quotas: Api<ResourceQuota> = Api::namespaced(client, &ns);
    assert!(quotas.get_opt("default-quota").await.unwrap().is_none(), "recording sends nothing");

    // Offline: no kubeconfig reachable, the same writes.
    let offline = [("KUBECONFIG", "/nonexistent"), ("HOME", "/nonexistent")];
    let file = file.display().to_string();
    let replayed = kubewasm(&["test", &wasm, "--objects", &file], &offline).await;
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success(), "replay differs: {stderr}");
    assert!(stderr.contains("match the recording"), "{stderr}");
    let report: serde_json::Value = serde_yaml::from_slice(&replayed.stdout).unwrap();
    assert_eq!(report, recording.expect);

    // A replay that writes otherwise fails.
    let settings = out.path().join("settings.yaml");
    std::fs::write(&settings, "quotaName: other\n").unwrap();
    let args = ["test", &wasm, "--objects", &file, "--settings", settings.to_str().unwrap()];
    let changed = kubewasm(&args, &offline).await;
    assert_eq!(changed.status.code(), Some(1), "{}", String::from_utf8_lossy(&changed.stderr));
}
