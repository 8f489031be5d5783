//! What `/readyz` means, against a real kube-apiserver: 503 until every plugin file present at
//! start has been applied or rejected and the caches of those that loaded have synced; a
//! rejected file holds nothing down, before or after it is deleted; a config file rejected for
//! an unknown field counts as a rejected version.

use crate::common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, PostParams};
use kubewasm_host::app::App;
use kubewasm_testenv::ControlPlane;

use common::process::{HostProcess, kubewasm_run};
use common::{eventually, install_plugin, metric_value};

const TIMEOUT: Duration = Duration::from_secs(120);

/// `kubewasm run` on `plugins`, plugin files only (the shared control plane has no WasmPlugin
/// CRD), without a compile cache: loading takes a compile, the window the old check passed in.
fn host(plugins: &std::path::Path, cp: &ControlPlane) -> HostProcess {
    let mut command = kubewasm_run(plugins);
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).args(["--wasm-plugins", "false"]);
    HostProcess::spawn(command)
}

fn is_ok(response: &str) -> bool {
    response.starts_with("HTTP/1.1 200")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_every_plugin_file_present_at_start_serves_with_synced_caches_and_then_stays_200() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    install_plugin(dir.path(), "namespace-defaults", "namespace_defaults.wasm", "{}\n");
    let host = host(dir.path(), &cp);

    // Every answer from the first one on, as fast as the admin server answers.
    let deadline = Instant::now() + TIMEOUT;
    let first_ok = loop {
        if let Some(response) = host.get("/readyz") {
            if is_ok(&response) {
                break response;
            }
            assert!(response.starts_with("HTTP/1.1 503"), "{response}");
        }
        assert!(Instant::now() < deadline, "not ready within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        first_ok.contains("[+] controller namespace-defaults"),
        "ready before the plugin present at start served with synced caches:\n{first_ok}"
    );
    assert!(first_ok.contains("[+] plugin directory"), "{first_ok}");

    // No flapping: it stays ready while the plugin does its work.
    let name = format!("readyz-{}", std::process::id());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &name);
    while quotas.get_opt("default-quota").await.unwrap().is_none() {
        let response = host.get("/readyz").expect("the admin server answers");
        assert!(is_ok(&response), "ready, then not ready again:\n{response}");
        assert!(Instant::now() < deadline, "the plugin did not reconcile within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_file_that_never_loads_holds_readiness_down_neither_before_nor_after_it_is_deleted() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("garbage.wasm"), b"this is not wasm").unwrap();
    install_plugin(dir.path(), "namespace-defaults", "namespace_defaults.wasm", "{}\n");
    let mut host = host(dir.path(), &cp);
    host.ready(TIMEOUT).await;
    let rejected = host.metric("kubewasm_plugin_rejected_versions_total", &[("plugin", "garbage")]);
    assert_eq!(rejected, Some(1.0), "the garbage file was rejected, and counted");
    let report = host.get("/readyz").unwrap();
    assert!(is_ok(&report) && !report.contains("garbage"), "{report}");

    // Deleted, then another plugin added: once that one shows, the deletion has been seen.
    std::fs::remove_file(dir.path().join("garbage.wasm")).unwrap();
    install_plugin(dir.path(), "sleeper", "fixture_sleeper.wasm", "grants: {write: [ConfigMap]}\n");
    let report = eventually("the plugin added after the deletion serving", TIMEOUT, || async {
        host.get("/readyz").filter(|r| r.contains("[+] controller sleeper"))
    })
    .await;
    assert!(is_ok(&report) && !report.contains("garbage"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_with_an_unknown_field_counts_as_a_rejected_version() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let app = App::new(cp.admin_client().await, None, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    install_plugin(dir.path(), "typo", "fixture_sleeper.wasm", "grants: {write: [ConfigMap]}\nsetings: {}\n");
    let mut source = app.directory_source(dir.path());
    let changes = source.sync().await.unwrap();
    assert!(
        matches!(&changes[..], [(_, kubewasm_host::hotload::directory::Change::Rejected(e))] if format!("{e:#}").contains("setings")),
        "{changes:?}"
    );
    let metrics = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let rejected = metric_value(&metrics, "kubewasm_plugin_rejected_versions_total", &[("plugin", "typo")]);
    assert_eq!(rejected, Some(1.0), "{metrics}");
    assert!(app.plugins().serving("typo").await.is_none());
    assert!(app.readiness().is_ready(), "the pass is over; a rejected file holds nothing down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_whose_settings_break_its_schema_is_logged_once_blaming_the_config_file() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let dir = tempfile::tempdir().unwrap();
    let schema =
        "settingsSchema: {type: object, properties: {optOutLabel: {type: string}}, additionalProperties: false}\n";
    let config = install_plugin(dir.path(), "defaults", "namespace_defaults.wasm", schema).with_extension("yaml");
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut command = kubewasm_run(dir.path());
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).args(["--wasm-plugins", "false"]);
    command.stderr(log.reopen().unwrap());
    let mut host = HostProcess::spawn(command);
    host.ready(TIMEOUT).await;

    std::fs::write(&config, format!("settings: {{optOutLable: x}}\n{schema}")).unwrap();
    eventually("the new version rejected", TIMEOUT, || async {
        host.metric("kubewasm_plugin_rejected_versions_total", &[("plugin", "defaults")]).filter(|n| *n == 1.0)
    })
    .await;
    // A later pass has run once another file added after it serves: every line the rejecting
    // pass logs is written by then.
    install_plugin(dir.path(), "later", "fixture_sleeper.wasm", "grants: {write: [ConfigMap]}\n");
    eventually("the plugin added after the rejection serving", TIMEOUT, || async {
        host.get("/readyz").filter(|r| r.contains("[+] controller later"))
    })
    .await;
    let log = std::fs::read_to_string(log.path()).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("optOutLable")).collect();
    assert_eq!(lines.len(), 1, "one line per rejection:\n{log}");
    assert!(lines[0].contains("fix=defaults.yaml") && !lines[0].contains("defaults.wasm"), "{}", lines[0]);
    assert!(lines[0].contains("/optOutLable: not a setting the schema allows"), "{}", lines[0]);
    assert!(lines[0].contains("serving_revision=1") && !lines[0].contains("Some("), "{}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_admin_address_is_taken_exits_1_naming_the_address() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let plugins = tempfile::tempdir().unwrap();
    let mut host = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    host.args(["--log", "warn", "run", "--wasm-plugins", "false", "--admin-addr", &addr, "--plugins"])
        .arg(plugins.path())
        .arg("--kubeconfig")
        .arg(cp.kubeconfig_path())
        .env_remove("RUST_BACKTRACE")
        .kill_on_drop(true);
    let output = tokio::time::timeout(TIMEOUT, host.output())
        .await
        .expect("kubewasm still runs with its admin address taken")
        .unwrap();
    let (status, stderr) = (output.status, String::from_utf8_lossy(&output.stderr));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot serve the admin endpoints on {addr}")), "{stderr}");
}
