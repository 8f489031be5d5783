//! The plugin runtime against real components: limits, traps, grants, bad modules, the compile
//! cache, and namespace-defaults' output. No API server: an in-memory cache and a recording
//! writer stand behind the host functions.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::core::GroupVersionKind;
use kubewasm_host::plugin::api::ApiCall;
use kubewasm_host::plugin::api::testing::{MemoryCache, RecordingWriter};
use kubewasm_host::plugin::api::{CallError, EventRecord, ObjectRef};
use kubewasm_host::plugin::grants::GrantConfig;
use kubewasm_host::plugin::limits::{LimitHit, Limits};
use kubewasm_host::plugin::protected::Protected;
use kubewasm_host::plugin::{Action, CallFailed, LoadError, ObjectKey, Plugin, PluginConfig, Runtime, RuntimeConfig};
use serde_json::json;

use common::plugin_wasm;

struct Harness {
    runtime: Runtime,
    cache: Arc<MemoryCache>,
    writer: Arc<RecordingWriter>,
}

impl Harness {
    fn new() -> Self {
        Self::with_runtime(Runtime::new(RuntimeConfig::default().cache_dir(common::test_compile_cache())).unwrap())
    }

    fn with_runtime(runtime: Runtime) -> Self {
        // The cache doubles as the cluster the writer's uncached reads see.
        let cache = Arc::new(MemoryCache::default());
        let writer = Arc::new(RecordingWriter::serving(cache.clone()));
        Self { runtime, cache, writer }
    }

    async fn load(&self, name: &str, file: &str, config: PluginConfig) -> Result<Plugin, LoadError> {
        self.runtime.load(name, plugin_wasm(file), config, self.cache.clone(), self.writer.clone()).await
    }
}

fn key(ns: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey::new(ns, name)
}

fn limits(f: impl FnOnce(Limits) -> Limits) -> PluginConfig {
    PluginConfig { limits: f(Limits::default()), ..PluginConfig::approving_requests() }
}

fn namespace(name: &str, uid: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": uid, "labels": labels}})
}

#[tokio::test(flavor = "current_thread")]
async fn a_looping_plugin_times_out_at_its_deadline_while_other_plugins_keep_reconciling() {
    let h = Harness::new();
    let deadline = Duration::from_secs(2);
    let looper =
        Arc::new(h.load("looper", "fixture_looper.wasm", limits(|l| l.with_deadline(deadline))).await.unwrap());
    let healthy =
        h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    h.cache.insert(&namespace("team-a", "uid-a", json!({})));

    let started = Instant::now();
    let looping = tokio::spawn({
        let looper = looper.clone();
        async move { looper.reconcile(&key(Some("default"), "cm"), 0).await }
    });
    tokio::task::yield_now().await;
    // One runtime thread: this reconcile can only finish if the looping one yields it.
    assert_eq!(healthy.reconcile(&key(None, "team-a"), 0).await.unwrap(), Action::Done);
    assert!(!looping.is_finished(), "the healthy reconcile finished while the loop was still running");

    let err = looping.await.unwrap().unwrap_err();
    assert!(matches!(err, CallFailed::Limit(LimitHit::Deadline(d)) if d == deadline), "{err:?}");
    assert_eq!(err.metric_label(), "timeout");
    assert!(started.elapsed() < deadline + Duration::from_secs(1), "stopped after {:?}", started.elapsed());
    // The host keeps serving the same plugin: the next call gets a fresh instance (and times out again).
    assert!(matches!(
        looper.reconcile(&key(Some("default"), "cm"), 1).await,
        Err(CallFailed::Limit(LimitHit::Deadline(_)))
    ));
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_at_its_cap_with_a_clear_error() {
    let h = Harness::new();
    let cap = 16 << 20;
    let bomb = h.load("bomb", "fixture_memory_bomb.wasm", limits(|l| l.with_memory_bytes(cap))).await.unwrap();
    let err = bomb.reconcile(&key(Some("default"), "cm"), 0).await.unwrap_err();
    match &err {
        CallFailed::Limit(LimitHit::Memory { requested, limit }) => {
            assert_eq!(*limit, cap);
            assert!(*requested as u64 > cap);
        }
        other => panic!("expected the memory limit, got {other:?}"),
    }
    assert!(err.to_string().starts_with("memory limit: the plugin asked for"), "{err}");
    assert_eq!(err.metric_label(), "memory");
}

#[tokio::test]
async fn a_panicking_plugin_becomes_a_trap_error_and_the_next_call_works() {
    let h = Harness::new();
    let config = PluginConfig { settings: Some(json!({"panicIn": "map"})), ..PluginConfig::approving_requests() };
    let trapper = h.load("trapper", "fixture_trapper.wasm", config).await.unwrap();
    let cm = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let err = trapper.map(&cm, b"{}").await.unwrap_err();
    assert!(matches!(&err, CallFailed::Trap(m) if m.contains("unreachable")), "{err:?}");
    assert!(err.is_panic());
    assert_eq!(trapper.reconcile(&key(Some("default"), "cm"), 0).await.unwrap(), Action::Done);

    let trapper = h.load("trapper", "fixture_trapper.wasm", PluginConfig::approving_requests()).await.unwrap();
    let err = trapper.reconcile(&key(Some("default"), "cm"), 0).await.unwrap_err();
    assert!(matches!(err, CallFailed::Trap(_)), "{err:?}");
    // The panic's message and location, not a dump of `<wasm function N>` frames nor advice a
    // sandboxed guest cannot follow.
    let message = err.to_string();
    assert!(
        message.contains("panicked at plugins/fixtures/trapper/src/lib.rs:")
            && message.contains(": trapper: panic while reconciling cm"),
        "{message}"
    );
    assert!(!message.contains("<wasm function") && !message.contains("RUST_BACKTRACE"), "{message}");
}

#[tokio::test]
async fn a_trap_in_describe_rejects_the_plugin_at_load() {
    let h = Harness::new();
    let config = PluginConfig { settings: Some(json!({"panicIn": "describe"})), ..PluginConfig::approving_requests() };
    let err = h.load("trapper", "fixture_trapper.wasm", config).await.unwrap_err();
    assert!(matches!(err, LoadError::Describe(CallFailed::Trap(_))), "{err:?}");
    assert_eq!(err.metric_label(), "describe");
}

#[tokio::test]
async fn calls_outside_the_grants_return_forbidden_to_the_plugin_and_only_an_access_denied_event_is_written() {
    let h = Harness::new();
    let plugin = h.load("forbidden", "fixture_forbidden.wasm", PluginConfig::approving_requests()).await.unwrap();
    let err = plugin.reconcile(&key(Some("default"), "cm"), 0).await.unwrap_err();
    let CallFailed::Plugin(seen) = err else { panic!("expected the plugin's own error, got {err:?}") };
    let (read, write) = seen.split_once(" | ").unwrap();
    assert!(read.starts_with("read: Err(Forbidden(\"plugin `forbidden` may not read Secret"), "{read}");
    assert!(write.starts_with("write: Err(Forbidden(\"plugin `forbidden` may not apply Deployment.apps"), "{write}");
    // Nothing was written; the refusals are reported once, as a Warning event on the object.
    let calls = h.writer.calls();
    assert_eq!(calls.len(), 1, "a forbidden write reached the writer: {calls:?}");
    let ApiCall::Event(event) = &calls[0] else { panic!("expected only the AccessDenied event: {calls:?}") };
    assert!(event.warning);
    assert_eq!(event.reason, "AccessDenied");
    let expected = ObjectRef {
        kind: GroupVersionKind::gvk("", "v1", "ConfigMap"),
        namespace: Some("default".into()),
        name: "cm".into(),
    };
    assert_eq!(event.regarding, expected);
    assert!(
        event.note.contains("may not read Secret") && event.note.contains("may not apply Deployment.apps"),
        "{}",
        event.note
    );
}

#[tokio::test]
async fn a_component_of_another_world_is_rejected_naming_the_world_and_what_is_missing() {
    let h = Harness::new();
    let err = h.load("command", "fixture-wrong-world.wasm", PluginConfig::approving_requests()).await.unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("kubewasm:controller/controller@0.1.0"), "{message}");
    assert!(message.contains("describe"), "the message should name the missing export: {message}");
}

#[tokio::test]
async fn garbage_bytes_and_core_modules_are_rejected_with_what_they_are() {
    let h = Harness::new();
    let load = |bytes: &'static [u8]| {
        h.runtime.load("bad", Arc::from(bytes), PluginConfig::approving_requests(), h.cache.clone(), h.writer.clone())
    };
    let garbage = load(b"#!/bin/sh\necho not wasm\n").await.unwrap_err();
    assert!(matches!(garbage, LoadError::NotWasm), "{garbage:?}");
    let core = load(b"\0asm\x01\0\0\0").await.unwrap_err();
    assert!(matches!(core, LoadError::CoreModule), "{core:?}");
    assert!(core.to_string().contains("not a component"));
    let truncated = load(b"\0asm\x0d\0\x01\0\x01\x02").await.unwrap_err();
    assert!(matches!(truncated, LoadError::Compile(_)), "{truncated:?}");
}

#[tokio::test]
async fn namespace_defaults_applies_exactly_a_quota_and_a_default_deny_policy_owned_by_the_namespace() {
    let h = Harness::new();
    let plugin =
        h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    h.cache.insert(&namespace("team-a", "uid-a", json!({"team": "a"})));
    assert_eq!(plugin.reconcile(&key(None, "team-a"), 0).await.unwrap(), Action::Done);

    let owner = json!([{"apiVersion": "v1", "kind": "Namespace", "name": "team-a", "uid": "uid-a",
                        "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"app.kubernetes.io/managed-by": "kubewasm-namespace-defaults"});
    let calls = h.writer.calls();
    assert_eq!(calls.len(), 3, "{calls:#?}");
    let ApiCall::Apply { object: quota, force: false } = &calls[0] else { panic!("{:?}", calls[0]) };
    assert_eq!(h.writer.callers()[0].manager, "kubewasm/namespace-defaults");
    assert_eq!(
        quota.body,
        json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "default-quota", "namespace": "team-a", "labels": labels, "ownerReferences": owner},
            "spec": {"hard": {"pods": "50", "requests.cpu": "4", "requests.memory": "8Gi"}},
        })
    );
    let ApiCall::Apply { object: policy, .. } = &calls[1] else { panic!("{:?}", calls[1]) };
    assert_eq!(
        policy.body,
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny", "namespace": "team-a", "labels": labels, "ownerReferences": owner},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        })
    );
    let ApiCall::Event(EventRecord { regarding, warning: false, reason, .. }) = &calls[2] else {
        panic!("{:?}", calls[2])
    };
    assert_eq!(reason, "DefaultsApplied");
    assert_eq!(
        regarding,
        &ObjectRef { kind: GroupVersionKind::gvk("", "v1", "Namespace"), namespace: None, name: "team-a".into() }
    );
}

#[tokio::test]
async fn namespace_defaults_takes_quota_and_opt_out_label_from_its_settings() {
    let h = Harness::new();
    let settings = json!({"optOutLabel": "skip-me", "quota": {"pods": "3"}, "quotaName": "small"});
    let config = PluginConfig { settings: Some(settings), ..PluginConfig::approving_requests() };
    let plugin = h.load("namespace-defaults", "namespace_defaults.wasm", config).await.unwrap();
    h.cache.insert(&namespace("a", "uid-a", json!({})));
    h.cache.insert(&namespace("b", "uid-b", json!({"skip-me": "yes"})));
    plugin.reconcile(&key(None, "a"), 0).await.unwrap();
    plugin.reconcile(&key(None, "b"), 0).await.unwrap();
    let applied: Vec<_> = h
        .writer
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            ApiCall::Apply { object, .. } => Some(object),
            _ => None,
        })
        .collect();
    assert_eq!(applied.len(), 2, "only namespace a gets defaults");
    assert!(applied.iter().all(|o| o.target.namespace.as_deref() == Some("a")));
    assert_eq!(applied[0].target.name, "small");
    assert_eq!(applied[0].body["spec"]["hard"], json!({"pods": "3"}));
}

#[tokio::test]
async fn namespace_defaults_removes_its_defaults_when_a_namespace_opts_out() {
    let h = Harness::new();
    let plugin =
        h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    h.cache.insert(&namespace("c", "uid-c", json!({"kubewasm.dev/no-defaults": ""})));
    let owner = json!([{"apiVersion": "v1", "kind": "Namespace", "name": "c", "uid": "uid-c", "controller": true}]);
    // The quota it made: the host's mark names it.
    h.cache.insert(&json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "default-quota", "namespace": "c", "ownerReferences": owner,
                     "labels": {"kubewasm.dev/plugin": "namespace-defaults"}}}));
    plugin.reconcile(&key(None, "c"), 0).await.unwrap();
    let calls = h.writer.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        matches!(&calls[0], ApiCall::Delete { target: r, .. } if r.name == "default-quota" && r.kind.kind == "ResourceQuota")
    );
}

#[tokio::test]
async fn a_plugin_past_its_host_call_budget_is_stopped() {
    let h = Harness::new();
    let plugin =
        h.load("namespace-defaults", "namespace_defaults.wasm", limits(|l| l.with_host_calls(2))).await.unwrap();
    h.cache.insert(&namespace("d", "uid-d", json!({})));
    let err = plugin.reconcile(&key(None, "d"), 0).await.unwrap_err();
    assert!(matches!(err, CallFailed::Limit(LimitHit::HostCalls(2))), "{err:?}");
}

#[tokio::test]
async fn api_errors_reach_the_plugin_as_wit_errors_and_fail_the_reconcile() {
    let h = Harness::new();
    let plugin =
        h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    h.cache.insert(&namespace("e", "uid-e", json!({})));
    h.writer.fail_with(CallError::Conflict("field manager conflict".into()));
    let err = plugin.reconcile(&key(None, "e"), 0).await.unwrap_err();
    assert!(matches!(&err, CallFailed::Plugin(m) if m == "conflict: field manager conflict"), "{err:?}");
}

#[tokio::test]
async fn a_second_runtime_on_the_same_cache_directory_loads_without_recompiling() {
    let dir = tempfile::tempdir().unwrap();
    let first = Harness::with_runtime(Runtime::new(RuntimeConfig::default().cache_dir(dir.path())).unwrap());
    first.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    let stats = first.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (0, 1), "the first start compiles");

    // A fresh runtime shares nothing in memory with the first: only the directory.
    let second = Harness::with_runtime(Runtime::new(RuntimeConfig::default().cache_dir(dir.path())).unwrap());
    second.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    let stats = second.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (1, 0), "the second start must not recompile");
}

#[tokio::test]
async fn a_runtime_that_compiles_in_a_child_process_only_reads_the_compile_cache_itself() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig::default().cache_dir(dir.path()).compile_in_child(env!("CARGO_BIN_EXE_kubewasm"));
    let h = Harness::with_runtime(Runtime::new(config).unwrap());
    let plugin =
        h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    let stats = h.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (1, 0), "the child compiled; this process only read the cache");
    h.cache.insert(&namespace("c", "uid-c", json!({})));
    plugin.reconcile(&key(None, "c"), 0).await.unwrap();
    assert_eq!(h.writer.calls().len(), 3, "the component from the child reconciles: {:?}", h.writer.calls());

    // The child left a marker: a second runtime on the directory starts no child at all (its
    // "compiler" would fail every compile) and still loads without compiling.
    let config = RuntimeConfig::default().cache_dir(dir.path()).compile_in_child("/bin/false");
    let second = Harness::with_runtime(Runtime::new(config).unwrap());
    second.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    let stats = second.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (1, 0));
}

#[tokio::test]
async fn a_component_the_compile_process_rejects_fails_only_its_own_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig::default().cache_dir(dir.path()).compile_in_child(env!("CARGO_BIN_EXE_kubewasm"));
    let h = Harness::with_runtime(Runtime::new(config).unwrap());
    // A component header followed by garbage: past the host's header check, refused by the compiler.
    let broken: Arc<[u8]> = [&b"\0asm\x0d\0\x01\0"[..], &[0xff; 64]].concat().into();
    let err = h
        .runtime
        .load("broken", broken, PluginConfig::approving_requests(), h.cache.clone(), h.writer.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Compile(_)), "{err:?}");
    assert!(format!("{err:?}").contains("compile process failed"), "{err:?}");
    let stats = h.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses), (0, 0), "this process compiled nothing");
    h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
}

#[tokio::test]
async fn a_new_version_with_the_bytes_of_a_loaded_one_is_not_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::with_runtime(Runtime::new(RuntimeConfig::default().cache_dir(dir.path())).unwrap());
    let first =
        h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    // A config change: the same component, another version.
    let config = PluginConfig { max_concurrent: Some(2), ..PluginConfig::approving_requests() };
    let second = h.load("namespace-defaults", "namespace_defaults.wasm", config).await.unwrap();
    assert_eq!(second.max_concurrent(), 2);
    let stats = h.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses, h.runtime.compiled_reused()), (0, 1, 1), "compiled once, reused once");

    // Once no version holds it, it is not kept.
    drop((first, second));
    h.load("namespace-defaults", "namespace_defaults.wasm", PluginConfig::approving_requests()).await.unwrap();
    let stats = h.runtime.cache_stats().unwrap();
    assert_eq!((stats.hits, stats.misses, h.runtime.compiled_reused()), (1, 1, 1), "from the disk cache this time");
}

#[tokio::test]
async fn a_memory_limit_above_the_hosts_maximum_is_rejected_at_load() {
    let h = Harness::new();
    let config =
        PluginConfig { limits: Limits::default().with_memory_bytes(2 << 30), ..PluginConfig::approving_requests() };
    let err = h.load("namespace-defaults", "namespace_defaults.wasm", config).await.unwrap_err();
    assert!(matches!(err, LoadError::MemoryAboveMax { .. }), "{err:?}");
}

/// The `RequeueAfter` of the counter fixture: how many calls its instance has served.
async fn served(plugin: &Plugin, name: &str) -> Result<u64, CallFailed> {
    match plugin.reconcile(&key(Some("default"), name), 0).await? {
        Action::RequeueAfter(d) => Ok(d.as_millis() as u64),
        Action::Done => panic!("the counter fixture always requeues"),
    }
}

#[tokio::test]
async fn every_reconcile_gets_a_fresh_instance_unless_reuse_is_configured() {
    let h = Harness::new();
    let fresh = h.load("counter", "fixture_counter.wasm", PluginConfig::approving_requests()).await.unwrap();
    for _ in 0..3 {
        assert_eq!(served(&fresh, "cm").await.unwrap(), 1);
    }
    let reusing = h.load("counter", "fixture_counter.wasm", limits(|l| l.with_reuse_instances(3))).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(served(&reusing, "cm").await.unwrap());
    }
    assert_eq!(seen, [1, 2, 3, 1, 2, 3, 1], "an instance serves reuseInstances calls, then a fresh one takes over");
}

#[tokio::test]
async fn a_reused_instance_is_dropped_after_its_reconcile_fails() {
    let h = Harness::new();
    let plugin = h.load("counter", "fixture_counter.wasm", limits(|l| l.with_reuse_instances(100))).await.unwrap();
    assert_eq!((served(&plugin, "a").await.unwrap(), served(&plugin, "b").await.unwrap()), (1, 2));
    let err = served(&plugin, "fail").await.unwrap_err();
    assert!(matches!(&err, CallFailed::Plugin(m) if m.contains("failing on call 3")), "{err:?}");
    assert_eq!(served(&plugin, "c").await.unwrap(), 1, "the next key starts from a fresh instance");
}

#[tokio::test]
async fn the_python_and_javascript_builds_run_under_the_default_limits_and_write_what_the_rust_build_writes() {
    let h = Harness::new();
    h.cache.insert(&namespace("team-a", "uid-a", json!({})));
    let mut writes = Vec::new();
    for file in ["namespace_defaults.wasm", "namespace_defaults_py.wasm", "namespace_defaults_js.wasm"] {
        // The Python and JavaScript builds are the Rust one's desired-state mode.
        let rust_mode = (file == "namespace_defaults.wasm").then(|| json!({"desiredState": true}));
        let config = PluginConfig { settings: rust_mode, ..PluginConfig::approving_requests() };
        let plugin = h.load("namespace-defaults", file, config).await.unwrap();
        assert_eq!(plugin.reconcile(&key(None, "team-a"), 0).await.unwrap(), Action::Done, "{file}");
        let calls = h.writer.calls();
        writes.push(calls.into_iter().skip(writes.len() * 3).collect::<Vec<_>>());
    }
    assert_eq!(writes[0].len(), 3, "an event and two forced applies: {:?}", writes[0]);
    assert_eq!(writes[1], writes[0], "Python");
    assert_eq!(writes[2], writes[0], "JavaScript");
}

#[tokio::test]
async fn an_owned_kind_is_written_only_where_the_plugin_controls_the_object_and_never_in_protected_places() {
    let protected = Protected::default();
    protected.module_namespace("kubewasm-system");
    let h = Harness::with_runtime(
        Runtime::new(RuntimeConfig::default().cache_dir(common::test_compile_cache()).protected(protected)).unwrap(),
    );
    let writes = json!([
        {"how": "apply", "name": "stranger", "data": {"k": "v"}},
        {"how": "patch", "name": "bystander", "data": {"k": "v"}},
        {"how": "delete", "name": "uncached"},
        {"how": "apply", "namespace": "kubewasm-system", "name": "module", "controlled": true},
        {"how": "apply", "name": "child", "controlled": true, "data": {"k": "v"}},
    ]);
    let settings = json!({"writes": writes});
    let config = PluginConfig { settings: Some(settings), ..PluginConfig::approving_requests() };
    let plugin = h.load("intruder", "fixture_intruder.wasm", config).await.unwrap();
    h.cache.insert(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "trigger", "namespace": "default", "uid": "uid-trigger"}}));
    h.cache.insert(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bystander", "namespace": "default", "uid": "uid-bystander"}}));

    let err = plugin.reconcile(&key(Some("default"), "trigger"), 0).await.unwrap_err();
    let CallFailed::Plugin(seen) = err else { panic!("expected the plugin's own error, got {err:?}") };
    let results: Vec<&str> = seen.split(" | ").collect();
    assert!(
        results[0].contains("stranger: Err(Forbidden") && results[0].contains("carries no controller ownerReference"),
        "{seen}"
    );
    assert!(results[1].contains("bystander: Err(Forbidden") && results[1].contains("did not make it"), "{seen}");
    // Neither cached nor on the server: nothing to delete (the SDK takes not-found as done), and
    // nothing is sent (the calls below).
    assert_eq!(results[2], "delete uncached: Ok(())", "{seen}");
    assert!(results[3].contains("module: Err(Forbidden") && results[3].contains("protected"), "{seen}");
    assert_eq!(results[4], "apply child: Ok(())", "{seen}");
    let calls = h.writer.calls();
    assert_eq!(calls.len(), 2, "only the controlled child and the AccessDenied event: {calls:#?}");
    assert!(matches!(&calls[0], ApiCall::Apply { object, .. } if object.target.name == "child"), "{calls:?}");
    assert!(matches!(&calls[1], ApiCall::Event(e) if e.reason == "AccessDenied"), "{calls:?}");
}

#[tokio::test]
async fn an_explicit_write_grant_lets_a_plugin_write_its_owned_kind_anywhere() {
    let h = Harness::new();
    let writes = json!([
        {"how": "apply", "name": "stranger", "data": {"k": "v"}},
        {"how": "apply", "namespace": "other", "name": "x", "data": {"k": "v"}},
    ]);
    let config = PluginConfig {
        grants: serde_yaml::from_str::<GrantConfig>("write: [ConfigMap]").unwrap().plus_requests(),
        settings: Some(json!({"writes": writes})),
        ..PluginConfig::approving_requests()
    };
    let plugin = h.load("granted", "fixture_intruder.wasm", config).await.unwrap();
    h.cache.insert(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "trigger", "namespace": "default", "uid": "uid-trigger"}}));
    assert_eq!(plugin.reconcile(&key(Some("default"), "trigger"), 0).await.unwrap(), Action::Done);
    assert_eq!(h.writer.calls().len(), 2);
}

/// A `cache.list` (contract 0.1, no paging) of more bytes than the plugin's memory limit leaves
/// it is refused with an error the plugin can act on, before the host copies the objects: the
/// copy is host memory no limit counted (issue 49, class 4). Before, the host copied all of it
/// and the plugin trapped on its memory limit only when the copy was handed to it.
#[tokio::test]
async fn a_cache_list_larger_than_the_plugins_memory_limit_is_refused_with_a_clear_error() {
    let h = Harness::new();
    let cap: u64 = 16 << 20;
    let settings = json!({"report": "report"});
    let config = PluginConfig { settings: Some(settings), ..limits(|l| l.with_memory_bytes(cap)) };
    let plugin = h.load("lister", "fixture_intruder.wasm", config).await.unwrap();
    let mebibyte = "x".repeat(1 << 20);
    for i in 0..20 {
        h.cache.insert(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big-{i}"), "namespace": "default"}, "data": {"x": mebibyte}}));
    }
    let err = plugin.reconcile(&key(Some("default"), "big-0"), 0).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, CallFailed::Plugin(_)), "the plugin got an error, it did not trap: {err:?}");
    assert!(message.contains("cache.list of ConfigMap would copy 20.0 MiB"), "{message}");
    assert!(message.contains("memory limit") && message.contains("page it"), "{message}");
    assert!(!message.contains("more than the 16.0 MiB"), "the plugin's linear memory is not left to copy: {message}");
    assert!(h.writer.calls().is_empty(), "the plugin wrote nothing: {:?}", h.writer.calls());
}
