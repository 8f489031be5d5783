//! Informer benchmark (issue 4, item 8): initial sync of 10,000 ~1 KiB ConfigMaps by the
//! kubewasm informer and by a client-go informer (`benches/go/informer`), on the same apiserver
//! in the same run; sync time, cache bytes per object vs JSON size, process RSS.
//!
//! `cargo bench -p kubewasm --bench informer` (needs the control-plane binaries and Go).
//! Each peer runs in its own fresh process, alternately, `ROUNDS` times; medians are printed.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, api::PostParams, core::GroupVersionKind};
use kubewasm_host::informer::{InformerParams, SharedInformerFactory};
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

const OBJECTS: usize = 10_000;
const ROUNDS: usize = 3;
const ROLE: &str = "KUBEWASM_BENCH_ROLE";

fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

/// The measured side: one informer sync in this (fresh) process, printed as a JSON line.
async fn measure_kubewasm(kubeconfig: &Path, namespace: &str) -> Value {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let rss_before = rss();
    let start = Instant::now();
    let mut factory = SharedInformerFactory::new(client, &prometheus::Registry::new()).unwrap();
    if std::env::var("KUBEWASM_BENCH_LIST").as_deref() == Ok("paginated") {
        factory = factory.list_strategy(kubewasm_host::informer::ListStrategy::Paginated);
    }
    let t_discovery = Instant::now();
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let informer = factory.informer(&gvk, InformerParams::default().namespace(namespace)).await.unwrap();
    let discovery = t_discovery.elapsed();
    informer.wait_for_sync().await.unwrap();
    let elapsed = start.elapsed();
    let store = informer.store();
    let json_bytes: usize = store.list().iter().map(|o| o.json().len()).sum();
    json!({
        "peer": "kubewasm",
        "objects": store.len(),
        "sync_seconds": elapsed.as_secs_f64(),
        "discovery_seconds": discovery.as_secs_f64(),
        "rss_before_bytes": rss_before,
        "rss_synced_bytes": rss(),
        "cache_bytes": store.approx_heap_bytes(),
        "json_bytes": json_bytes,
    })
}

fn run_peer(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("running a benchmark peer");
    assert!(out.status.success(), "peer failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).expect("a JSON line from the peer");
    serde_json::from_str(line).unwrap()
}

fn median(runs: &[Value], field: &str) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|r| r[field].as_f64().unwrap_or(f64::NAN)).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// 800 characters of base64-like noise, different per object: real data compresses about as
/// badly, while a repeated character let gzip (which client-go asks for and kube-rs does not)
/// shrink the whole list 30-fold.
fn payload(seed: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut state = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..800)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(ALPHABET[(state % 64) as usize])
        })
        .collect()
}

async fn populate(cp: &ControlPlane) -> (String, usize) {
    let client = cp.admin_client().await;
    let ns = cp.namespace("bench-informer").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let started = Instant::now();
    stream::iter(0..OBJECTS)
        .map(|i| {
            let (api, payload) = (api.clone(), payload(i));
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
                    "data": {"payload": payload, "index": i.to_string()}
                }))
                .unwrap();
                api.create(&PostParams::default(), &cm).await
            }
        })
        .buffer_unordered(64)
        .try_for_each(|_| async { Ok(()) })
        .await
        .unwrap();
    eprintln!("created {OBJECTS} ConfigMaps in {ns} in {:.1?}", started.elapsed());
    // One object as the server sends it (with managedFields), for the wire-size column.
    let req = http::Request::get(format!("/api/v1/namespaces/{ns}/configmaps/cm-00000")).body(Vec::new()).unwrap();
    let wire = cp.admin_client().await.request_text(req).await.unwrap();
    let compact = serde_json::to_vec(&serde_json::from_str::<Value>(&wire).unwrap()).unwrap();
    (ns, compact.len())
}

fn build_go_peer(out: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/go/informer");
    let status = Command::new("go").arg("build").arg("-o").arg(out).current_dir(dir).status().expect("go on PATH");
    assert!(status.success(), "building the client-go peer");
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if let Ok(namespace) = std::env::var(ROLE) {
        let kubeconfig = PathBuf::from(std::env::var("KUBECONFIG").unwrap());
        println!("{}", rt.block_on(measure_kubewasm(&kubeconfig, &namespace)));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of benchmarks
    }
    let Some(cp) = ControlPlane::shared() else { return };
    let (ns, wire_json) = rt.block_on(populate(&cp));
    let go_peer = std::env::temp_dir().join("kubewasm-informer-bench-go");
    build_go_peer(&go_peer);
    let exe = std::env::current_exe().unwrap();
    let (mut ours, mut paged, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        ours.push(run_peer(Command::new(&exe).env(ROLE, &ns).env("KUBECONFIG", cp.kubeconfig_path())));
        paged.push(run_peer(
            Command::new(&exe)
                .env(ROLE, &ns)
                .env("KUBECONFIG", cp.kubeconfig_path())
                .env("KUBEWASM_BENCH_LIST", "paginated"),
        ));
        theirs.push(run_peer(
            Command::new(&go_peer).arg("-kubeconfig").arg(cp.kubeconfig_path()).arg("-namespace").arg(&ns),
        ));
    }
    for r in ours.iter().chain(&paged).chain(&theirs) {
        eprintln!("{r}");
    }
    let objects = median(&ours, "objects");
    let (sync, go_sync) = (median(&ours, "sync_seconds"), median(&theirs, "sync_seconds"));
    let (rss, go_rss) = (median(&ours, "rss_synced_bytes"), median(&theirs, "rss_synced_bytes"));
    let cache_per_object = median(&ours, "cache_bytes") / objects;
    let json_per_object = median(&ours, "json_bytes") / objects;
    let go_heap_per_object = median(&theirs, "heap_growth_bytes") / objects;
    let mib = |b: f64| b / 1048576.0;
    println!("informer initial sync, {objects} ConfigMaps, median of {ROUNDS} fresh processes each:");
    println!("| measure | kubewasm | client-go | ratio |");
    println!("|---|---|---|---|");
    println!("| sync time | {sync:.3} s | {go_sync:.3} s | {:.2}x |", sync / go_sync);
    let paged_sync = median(&paged, "sync_seconds");
    println!("| sync time, paginated list (500/page) | {paged_sync:.3} s | | {:.2}x |", paged_sync / go_sync);
    println!("| of which discovery + server version | {:.3} s | | |", median(&ours, "discovery_seconds"));
    println!("| process RSS after sync | {:.1} MiB | {:.1} MiB | {:.2}x |", mib(rss), mib(go_rss), rss / go_rss);
    println!(
        "| cache bytes per object | {cache_per_object:.0} B ({:.2}x its {json_per_object:.0} B of JSON) | {go_heap_per_object:.0} B (live heap growth after GC) | {:.2}x |",
        cache_per_object / json_per_object,
        cache_per_object / go_heap_per_object
    );
    println!(
        "| JSON per object | {json_per_object:.0} B cached (managedFields stripped); {wire_json} B as served | | |"
    );
}
