//! Event → reconcile latency: with the caches synced, the bench updates ConfigMaps at a steady
//! rate, each stamped with the time it was written (annotation `kubewasm.bench/written-at`, Unix
//! µs, set just before the request), and the controller prints when its reconcile of the object
//! starts how long ago that was (`plugins/fixtures/latency`; the peer's `--latency-selector`
//! mode). Both clocks are this machine's wall clock; the figure includes the write's own round
//! trip, alike for both.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm_testenv::ControlPlane;
use serde_json::json;

use crate::procs::Procs;
use crate::variant::{Setup, Variant};

const NAMESPACE: &str = "latency";
const SELECTOR: &str = "kubewasm.bench/latency=on";
const WRITTEN_AT: &str = "kubewasm.bench/written-at";
const POLL: Duration = Duration::from_millis(50);

/// What a latency round asks for.
pub struct Spec {
    /// ConfigMaps the controller caches; updates go round them.
    pub objects: usize,
    /// Updates per second.
    pub rate: u32,
    /// Seconds of updates.
    pub seconds: u32,
}

/// What a latency round measured, in milliseconds.
#[derive(Clone, Debug)]
pub struct Latencies {
    /// Updates made.
    pub updates: usize,
    /// Reconciles that reported a latency (fewer than updates if the queue merged two
    /// updates of one key).
    pub reconciles: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros()
}

/// The latencies (µs) the controller has printed so far.
fn printed(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let value = |line: &str| {
        let rest = &line[line.find("latency_us=")? + "latency_us=".len()..];
        rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    text.lines().filter_map(value).collect()
}

fn command(variant: Variant, setup: &Setup, kubeconfig: &Path, plugins: &Path) -> std::process::Command {
    let mut command;
    if variant.is_peer() {
        command = std::process::Command::new(&setup.peer);
        let queue = if variant == Variant::CrPriority { "priority" } else { "fifo" };
        command.arg("--kubeconfig").arg(kubeconfig).arg(format!("--queue={queue}"));
        command.args(["--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0"]);
        command.arg(format!("--latency-selector={SELECTOR}"));
    } else {
        command = std::process::Command::new(&setup.kubewasm);
        // The plugin's stdout is logged at info under this target; everything else at warn.
        command.args(["--log", "warn,kubewasm::plugin::output=info", "run", "--admin-addr", "127.0.0.1:0"]);
        command.args(["--wasm-plugins=false", "--watch-plugins=false", "--plugins"]).arg(plugins);
        command.arg("--kubeconfig").arg(kubeconfig);
        if variant == Variant::KubewasmImpersonated {
            command.args(crate::variant::IMPERSONATED);
        }
    }
    command
}

async fn write(api: &Api<ConfigMap>, i: usize, create: bool) {
    let stamp = now_us().to_string();
    let meta = json!({"name": format!("cm-{i}"), "labels": {"kubewasm.bench/latency": "on"},
        "annotations": {WRITTEN_AT: stamp}});
    if create {
        let cm = serde_json::from_value(json!({"metadata": meta})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    } else {
        let patch = json!({"metadata": {"annotations": {WRITTEN_AT: stamp}}});
        api.patch(&format!("cm-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
}

/// One round of `variant` against its own fresh control plane.
pub fn run(variant: Variant, spec: &Spec, setup: &Setup, work: &Path) -> Latencies {
    std::fs::create_dir_all(work).unwrap();
    let cp = ControlPlane::builder().start().expect("a control plane (make control-plane)");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client = rt.block_on(cp.admin_client());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    rt.block_on(async {
        let ns = serde_json::from_value::<Namespace>(json!({"metadata": {"name": NAMESPACE}})).unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        stream::iter(0..spec.objects).for_each_concurrent(16, |i| write(&api, i, true)).await;
    });

    let plugins = work.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(setup.plugin_dir.join("fixture_latency.wasm"), plugins.join("latency.wasm"))
        .expect("fixture_latency.wasm: run `make rust-plugins`");
    let config = format!(
        "maxConcurrent: 1\ngrants: {{read: [ConfigMap], status: [ConfigMap]}}\nsettings:\n  selector: {SELECTOR}\n"
    );
    std::fs::write(plugins.join("latency.yaml"), config).unwrap();
    let mut procs = Procs::spawn(vec![command(variant, setup, cp.kubeconfig_path(), &plugins)], work, "latency");
    let log = work.join("latency-0.log");

    // Synced: every object's first reconcile has reported (the creations' stamps).
    let started = Instant::now();
    while printed(&log).len() < spec.objects {
        procs.check_running();
        assert!(started.elapsed() < Duration::from_secs(300), "{} did not sync", variant.name());
        std::thread::sleep(POLL);
    }
    let before = printed(&log).len();

    let updates = (spec.rate * spec.seconds) as usize;
    rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1) / spec.rate);
        let mut writes = Vec::with_capacity(updates);
        for k in 0..updates {
            tick.tick().await;
            let (api, i) = (api.clone(), k % spec.objects);
            writes.push(tokio::spawn(async move { write(&api, i, false).await }));
        }
        for w in writes {
            w.await.unwrap();
        }
    });
    // Until every update has reported, or nothing more came for 5 s.
    let (mut seen, mut last_change) = (printed(&log).len(), Instant::now());
    while seen - before < updates && last_change.elapsed() < Duration::from_secs(5) {
        procs.check_running();
        std::thread::sleep(POLL);
        let now = printed(&log).len();
        if now != seen {
            (seen, last_change) = (now, Instant::now());
        }
    }
    let mut latencies: Vec<u64> = printed(&log).split_off(before);
    drop(procs);
    drop(rt);
    drop(cp);
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)] as f64 / 1000.0;
    Latencies { updates, reconciles: latencies.len(), p50: at(0.5), p99: at(0.99), max: at(1.0) }
}

/// Prints one round's line.
pub fn line(round: usize, variant: Variant, l: &Latencies) {
    println!(
        "| {round} | {} | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
        variant.name(),
        l.updates,
        l.reconciles,
        l.p50,
        l.p99,
        l.max
    );
}

/// Prints the medians per variant and kubewasm's ratio to each peer.
pub fn summary(results: &[(Variant, Latencies)]) {
    let median = |v: Variant, f: fn(&Latencies) -> f64| {
        let mut xs: Vec<f64> = results.iter().filter(|(w, _)| *w == v).map(|(_, l)| f(l)).collect();
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied()
    };
    let mut variants: Vec<Variant> = Vec::new();
    for (v, _) in results {
        if !variants.contains(v) {
            variants.push(*v);
        }
    }
    println!("\n| variant | p50 (median of rounds) | p99 (median of rounds) |\n|---|---|---|");
    for &v in &variants {
        if let (Some(p50), Some(p99)) = (median(v, |l| l.p50), median(v, |l| l.p99)) {
            println!("| {} | {p50:.2} ms | {p99:.2} ms |", v.name());
        }
    }
    let ours = (median(Variant::Kubewasm, |l| l.p50), median(Variant::Kubewasm, |l| l.p99));
    for &peer in variants.iter().filter(|v| v.is_peer()) {
        if let ((Some(a50), Some(a99)), Some(b50), Some(b99)) = (ours, median(peer, |l| l.p50), median(peer, |l| l.p99))
        {
            println!("kubewasm / {}: p50 {:.2}×, p99 {:.2}×", peer.name(), a50 / b50, a99 / b99);
        }
    }
}
