//! Swap latency: from a new plugin version being read to it serving (load, describe, wiring
//! beside the old version, swap), for a ~1 MiB component, with and without the compile cache,
//! against the real control plane. Run with `make bench-hotload`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm_host::controller::{self, ControllerMetrics};
use kubewasm_host::hotload::{Applied, Desired, HotloadMetrics, LoadedPlugins, Module, Options, Origin};
use kubewasm_host::informer::SharedInformerFactory;
use kubewasm_host::plugin::{PluginConfig, Runtime, RuntimeConfig};
use kubewasm_host::queue::QueueMetrics;
use kubewasm_host::writer::KubeWriter;
use kubewasm_testenv::ControlPlane;
use prometheus::Registry;

const SWAPS: usize = 30;

fn component() -> (String, Arc<[u8]>) {
    let target =
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").into());
    let path = std::env::var("KUBEWASM_BENCH_COMPONENT")
        .unwrap_or_else(|_| format!("{target}/wasm32-wasip2/plugin-unoptimized/fixture_stamper.wasm"));
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}; build it with `make bench-hotload` (profile plugin-unoptimized)"));
    (path, bytes.into())
}

fn plugins(client: kube::Client, runtime: Runtime) -> LoadedPlugins {
    let registry = Registry::new();
    let ctx = controller::Context {
        factory: SharedInformerFactory::new(client.clone(), &registry).unwrap(),
        client: client.clone(),
        metrics: ControllerMetrics::register(&registry).unwrap(),
        queue_metrics: QueueMetrics::register(&registry).unwrap(),
        readiness: Default::default(),
        max_retries: None,
        leader: Default::default(),
        shard: Default::default(),
        breaker: kubewasm_host::breaker::Breaker::kube(client.clone(), Default::default(), None),
    };
    LoadedPlugins::new(ctx, runtime, Arc::new(KubeWriter::new(client)), Options::default(), HotloadMetrics::default())
}

fn config(version: usize, selector: &str) -> PluginConfig {
    let yaml = format!(
        "grants: {{read: [ConfigMap], write: [ConfigMap]}}\nsettings:\n  version: v{version}\n  selector: \"{selector}\"\n"
    );
    PluginConfig::from_yaml(&yaml).unwrap()
}

async fn measure(label: &str, plugins: &LoadedPlugins, wasm: &Arc<[u8]>, selector: &str) -> Vec<Duration> {
    // Hashed in the timed part, as the directory source hashes a file it reads before the swap.
    let desired = |i| Desired {
        name: label.into(),
        origin: Origin::Directory,
        wasm: Module::hash_blocking(wasm.clone()),
        config: config(i, selector),
    };
    assert_eq!(plugins.apply(desired(0)).await.unwrap(), Applied::Loaded);
    let mut took = Vec::with_capacity(SWAPS);
    for i in 1..=SWAPS {
        let started = Instant::now();
        assert_eq!(plugins.apply(desired(i)).await.unwrap(), Applied::Swapped);
        took.push(started.elapsed());
    }
    took.sort();
    took
}

fn report(label: &str, took: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label:<28} swaps={:<3} p50={:>8.1} ms  p90={:>8.1} ms  max={:>8.1} ms",
        took.len(),
        ms(p(0.5)),
        ms(p(0.9)),
        ms(*took.last().unwrap())
    );
}

fn main() {
    let cp = ControlPlane::shared().expect("the hot-load benchmark needs the control plane: `make control-plane`");
    let (path, wasm) = component();
    println!("component: {path} ({} bytes)", wasm.len());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = cp.admin_client().await;
        let selector = "kubewasm.bench/hotload=none";
        let cold = plugins(client.clone(), Runtime::new(RuntimeConfig::default()).unwrap());
        report("no compile cache", &measure("bench-cold", &cold, &wasm, selector).await);
        let dir = tempfile::tempdir().unwrap();
        let cached = plugins(client.clone(), Runtime::new(RuntimeConfig::default().cache_dir(dir.path())).unwrap());
        report("with compile cache", &measure("bench-cached", &cached, &wasm, selector).await);
        cold.shut_down(Duration::from_secs(5)).await;
        cached.shut_down(Duration::from_secs(5)).await;
    });
}
