//! namespace-defaults built in each plugin language, on the same host and in the same run:
//! component size, load time (compile into an empty compile cache + describe), instantiate cost (a fresh
//! instance + a call that does nothing), per-reconcile p50/p99 (fresh instance, settings, two
//! cache reads, two applies) back to back and one every 10 ms (as an event-driven controller's
//! keys come below saturation), the same with `limits.reuseInstances: 100`, and the smallest
//! `limits.memoryBytes` a reconcile succeeds with.
//! Builds missing from `KUBEWASM_PLUGIN_DIR` fail the bench, naming the one missing.
//! `python-source` and `js-source` are namespace-defaults' Python and JavaScript source on the
//! host's engines (`make engines`); their load is measured twice: with the engine compiled in
//! that load, and again with the engine compiled (a new version of a plugin on a running host;
//! the median of ten loads).
//!
//! Run: `make plugins && cargo bench -p kubewasm --bench languages` (default: Rust, Python and
//! JavaScript packaged and as source; `KUBEWASM_BENCH_LANGS=rust,js,go`
//! picks languages; `KUBEWASM_BENCH_KEEP_RESIDENT=<bytes>` sets the host's `--keep-resident`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::core::GroupVersionKind;
use kubewasm_host::plugin::api::testing::{MemoryCache, RecordingWriter};
use kubewasm_host::plugin::limits::Limits;
use kubewasm_host::plugin::{Action, ObjectKey, Plugin, PluginConfig, Runtime, RuntimeConfig, source};
use serde_json::json;

const LANGUAGES: [(&str, &str); 6] = [
    ("rust", "namespace_defaults.wasm"),
    ("python", "namespace_defaults_py.wasm"),
    ("python-source", "python/namespace-defaults/namespace_defaults.py"),
    ("js", "namespace_defaults_js.wasm"),
    ("js-source", "js/namespace-defaults/namespace-defaults.js"),
    ("go", "namespace_defaults_go.wasm"),
];

/// `limits.reuseInstances` for the second set of reconcile figures.
const REUSE: u32 = 100;

/// Between two reconciles of the spaced sample.
const SPACING: Duration = Duration::from_millis(10);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// A cache holding the namespace and its quota (which it controls, so the plugin may write it):
/// a reconcile re-applies both defaults.
fn cache() -> Arc<MemoryCache> {
    let cache = Arc::new(MemoryCache::default());
    cache.insert(&json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "bench", "uid": "0000-1111", "labels": {"team": "a"}}}));
    cache.insert(&json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "default-quota", "namespace": "bench", "ownerReferences": [{"apiVersion": "v1",
            "kind": "Namespace", "name": "bench", "uid": "0000-1111", "controller": true}]},
        "spec": {"hard": {"pods": "50"}}}));
    cache
}

/// The engine a source file (relative to `plugins/`) runs on; `None` for a built component.
fn engine_of(file: &str) -> Option<source::EngineRef> {
    let engine = match file.rsplit_once('.')?.1 {
        "py" => "python@0.3",
        "js" => "js@0.3",
        _ => return None,
    };
    Some(engine.parse().unwrap())
}

/// A built component's bytes, or a source file's (relative to `plugins/`) as a source bundle.
fn plugin_bytes(file: &str) -> Arc<[u8]> {
    if engine_of(file).is_none() {
        return common::plugin_wasm(file);
    }
    let path = file.rsplit('/').next().unwrap_or(file).to_owned();
    let contents = common::plugin_source(file).into_bytes();
    source::bundle(&[source::SourceFile { path, contents }]).into()
}

async fn load(runtime: &Runtime, file: &str, limits: Limits) -> Result<Plugin, String> {
    // Writes go to an in-memory recorder, so no write rate limit: this measures the dispatch,
    // not the token bucket that protects the API server (200 writes/s by default).
    let engine = engine_of(file);
    let config = PluginConfig { limits: limits.with_write_rate(0, 0), engine, ..PluginConfig::approving_requests() };
    let writer = Arc::new(RecordingWriter::default());
    runtime.load("nd", plugin_bytes(file), config, cache(), writer).await.map_err(|e| e.to_string())
}

/// p50 and p99 of `n` runs of `f` after `n / 10` warm-up runs, one every `gap` (a key at a
/// time, as an event-driven controller gets them below saturation), or back to back if zero.
async fn sample<F: AsyncFnMut()>(n: usize, gap: Duration, mut f: F) -> (Duration, Duration) {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        let start = Instant::now();
        f().await;
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// The smallest memory limit (1 MiB steps) under which load and one reconcile succeed.
async fn memory_needed(runtime: &Runtime, file: &str, key: &ObjectKey) -> u64 {
    let (mut low, mut high) = (0u64, 1024u64);
    while high - low > 1 {
        let mid = (low + high) / 2;
        let ok = match load(runtime, file, Limits::default().with_memory_bytes(mid << 20)).await {
            Ok(plugin) => plugin.reconcile(key, 0).await.is_ok(),
            Err(_) => false,
        };
        if ok { high = mid } else { low = mid }
    }
    high
}

/// The host's defaults, or `KUBEWASM_BENCH_KEEP_RESIDENT` bytes of each freed slot kept
/// resident (`kubewasm run --keep-resident`), and with `KUBEWASM_BENCH_NO_SNAPSHOT` set, source
/// plugins imported in every instance rather than restored from their state after import.
fn runtime_config() -> RuntimeConfig {
    let config = RuntimeConfig::default().source_snapshots(std::env::var_os("KUBEWASM_BENCH_NO_SNAPSHOT").is_none());
    match std::env::var("KUBEWASM_BENCH_KEEP_RESIDENT") {
        Ok(bytes) => config.keep_resident(bytes.parse().expect("KUBEWASM_BENCH_KEEP_RESIDENT: bytes")),
        Err(_) => config,
    }
}

fn main() {
    let wanted =
        std::env::var("KUBEWASM_BENCH_LANGS").unwrap_or_else(|_| "rust,python,python-source,js,js-source".into());
    // Two workers, as the host has on this machine.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let key = ObjectKey::new(None, "bench");
        let kind = GroupVersionKind::gvk("", "v1", "Namespace");
        let cache_dir = tempfile::tempdir().unwrap();
        let cached = Runtime::new(runtime_config().cache_dir(cache_dir.path())).unwrap();
        println!(
            "{:<7} {:>9} {:>11} {:>13} {:>13} {:>13} {:>8}",
            "lang", "size", "load", "instantiate", "reconcile p50", "reconcile p99", "memory"
        );
        for (lang, file) in LANGUAGES.iter().filter(|(l, _)| wanted.split(',').any(|w| w == *l)) {
            let size = plugin_bytes(file).len();
            // A runtime with an empty compile cache, as deployed: load = compile + instantiate +
            // describe, the compiled component mapped from its file; with
            // `KUBEWASM_BENCH_IN_MEMORY`, no cache: the component compiled stays in memory.
            let own_cache = tempfile::tempdir().unwrap();
            let fresh = match std::env::var_os("KUBEWASM_BENCH_IN_MEMORY") {
                Some(_) => Runtime::new(runtime_config()).unwrap(),
                None => Runtime::new(runtime_config().cache_dir(own_cache.path())).unwrap(),
            };
            let limits = Limits::default().with_memory_bytes(256 << 20);
            let start = Instant::now();
            let plugin = load(&fresh, file, limits.clone()).await.unwrap_or_else(|e| panic!("{lang}: {e}"));
            let load_time = start.elapsed();
            if engine_of(file).is_some() {
                let mut loads = Vec::new();
                for _ in 0..10 {
                    let start = Instant::now();
                    load(&fresh, file, limits.clone()).await.unwrap();
                    loads.push(start.elapsed());
                }
                loads.sort();
                let (median, max) = (loads[loads.len() / 2], loads[loads.len() - 1]);
                println!("{lang}: load with the engine compiled: median {} max {}", ms(median), ms(max));
            }
            assert_eq!(plugin.reconcile(&key, 0).await.unwrap(), Action::Done, "{lang} reconciles");
            let n = if *lang == "rust" { 5_000 } else { 500 };
            let (inst, _) = sample(n, Duration::ZERO, async || {
                plugin.map(&kind, b"{}").await.unwrap();
            })
            .await;
            let (p50, p99) = sample(n, Duration::ZERO, async || {
                plugin.reconcile(&key, 0).await.unwrap();
            })
            .await;
            let (spaced_p50, spaced_p99) = sample(250, SPACING, async || {
                plugin.reconcile(&key, 0).await.unwrap();
            })
            .await;
            let memory = memory_needed(&cached, file, &key).await;
            let reusing = load(&fresh, file, limits.clone().with_reuse_instances(REUSE)).await.unwrap();
            let (reuse_p50, reuse_p99) = sample(n, Duration::ZERO, async || {
                reusing.reconcile(&key, 0).await.unwrap();
            })
            .await;
            println!(
                "{lang:<7} {:>9.4} MB {:>11} {:>13} {:>13} {:>13} {:>5} MiB   one every {SPACING:?}: p50 {} p99 {}   reuse {REUSE}: p50 {} p99 {}",
                size as f64 / 1e6,
                ms(load_time),
                ms(inst),
                ms(p50),
                ms(p99),
                memory,
                ms(spaced_p50),
                ms(spaced_p99),
                ms(reuse_p50),
                ms(reuse_p99)
            );
        }
    });
}
