//! `kubewasm run` as a process: SIGTERM stops dequeuing (queued keys are not handed out), lets
//! the reconcile in flight finish inside the grace period, and exits 0.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubewasm_testenv::ControlPlane;

use common::{eventually, install_plugin, metric_value};

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
}

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
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut host = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(["run", "--plugins"])
        .arg(dir.path())
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .args(["--admin-addr", &addr, "--shutdown-grace-seconds", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    let timeout = Duration::from_secs(60);
    eventually("/readyz 200", timeout, || async {
        http_get(&addr, "/readyz").filter(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
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
        let metrics = http_get(&addr, "/metrics")?;
        let active = metric_value(&metrics, "controller_runtime_active_workers", &[("controller", "sleeper")])?;
        let queued = metric_value(&metrics, "workqueue_depth", &[("name", "sleeper")])?;
        (active >= 1.0 && queued >= (KEYS - 1) as f64).then_some(())
    })
    .await;

    let killed = Command::new("kill").args(["-TERM", &host.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(status) = host.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "kubewasm did not exit within {timeout:?} of SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "kubewasm exited with {status}");
    let mut slept = 0;
    for cm in configmaps.list(&Default::default()).await.unwrap() {
        let annotations = cm.metadata.annotations.unwrap_or_default();
        slept += usize::from(annotations.get("kubewasm.dev/slept").map(String::as_str) == Some("true"));
    }
    assert_eq!(slept, 1, "the reconcile in flight finished, and no queued key was handed out after SIGTERM");
}
