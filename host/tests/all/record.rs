//! `kubewasm record` against a real kube-apiserver + etcd, replayed offline by `kubewasm test`.

use crate::common;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_keeps_the_time_the_plugin_read_and_its_replay_reads_that_time() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("record-time").await;
    let map = serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
    Api::<ConfigMap>::namespaced(client, &ns).create(&Default::default(), &map).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let config = "grants: {write: [ConfigMap]}\nsettings: {version: v1, stampTime: true}\n";
    let file = common::fixture_file("stamper", "fixture_stamper.wasm", config);
    let (wasm, config) = (file.wasm.unwrap().display().to_string(), file.config.unwrap().display().to_string());
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    let dir = out.path().display().to_string();
    let key = format!("{ns}/x");
    let args = ["record", &wasm, "--config", &config, "--key", &key, "--out", &dir, "--kubeconfig", &kubeconfig];
    let recorded = kubewasm(&args, &[]).await;
    assert!(recorded.status.success(), "record failed: {}", String::from_utf8_lossy(&recorded.stderr));
    let file = out.path().join(format!("{ns}_x.yaml"));
    let text = std::fs::read_to_string(&file).unwrap();
    let recording = kubewasm::offline::fixtures::parse(&text).unwrap().recording.expect("a recording header");
    let now = recording.now.expect("the time the plugin read");
    let stamp =
        &recording.expect[0]["writes"][0]["patch"]["body"]["metadata"]["annotations"]["kubewasm.test/ready-since"];
    assert_eq!(stamp, now.as_str(), "the condition helper read the recorded time");

    // The replay reads the recording's time, whatever it says and whenever it runs.
    std::fs::write(&file, text.replace(&now, "2020-02-02T02:02:02Z")).unwrap();
    let file = file.display().to_string();
    let replayed = kubewasm(&["test", &wasm, "--config", &config, "--objects", &file], &[]).await;
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success() && stderr.contains("match the recording"), "replay differs: {stderr}");
}
