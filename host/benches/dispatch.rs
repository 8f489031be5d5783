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
use kubewasm::plugin::host::CacheReader;
use kubewasm::plugin::host::testing::{MemoryCache, RecordingWriter};
use kubewasm::plugin::{Action, ObjectKey, PluginConfig, Runtime, RuntimeConfig};
use serde_json::{Value, json};

const WARMUP: usize = 2_000;
const ITERATIONS: usize = 20_000;

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
    let bytes = cache.get(kind, key.namespace.as_deref(), &key.name).map_err(|e| e.to_string())?;
    let object: Value = serde_json::from_slice(&bytes.ok_or("not found")?).map_err(|e| e.to_string())?;
    if object.pointer("/data").is_none() {
        return Err("object has no data".into());
    }
    Ok(Action::Done)
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
        let key = ObjectKey { namespace: Some("default".into()), name: "bench".into() };
        let kind = GroupVersionKind::gvk("", "v1", "ConfigMap");

        println!("object size: {size} bytes; {ITERATIONS} iterations after {WARMUP} warm-up");
        let mut wasm_figures = Vec::new();
        for keep_resident in [0, 64 << 10, 1 << 20] {
            let runtime = Runtime::new(RuntimeConfig::default().keep_resident(keep_resident)).unwrap();
            let wasm_bytes = common::plugin_wasm("fixture_getter.wasm");
            let writer = Arc::new(RecordingWriter::default());
            let plugin =
                runtime.load("getter", wasm_bytes, PluginConfig::default(), cache.clone(), writer).await.unwrap();
            let mut wasm = Vec::with_capacity(ITERATIONS);
            for i in 0..WARMUP + ITERATIONS {
                let start = Instant::now();
                let action = plugin.reconcile(&key, 0).await.unwrap();
                let took = start.elapsed();
                assert_eq!(action, Action::Done);
                if i >= WARMUP {
                    wasm.push(took);
                }
            }
            wasm_figures.push((keep_resident, wasm));
        }
        let mut native = Vec::with_capacity(ITERATIONS);
        for i in 0..WARMUP + ITERATIONS {
            let start = Instant::now();
            let action = std::hint::black_box(native_reconcile(&cache, &kind, &key)).unwrap();
            let took = start.elapsed();
            assert_eq!(action, Action::Done);
            if i >= WARMUP {
                native.push(took);
            }
        }
        let (native_p50, native_p99) = report("native Rust: cache.get + parse", native);
        for (keep_resident, wasm) in wasm_figures {
            let label = format!("wasm, fresh instance, keep_resident {} KiB", keep_resident >> 10);
            let (wasm_p50, wasm_p99) = report(&label, wasm);
            println!(
                "    ratio wasm/native: p50 {:.1}x, p99 {:.1}x",
                wasm_p50.as_secs_f64() / native_p50.as_secs_f64(),
                wasm_p99.as_secs_f64() / native_p99.as_secs_f64()
            );
        }
    });
}
