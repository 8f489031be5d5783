//! The Go build of namespace-defaults where Go's runtime once broke it: heap growth. Go's wasm
//! allocator takes every page above its data, including pages the WASI adapter grew for its
//! own state, so the first reconcile that grew the heap trapped in the adapter
//! (`clock_time_get` → `assert_fail`, plugins/README.md). No API server: an in-memory cache
//! and a recording writer.

use crate::common;

use std::sync::Arc;

use kubewasm::plugin::host::ApiCall;
use kubewasm::plugin::host::testing::{MemoryCache, RecordingWriter};
use kubewasm::plugin::limits::Limits;
use kubewasm::plugin::{Action, ObjectKey, PluginConfig, Runtime, RuntimeConfig};
use serde_json::json;

const GO: &str = "namespace_defaults_go.wasm";

/// Annotations on the test namespace: 64 values of 16 KiB, 1 MiB of JSON the plugin decodes on
/// every reconcile (several MiB of Go heap each time, counting the copies).
fn large_annotations() -> serde_json::Value {
    let value = "x".repeat(16 << 10);
    (0..64).map(|i| (format!("example.com/note-{i}"), json!(value))).collect::<serde_json::Map<_, _>>().into()
}

#[tokio::test]
async fn the_go_build_reconciles_large_objects_many_times_in_one_instance_through_heap_growth_and_gc() {
    let runtime = Runtime::new(RuntimeConfig::default().cache_dir(common::test_compile_cache())).unwrap();
    let cache = Arc::new(MemoryCache::default());
    let writer = Arc::new(RecordingWriter::default());
    // One instance serves every call, so Go's heap only grows or is collected, never reset.
    let reconciles = 100;
    let limits = Limits::default().with_reuse_instances(reconciles);
    let config = PluginConfig { limits, ..Default::default() };
    let plugin = runtime
        .load("namespace-defaults", common::plugin_wasm(GO), config, cache.clone(), writer.clone())
        .await
        .unwrap();
    cache.insert(&json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "big", "uid": "uid-big", "annotations": large_annotations()}}));
    let key = ObjectKey::new(None, "big");

    // ≥ 2 MiB of heap per reconcile (the copy out of the receive arena, the decoded strings),
    // 100 times, is far more than the 64 MiB memory limit: the instance only lasts if Go's heap
    // grows and its garbage collector runs, with the adapter's state intact through both.
    for i in 0..reconciles {
        let action = plugin.reconcile(&key, 0).await.unwrap_or_else(|e| panic!("reconcile {i} failed: {e:#}"));
        assert_eq!(action, Action::Done);
    }
    let calls = writer.calls();
    let applies = calls.iter().filter(|c| matches!(c, ApiCall::Apply { .. })).count();
    assert_eq!(applies, 2 * reconciles as usize, "a quota and a policy per reconcile");
    let ApiCall::Apply { object, .. } = &calls[calls.len() - 2] else { panic!("{:?}", calls[calls.len() - 2]) };
    assert_eq!(object.body["metadata"]["ownerReferences"][0]["uid"], "uid-big", "the last apply is intact");
}
