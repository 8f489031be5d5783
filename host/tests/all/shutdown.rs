//! `kubewasm run` as a process: SIGTERM stops dequeuing (queued keys are not handed out), lets
//! the reconcile in flight finish inside the grace period, and exits 0.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubewasm_testenv::ControlPlane;

use common::process::{HostProcess, kubewasm_run};
use common::{eventually, install_plugin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_only_the_reconcile_in_flight_finish_hands_out_no_queued_key_and_exits_zero() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    install_plugin(
        dir.path(),
        "sleeper",
        "fixture_sleeper.wasm",
        "grants: {write: [ConfigMap]}\nsettings: {sleepMs: 5000}\n",
    );
    let mut command = kubewasm_run(dir.path());
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).args(["--shutdown-grace-seconds", "30"]);
    let mut host = HostProcess::spawn(command);

    let timeout = Duration::from_secs(60);
    host.ready(timeout).await;
    let ns = cp.namespace("shutdown").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    // One worker (the sleeper's max-concurrent): one key in flight, three queued behind it.
    const KEYS: usize = 4;
    for i in 0..KEYS {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("slow-{i}"), "labels": {"kubewasm.dev/fixture": "sleeper"}}}))
        .unwrap();
        configmaps.create(&PostParams::default(), &cm).await.unwrap();
    }
    eventually("a reconcile in flight and the other keys queued", timeout, || async {
        let active = host.metric("controller_runtime_active_workers", &[("controller", "sleeper")])?;
        let queued = host.metric("workqueue_depth", &[("name", "sleeper")])?;
        (active >= 1.0 && queued >= (KEYS - 1) as f64).then_some(())
    })
    .await;

    host.signal("-TERM");
    let status = host.exited(timeout).await;
    assert!(status.success(), "kubewasm exited with {status}");
    let mut slept = 0;
    for cm in configmaps.list(&Default::default()).await.unwrap() {
        let annotations = cm.metadata.annotations.unwrap_or_default();
        slept += usize::from(annotations.get("kubewasm.dev/slept").map(String::as_str) == Some("true"));
    }
    assert_eq!(slept, 1, "the reconcile in flight finished, and no queued key was handed out after SIGTERM");
}
