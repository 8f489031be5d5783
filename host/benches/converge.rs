//! Converge benchmark: time until 2,000 pre-created Namespaces each have namespace-defaults'
//! ResourceQuota and NetworkPolicy, and the controller process's peak RSS — kubewasm with the
//! Wasm plugin against the same logic as a native kube-runtime `Controller`. Each runs as its
//! own process against its own fresh control plane (same binaries, same machine, same run), one
//! reconcile at a time (controller-runtime's default; kube-runtime's is unbounded).
//!
//! Run: `make plugins control-plane && cargo bench -p kubewasm --bench converge`.
//! `CONVERGE_NAMESPACES` changes the count.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use kubewasm_testenv::ControlPlane;
use serde_json::json;

const MANAGER: &str = "native/namespace-defaults";

/// The native twin of plugins/rust/namespace-defaults with its default settings.
async fn reconcile(ns: Arc<Namespace>, client: Arc<kube::Client>) -> Result<Action, kube::Error> {
    let name = ns.metadata.name.clone().unwrap_or_default();
    if ns.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let owner = json!([{"apiVersion": "v1", "kind": "Namespace", "name": name, "uid": ns.metadata.uid,
                        "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"app.kubernetes.io/managed-by": "kubewasm-namespace-defaults"});
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "default-quota", "namespace": name, "labels": labels, "ownerReferences": owner},
        "spec": {"hard": {"pods": "50", "requests.cpu": "4", "requests.memory": "8Gi"}}});
    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny", "namespace": name, "labels": labels, "ownerReferences": owner},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}});
    let params = PatchParams::apply(MANAGER);
    Api::<ResourceQuota>::namespaced((*client).clone(), &name)
        .patch("default-quota", &params, &Patch::Apply(&quota))
        .await?;
    Api::<NetworkPolicy>::namespaced((*client).clone(), &name)
        .patch("default-deny", &params, &Patch::Apply(&policy))
        .await?;
    Ok(Action::await_change())
}

fn native_controller(kubeconfig: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        Controller::new(Api::<Namespace>::all(client.clone()), watcher::Config::default())
            .owns(Api::<ResourceQuota>::all(client.clone()), watcher::Config::default())
            .owns(Api::<NetworkPolicy>::all(client.clone()), watcher::Config::default())
            .with_config(Config::default().concurrency(1))
            .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), Arc::new(client))
            .for_each(|_| async {})
            .await;
    });
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or("VmHWM: 0 kB");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn converged(client: &kube::Client, want: usize) -> bool {
    let count = |n: usize| n >= want;
    let quotas = Api::<ResourceQuota>::all(client.clone()).list_metadata(&ListParams::default()).await;
    let policies = Api::<NetworkPolicy>::all(client.clone()).list_metadata(&ListParams::default()).await;
    matches!((quotas, policies), (Ok(q), Ok(p)) if count(q.items.len()) && count(p.items.len()))
}

/// Creates the namespaces, starts the controller process, and waits until every namespace
/// has its defaults. Returns (seconds to converge, peak RSS in MiB).
fn run(variant: &str, namespaces: usize, start: impl FnOnce(&ControlPlane) -> Child) -> (f64, f64) {
    let cp = ControlPlane::builder().start().expect("control plane (make control-plane)");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let client = rt.block_on(cp.admin_client());
    rt.block_on(async {
        let api = Api::<Namespace>::all(client.clone());
        stream::iter(0..namespaces)
            .map(|i| {
                let api = api.clone();
                async move {
                    let ns: Namespace =
                        serde_json::from_value(json!({"metadata": {"name": format!("bench-{i}")}})).unwrap();
                    api.create(&PostParams::default(), &ns).await.map(drop)
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
    });
    let want =
        rt.block_on(Api::<Namespace>::all(client.clone()).list_metadata(&ListParams::default())).unwrap().items.len();
    let started = Instant::now();
    let mut child = start(&cp);
    let pid = child.id();
    let mut peak = 0;
    loop {
        peak = peak.max(peak_rss_kib(pid));
        if rt.block_on(converged(&client, want)) {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "{variant} exited early");
        assert!(started.elapsed() < Duration::from_secs(600), "{variant} did not converge in 10 minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed().as_secs_f64();
    peak = peak.max(peak_rss_kib(pid));
    let _ = child.kill();
    let _ = child.wait();
    println!("{variant:<34} {want} namespaces converged in {took:>6.2} s, peak RSS {:>6.1} MiB", peak as f64 / 1024.0);
    (took, peak as f64 / 1024.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("native-controller") {
        return native_controller(&args.next().expect("kubeconfig"));
    }
    let namespaces: usize = std::env::var("CONVERGE_NAMESPACES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let plugins = tempfile::tempdir().unwrap();
    common::install_plugin(plugins.path(), "namespace-defaults", "namespace_defaults.wasm", "");
    let this = std::env::current_exe().unwrap();

    let (native_s, native_mib) = run("native kube-runtime Controller", namespaces, |cp| {
        Command::new(&this).arg("native-controller").arg(cp.kubeconfig_path()).stderr(Stdio::null()).spawn().unwrap()
    });
    let (wasm_s, wasm_mib) = run("kubewasm + namespace-defaults.wasm", namespaces, |cp| {
        Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .args(["run", "--admin-addr", "127.0.0.1:0", "--log", "warn", "--plugins"])
            .arg(plugins.path())
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    println!("ratio kubewasm/native: time {:.2}x, peak RSS {:.2}x", wasm_s / native_s, wasm_mib / native_mib);
}
