//! Per-reconcile overhead: a fresh plugin instance + `reconcile` + one cache get of a 2 KiB
//! object, against a native Rust function doing the same work (same cache, same JSON parse),
//! in the same run. Prints p50/p99 of each and the ratio.
//!
//! Run: `make bench` (or `cargo bench -p kubewasm --bench dispatch` after `make plugins`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::core::GroupVersionKind;
use kubewasm_host::plugin::api::CacheReader;
use kubewasm_host::plugin::api::testing::{MemoryCache, RecordingWriter};
use kubewasm_host::plugin::{Action, ObjectKey, PluginConfig, Runtime, RuntimeConfig};
use serde_json::{Value, json};

const WARMUP: usize = 2_000;
const ROUNDS: usize = 20;
const PER_ROUND: usize = 1_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
    println!("{name:<44} p50 {:>9.2} µs   p99 {:>9.2} µs", p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6);
    (p50, p99)
}

/// The native twin of the `getter` fixture's reconcile.
fn native_reconcile(cache: &MemoryCache, kind: &GroupVersionKind, key: &ObjectKey) -> Result<Action, String> {
    let bytes = cache.get(kind, key.namespace(), key.name()).map_err(|e| e.to_string())?;
    let object: Value = serde_json::from_slice(&bytes.ok_or("not found")?).map_err(|e| e.to_string())?;
    if object.pointer("/data").is_none() {
        return Err("object has no data".into());
    }
    Ok(Action::Done)
}

/// One configuration under test.
struct Variant {
    label: String,
    config: RuntimeConfig,
    module: Arc<[u8]>,
}

/// Variants to compare, from `DISPATCH_VARIANTS`, e.g. `"low:64,scan:256:/tmp/g.wasm"`: KiB kept
/// resident per freed slot, found by pagemap scan (`scan`) or taken from the lowest addresses
/// (`low`), and optionally another build of the getter module. By default: the shipped setting
/// beside the previous one.
fn variants() -> Vec<Variant> {
    let spec = std::env::var("DISPATCH_VARIANTS").unwrap_or_else(|_| "low:64,scan:256".into());
    spec.split(',')
        .map(|v| {
            let mut parts = v.splitn(3, ':');
            let mode = parts.next().unwrap_or_default();
            let kib: usize = parts.next().and_then(|k| k.parse().ok()).expect("a variant is mode:KiB[:module]");
            let (module, from) = match parts.next() {
                Some(path) => (std::fs::read(path).expect("read module").into(), format!(", {path}")),
                None => (common::plugin_wasm("fixture_getter.wasm"), String::new()),
            };
            let scan = if mode == "scan" { "pagemap scan" } else { "lowest bytes" };
            Variant {
                label: format!("wasm, keep {kib} KiB, {scan}{from}"),
                config: RuntimeConfig::default().keep_resident(kib << 10).pagemap_scan(mode == "scan"),
                module,
            }
        })
        .collect()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let cache = Arc::new(MemoryCache::default());
        let filler = "x".repeat(1900);
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bench", "namespace": "default", "uid": "0000-1111"},
            "data": {"payload": filler}});
        let size = object.to_string().len();
        cache.insert(&object);
        let key = ObjectKey::new(Some("default"), "bench");
        let kind = GroupVersionKind::gvk("", "v1", "ConfigMap");

        let variants = variants();
        let mut plugins = Vec::new();
        for variant in &variants {
            let runtime = Runtime::new(variant.config.clone()).unwrap();
            let writer = Arc::new(RecordingWriter::default());
            let plugin = runtime
                .load("getter", variant.module.clone(), PluginConfig::approving_requests(), cache.clone(), writer)
                .await
                .unwrap();
            for _ in 0..WARMUP {
                assert_eq!(plugin.reconcile(&key, 0).await.unwrap(), Action::Done);
            }
            plugins.push(plugin);
        }
        for _ in 0..WARMUP {
            assert_eq!(std::hint::black_box(native_reconcile(&cache, &kind, &key)).unwrap(), Action::Done);
        }
        println!("object size: {size} bytes; {ROUNDS} rounds of {PER_ROUND} iterations per variant, interleaved");

        // Round-robin, so that drift in the machine's speed touches every variant alike.
        let mut native = Vec::with_capacity(ROUNDS * PER_ROUND);
        let mut wasm = vec![Vec::with_capacity(ROUNDS * PER_ROUND); plugins.len()];
        for _ in 0..ROUNDS {
            for _ in 0..PER_ROUND {
                let start = Instant::now();
                let action = std::hint::black_box(native_reconcile(&cache, &kind, &key)).unwrap();
                native.push(start.elapsed());
                assert_eq!(action, Action::Done);
            }
            for (plugin, samples) in plugins.iter().zip(&mut wasm) {
                for _ in 0..PER_ROUND {
                    let start = Instant::now();
                    let action = plugin.reconcile(&key, 0).await.unwrap();
                    samples.push(start.elapsed());
                    assert_eq!(action, Action::Done);
                }
            }
        }
        let (native_p50, native_p99) = report("native Rust: cache.get + parse", native);
        for (variant, samples) in variants.iter().zip(wasm) {
            let (wasm_p50, wasm_p99) = report(&variant.label, samples);
            println!(
                "    ratio wasm/native: p50 {:.1}x, p99 {:.1}x",
                wasm_p50.as_secs_f64() / native_p50.as_secs_f64(),
                wasm_p99.as_secs_f64() / native_p99.as_secs_f64()
            );
        }
    });
}
