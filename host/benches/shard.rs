//! Sharding benchmark: per-replica resident set and bytes read (list and watch traffic) for 1, 2
//! and 4 `kubewasm run --sharding auto` replicas stamping the same ConfigMaps, and the time until
//! everything is stamped again after one replica is killed — beside a leader-elected pair whose
//! leader is killed. Each configuration gets its own fresh control plane with the
//! `ShardedListAndWatch` feature gate on (set `SHARD_BENCH_SERVER_SIDE=false` for the client-side
//! filter).
//!
//! Run: `make plugins control-plane && cargo bench -p kubewasm --bench shard`.
//! `SHARD_BENCH_OBJECTS` (10,000), `SHARD_BENCH_NAMESPACES` (100) and `SHARD_BENCH_REPLICAS`
//! (`1,2,4`) change the sizes.

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kubewasm_testenv::ControlPlane;

use common::process::{HostProcess, kubewasm_run};

const STAMP: &str = "kubewasm.test/version";
const LABEL: &str = "kubewasm.bench/shard=1";
const TIMEOUT: Duration = Duration::from_secs(900);

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A host stamping [`LABEL`]led ConfigMaps with `name`; `mode` is `--sharding auto` or
/// `--leader-elect`.
fn host(cp: &ControlPlane, dir: &Path, name: &str, mode: &[&str]) -> HostProcess {
    let config = format!(
        "maxConcurrent: 4\ngrants:\n  read: [ConfigMap]\n  write: [ConfigMap]\nsettings:\n  version: {name}\n  selector: \"{LABEL}\"\n"
    );
    common::install_plugin(dir, "stamper", "fixture_stamper.wasm", &config);
    let mut command = kubewasm_run(dir);
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).arg("--compile-cache").arg(common::test_compile_cache());
    command.args(["--wasm-plugins", "false", "--leader-election-namespace", "default"]).args(mode);
    command.args(["--leader-election-lease-duration-seconds", "6", "--leader-election-renew-deadline-seconds", "4"]);
    command.args(["--leader-election-retry-period-seconds", "1"]);
    command.env("HOSTNAME", name);
    HostProcess::spawn(command)
}

/// `(VmRSS KiB, rchar bytes)` of a process.
fn usage(pid: u32) -> (u64, u64) {
    let field = |file: &str, key: &str| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
        let line = text.lines().find(|l| l.starts_with(key)).map(str::to_owned).unwrap_or_default();
        line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    (field("status", "VmRSS:"), field("io", "rchar:"))
}

/// Stamps by replica name, once every object carries one of `names`.
async fn stamped_by(client: &kube::Client, names: &[String], total: usize) -> BTreeMap<String, usize> {
    let api = Api::<ConfigMap>::all(client.clone());
    let started = Instant::now();
    loop {
        let listed = api.list(&ListParams::default().labels(LABEL)).await.unwrap();
        let mut by = BTreeMap::new();
        for cm in &listed.items {
            let stamp = cm.metadata.annotations.as_ref().and_then(|a| a.get(STAMP)).cloned().unwrap_or_default();
            *by.entry(stamp).or_insert(0) += 1;
        }
        let done: usize = names.iter().filter_map(|n| by.get(n)).sum();
        if done == total {
            return by;
        }
        assert!(started.elapsed() < TIMEOUT, "not converged: {by:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn objects(client: &kube::Client, namespaces: usize, total: usize) {
    for i in 0..namespaces {
        let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": format!("bench-{i}")}})).unwrap();
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    stream::iter(0..total)
        .map(|i| {
            let api = Api::<ConfigMap>::namespaced(client.clone(), &format!("bench-{}", i % namespaces));
            async move {
                let cm = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("cm-{i}"), "labels": {"kubewasm.bench/shard": "1"}},
                    "data": {"payload": "x".repeat(512)}}))
                .unwrap();
                api.create(&PostParams::default(), &cm).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
        .unwrap();
}

/// Runs `replicas` hosts in `mode` on a fresh control plane; prints per-replica figures after
/// convergence and the time to converge again after the first replica is killed.
fn run(label: &str, replicas: usize, mode: &[&str], server_side: bool, namespaces: usize, total: usize) {
    let mut builder = ControlPlane::builder();
    if server_side {
        builder = builder.apiserver_arg("--feature-gates=ShardedListAndWatch=true");
    }
    let cp = builder.start().expect("control plane (make control-plane)");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let client = rt.block_on(cp.admin_client());
    rt.block_on(objects(&client, namespaces, total));
    let dirs: Vec<_> = (0..replicas).map(|_| tempfile::tempdir().unwrap()).collect();
    let names: Vec<String> = (0..replicas).map(|i| format!("replica-{i}")).collect();
    let mut hosts: Vec<HostProcess> = names.iter().zip(&dirs).map(|(n, d)| host(&cp, d.path(), n, mode)).collect();
    let started = Instant::now();
    let by = rt.block_on(stamped_by(&client, &names, total));
    println!(
        "{label}: {replicas} replica(s), {total} objects in {namespaces} namespaces, converged in {:.2} s: {by:?}",
        started.elapsed().as_secs_f64()
    );
    for (name, host) in names.iter().zip(&hosts) {
        let (rss, read) = usage(host.id());
        let cached = host.metric("kubewasm_informer_objects", &[("kind", "v1/ConfigMap")]).unwrap_or(0.0);
        println!(
            "  {name}: RSS {:>7.1} MiB, read {:>8.1} MiB, {cached} ConfigMaps cached",
            rss as f64 / 1024.0,
            read as f64 / 1048576.0
        );
    }
    if replicas > 1 {
        // The busiest replica (the leader, for a leader-elected pair).
        let victim = names.iter().position(|n| by.get(n) == by.values().max()).unwrap_or(0);
        let killed = hosts.remove(victim);
        killed.signal("-KILL");
        drop(killed);
        let others: Vec<String> = names.iter().filter(|n| **n != names[victim]).cloned().collect();
        let started = Instant::now();
        rt.block_on(stamped_by(&client, &others, total));
        println!(
            "  after killing {}: everything stamped by the others in {:.2} s",
            names[victim],
            started.elapsed().as_secs_f64()
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of benchmarks
    }
    let total = env("SHARD_BENCH_OBJECTS", 10_000);
    let namespaces = env("SHARD_BENCH_NAMESPACES", 100);
    let server_side = env("SHARD_BENCH_SERVER_SIDE", true);
    let replicas: String = env("SHARD_BENCH_REPLICAS", "1,2,4".to_owned());
    for n in replicas.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
        run("sharded", n, &["--sharding", "auto"], server_side, namespaces, total);
    }
    run("leader-elected pair", 2, &["--leader-elect"], server_side, namespaces, total);
}
