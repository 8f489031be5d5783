//! The Go SDK's hand-written Canonical ABI, and the Go build of namespace-defaults where Go's
//! runtime once broke it: heap growth. Go's wasm allocator takes every page above its data,
//! including pages the WASI adapter grew for its own state, so the first reconcile that grew
//! the heap trapped in the adapter (`clock_time_get` → `assert_fail`, plugins/README.md). The
//! ABI tests run plugins/go/contract-calls, which makes every 0.3 host call with values the
//! tests recognise: the component's type check proves the signatures, these the layouts in
//! memory. No API server: an in-memory cache and a recording writer.

use crate::common;

use std::sync::Arc;

use std::time::Duration;

use kube::core::GroupVersionKind;
use kubewasm_host::plugin::api::testing::{MemoryCache, RecordingWriter};
use kubewasm_host::plugin::api::{ApiCall, Patch, Propagation};
use kubewasm_host::plugin::grants::GrantConfig;
use kubewasm_host::plugin::limits::Limits;
use kubewasm_host::plugin::{Action, CallFailed, ObjectKey, Plugin, PluginConfig, Runtime, RuntimeConfig};
use serde_json::json;

const GO: &str = "namespace_defaults_go.wasm";
const CONTRACT_CALLS: &str = "contract_calls_go.wasm";

/// contract-calls over a cache of ConfigMaps a, b, c and calls in namespace ns (b labelled
/// app=web), with a grant to write ConfigMaps.
async fn contract_calls() -> (Plugin, Arc<RecordingWriter>) {
    contract_calls_over(&[]).await
}

/// [`contract_calls`] with ConfigMaps `more` in namespace ns besides.
async fn contract_calls_over(more: &[&str]) -> (Plugin, Arc<RecordingWriter>) {
    let runtime = Runtime::new(RuntimeConfig::default().cache_dir(common::test_compile_cache())).unwrap();
    let cache = Arc::new(MemoryCache::default());
    let objects = [("a", json!({})), ("b", json!({"app": "web"})), ("c", json!({})), ("calls", json!({}))];
    for (name, labels) in objects.into_iter().chain(more.iter().map(|name| (*name, json!({})))) {
        cache.insert(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "7",
                         "labels": labels}}));
    }
    let writer = Arc::new(RecordingWriter::serving(cache.clone()));
    let config = PluginConfig {
        grants: serde_yaml::from_str::<GrantConfig>("write: [ConfigMap]").unwrap().plus_requests(),
        ..PluginConfig::approving_requests()
    };
    let plugin = runtime
        .load("contract-calls", common::plugin_wasm(CONTRACT_CALLS), config, cache, writer.clone())
        .await
        .unwrap();
    (plugin, writer)
}

#[tokio::test]
async fn the_go_sdk_lowers_event_filters_and_the_rest_of_the_registration() {
    let (plugin, _) = contract_calls().await;
    let r = plugin.registration();
    assert_eq!(r.for_kind.kind, "ConfigMap");
    assert_eq!(r.for_filter.namespace.as_deref(), Some("ns"));
    assert_eq!(r.for_filter.label_selector.as_deref(), Some("app=web"));
    let p = &r.for_filter.predicates;
    assert!(p.generation_changed && !p.labels_changed && !p.annotations_changed, "{p:?}");
    assert_eq!(
        r.owns.iter().map(|k| (k.group.as_str(), k.kind.as_str())).collect::<Vec<_>>(),
        [("apps", "Deployment")]
    );
    let p = &r.owns_filters[0].predicates;
    assert!(!p.generation_changed && p.labels_changed && !p.annotations_changed, "{p:?}");
    assert_eq!(r.owns_prune, [Some(Propagation::Foreground)], "the owned kind's prune byte");
    assert_eq!(r.watches.len(), 1);
    assert_eq!(r.watches[0].kind.kind, "Service");
    assert_eq!(r.watches[0].filter.namespace.as_deref(), Some("w"));
    assert!(r.watches[0].filter.predicates.annotations_changed);
    assert_eq!(r.writes.iter().map(|k| k.kind.as_str()).collect::<Vec<_>>(), ["ConfigMap"]);
    assert_eq!(r.max_concurrent, Some(3));
}

#[tokio::test]
async fn go_reconcile_errors_say_terminal_requeue_after_and_periodic_requeue_and_a_panic_names_its_line() {
    let (plugin, _) = contract_calls().await;
    let reconcile = async |name: &str| plugin.reconcile(&ObjectKey::new(Some("ns"), name), 0).await;
    match reconcile("terminal").await {
        Err(CallFailed::Terminal(m)) => assert_eq!(m, "spec is invalid"),
        other => panic!("{other:?}"),
    }
    match reconcile("requeue").await {
        Err(CallFailed::RequeueAfter { after, reason }) => {
            assert_eq!((after, reason.as_str()), (Duration::from_millis(1500), "waiting for Secret db"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(reconcile("periodic").await.unwrap(), Action::RequeueAfter(Duration::from_secs(2)));
    match reconcile("panic").await {
        Err(CallFailed::Plugin(m)) => {
            assert!(m.starts_with("panic: assignment to entry in nil map at main.go:"), "{m}");
            assert!(m.ends_with(" in main.contractCalls.Reconcile"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    match reconcile("unknown").await {
        Err(CallFailed::Plugin(m)) => assert_eq!(m, "unknown key unknown"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_go_desired_state_lowers_its_children_status_and_action() {
    let (plugin, writer) = contract_calls_over(&["desired"]).await;
    let action = plugin.reconcile(&ObjectKey::new(Some("ns"), "desired"), 0).await.unwrap();
    assert_eq!(action, Action::RequeueAfter(Duration::from_secs(3)));
    let calls = writer.calls();
    let applied: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            ApiCall::Apply { object, force: true } => Some(object.target.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(applied, ["d1", "d2"], "{calls:?}");
    let status = calls.iter().find_map(|c| match c {
        ApiCall::ApplyStatus { object, force: true } => Some(object.body["status"].clone()),
        _ => None,
    });
    assert_eq!(status, Some(json!({"seen": true})), "{calls:?}");
}

#[tokio::test]
async fn go_lists_page_and_writes_carry_preconditions_propagation_and_status() {
    let (plugin, writer) = contract_calls().await;
    plugin.reconcile(&ObjectKey::new(Some("ns"), "calls"), 0).await.unwrap();
    let calls = writer.calls();
    assert_eq!(calls.len(), 4, "{calls:#?}");
    let ApiCall::Patch { target, patch: Patch::Merge(body), options } = &calls[0] else { panic!("{:?}", calls[0]) };
    assert_eq!((target.namespace.as_deref(), target.name.as_str()), (Some("ns"), "calls"));
    assert_eq!(
        body["data"],
        json!({"page1": "a,b", "page2": "c,calls", "lastPage": "true", "byField": "b",
        "iterated": "a,b,c,calls", "uncached": "uid-calls"})
    );
    assert!(!options.status);
    assert_eq!(options.preconditions.resource_version.as_deref(), Some("7"));
    assert_eq!(options.preconditions.uid.as_deref(), Some("uid-calls"));
    let ApiCall::Patch { patch: Patch::Json(ops), options, .. } = &calls[1] else { panic!("{:?}", calls[1]) };
    assert!(options.status && options.preconditions.is_empty(), "{options:?}");
    assert_eq!(ops[0]["path"], "/status");
    let ApiCall::Delete { target, options } = &calls[2] else { panic!("{:?}", calls[2]) };
    assert_eq!(target.name, "gone");
    assert_eq!(options.propagation, Propagation::Foreground);
    assert_eq!(
        (options.preconditions.uid.as_deref(), options.preconditions.resource_version.as_deref()),
        (Some("uid-gone"), None)
    );
    let ApiCall::ApplyStatus { object, force } = &calls[3] else { panic!("{:?}", calls[3]) };
    assert!(!force);
    assert_eq!(object.body["status"], json!({"ok": true}));
}

#[tokio::test]
async fn a_go_map_returns_keys_or_an_error_that_keeps_its_case() {
    let (plugin, _) = contract_calls().await;
    let service = GroupVersionKind::gvk("", "v1", "Service");
    let keys = plugin.map(&service, br#"{"metadata":{"name":"web","namespace":"w"}}"#).await.unwrap();
    let keys: Vec<_> = keys.into_iter().map(Result::unwrap).collect();
    assert_eq!(keys, [ObjectKey::new(Some("ns"), "web")]);
    match plugin.map(&service, br#"{"metadata":{"name":"fail","namespace":"w"}}"#).await {
        Err(CallFailed::Plugin(m)) => assert!(m.ends_with("forbidden: no grant for Service fail"), "{m}"),
        other => panic!("{other:?}"),
    }
}

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
    let config = PluginConfig { limits, ..PluginConfig::approving_requests() };
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
