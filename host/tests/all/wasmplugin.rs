//! The WasmPlugin CRD as a plugin source against a real kube-apiserver + etcd: load, swap on a
//! spec change, reject a bad module with the reason in the status while the old version keeps
//! serving, pause, and unload on delete.

use crate::common;
use crate::hotload_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::WasmPlugin;
use kubewasm_host::hotload::wasmplugin::Condition;
use kubewasm_testenv::ControlPlane;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::{eventually, plugin_wasm};
use hotload_support::stamp_of;

const CONVERGE: Duration = Duration::from_secs(120);

async fn put_module(client: &kube::Client, ns: &str, bytes: &[u8]) {
    common::examples::put_module_config_map(client, ns, "stamper-module", &[("plugin.wasm", bytes)]).await;
}

pub(crate) fn condition<'a>(wp: &'a WasmPlugin, type_: &str) -> Option<&'a Condition> {
    wp.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

async fn stamps(client: &kube::Client, ns: &str, label: &str) -> Vec<Option<String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default().labels(label)).await.unwrap();
    list.items.iter().map(|cm| stamp_of(cm).map(str::to_owned)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_loads_swaps_reports_a_rejected_module_and_unloads() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("wp").await;
    // Modules in a namespace of their own: the host keeps plugins out of every ConfigMap there.
    let modules = cp.namespace("wp-modules").await;
    let label = format!("kubewasm.test/wp={ns}");
    put_module(&client, &modules, &plugin_wasm("fixture_stamper.wasm")).await;

    let app = common::app(&client);
    let stop = CancellationToken::new();
    // Each test's host serves only its own WasmPlugins (tests run in parallel).
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));

    let name = format!("stamper-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let spec = |version: &str| {
        json!({
            "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": { "name": name, "labels": { "test": ns } },
            "spec": {
                "module": { "configMap": { "name": "stamper-module", "key": "plugin.wasm" } },
                "grants": common::approved("fixture_stamper.wasm", json!({ "write": ["ConfigMap"] })),
                "settings": { "version": version, "selector": label },
            },
        })
    };
    let apply = |version: &'static str| {
        let (plugins, body, name) = (plugins.clone(), spec(version), name.clone());
        async move { plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap() }
    };
    // The conditions and the memory the plugin reserves, as the host's metrics show them.
    let metric = |metric: &str, labels: &[(&str, &str)]| {
        let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
        common::metric_value(&text, metric, labels)
    };
    let condition_metric =
        |type_: &str| metric("kubewasm_wasmplugin_condition", &[("plugin", &name), ("condition", type_)]);
    let status_says = |what: &'static str, check: fn(&WasmPlugin) -> bool| {
        let (plugins, name) = (plugins.clone(), name.clone());
        async move {
            eventually(what, CONVERGE, || async { plugins.get(&name).await.ok().filter(check) }).await;
        }
    };

    // Load: Ready, revision 1, and objects stamped v1.
    apply("v1").await;
    status_says("Ready with revision 1", |wp| {
        condition(wp, "Ready").is_some_and(|c| c.status == "True")
            && wp.status.as_ref().and_then(|s| s.revision) == Some(1)
    })
    .await;
    assert_eq!((condition_metric("Ready"), condition_metric("Degraded")), (Some(1.0), Some(0.0)));
    let reserved = metric("kubewasm_plugin_memory_reserved_bytes", &[("plugin", &name)]);
    assert!(reserved.is_some_and(|bytes| bytes > 0.0), "its instances' memory is reserved: {reserved:?}");
    // Its controller's caches sync after the status is written: readiness follows shortly.
    eventually("readiness: the source synced and the plugin's caches too", CONVERGE, || async {
        app.readiness().is_ready().then_some(())
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let labelled: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "obj", "labels": { "kubewasm.test/wp": ns } } })).unwrap();
    api.create(&PostParams::default(), &labelled).await.unwrap();
    eventually("obj stamped v1", CONVERGE, || async {
        (stamps(&client, &ns, &label).await == [Some("v1".to_owned())]).then_some(())
    })
    .await;

    // Swap on a spec change: revision 2 re-reconciles every object.
    apply("v2").await;
    status_says("revision 2", |wp| wp.status.as_ref().and_then(|s| s.revision) == Some(2)).await;
    eventually("obj stamped v2", CONVERGE, || async {
        (stamps(&client, &ns, &label).await == [Some("v2".to_owned())]).then_some(())
    })
    .await;

    // A garbage module: rejected with the reason in the status; revision 2 keeps serving.
    put_module(&client, &modules, b"definitely not a component").await;
    status_says("Degraded: LoadFailed", |wp| {
        condition(wp, "Degraded").is_some_and(|c| {
            c.status == "True" && c.reason == "LoadFailed" && c.message.contains("not a WebAssembly binary")
        })
    })
    .await;
    let wp = plugins.get(&name).await.unwrap();
    assert_eq!(condition(&wp, "Ready").unwrap().status, "True", "the previous version still serves");
    assert_eq!((condition_metric("Ready"), condition_metric("Degraded")), (Some(1.0), Some(1.0)));
    assert_eq!(wp.status.as_ref().unwrap().revision, Some(2));
    assert_eq!(
        wp.status.as_ref().unwrap().loaded_sha256.as_deref(),
        Some(kubewasm_host::plugin::sha256_hex(&plugin_wasm("fixture_stamper.wasm")).as_str())
    );
    let second: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "obj2", "labels": { "kubewasm.test/wp": ns } } }))
            .unwrap();
    api.create(&PostParams::default(), &second).await.unwrap();
    eventually("obj2 stamped v2 by the old version", CONVERGE, || async {
        (stamps(&client, &ns, &label).await == [Some("v2".to_owned()), Some("v2".to_owned())]).then_some(())
    })
    .await;

    // Deleting the object unloads the plugin.
    plugins.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("the plugin unloaded", CONVERGE, || async {
        app.plugins().serving(&name).await.is_none().then_some(())
    })
    .await;
    assert_eq!(condition_metric("Degraded"), None, "a deleted WasmPlugin's conditions are forgotten");
    eventually("its memory given back", CONVERGE, || async {
        (metric("kubewasm_plugin_memory_reserved_bytes", &[("plugin", &name)]) == Some(0.0)).then_some(())
    })
    .await;
    stop.cancel();
    source.await.unwrap();
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

/// Serves `bytes` at `/stamper.wasm` and `/other.wasm`, `/moved` redirects to the first; counts
/// downloads of each path.
async fn module_server(bytes: Vec<u8>) -> (String, Arc<Mutex<BTreeMap<String, usize>>>) {
    use axum::response::{IntoResponse, Redirect};
    let hits: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let serve = |path: &'static str| {
        let (bytes, hits) = (bytes.clone(), hits.clone());
        move || async move {
            *hits.lock().unwrap().entry(path.to_owned()).or_default() += 1;
            bytes.into_response()
        }
    };
    let router = axum::Router::new()
        .route("/stamper.wasm", axum::routing::get(serve("/stamper.wasm")))
        .route("/other.wasm", axum::routing::get(serve("/other.wasm")))
        .route("/moved", axum::routing::get(|| async { Redirect::temporary("/stamper.wasm") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}"), hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_module_is_downloaded_once_and_a_wrong_digest_is_refused() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("wpurl").await;
    // Modules in a namespace of their own: the host keeps plugins out of every ConfigMap there.
    let modules = cp.namespace("wpurl-modules").await;
    let label = format!("kubewasm.test/wpurl={ns}");
    let wasm = plugin_wasm("fixture_stamper.wasm");
    let (base, hits) = module_server(wasm.to_vec()).await;

    let app = common::app(&client);
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let create = |name: String, url: String, sha256: String| {
        let body = json!({
            "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": { "name": name, "labels": { "test": ns } },
            "spec": {
                "module": { "url": { "url": url, "sha256": sha256 } },
                "grants": common::approved("fixture_stamper.wasm", json!({ "write": ["ConfigMap"] })),
                "settings": { "version": "from-url", "selector": label },
            },
        });
        let plugins = plugins.clone();
        async move { plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap() }
    };

    let good = format!("good-{ns}");
    create(good.clone(), format!("{base}/moved"), kubewasm_host::plugin::sha256_hex(&wasm)).await;
    let bad = format!("bad-{ns}");
    create(bad.clone(), format!("{base}/other.wasm"), "0".repeat(64)).await;

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let labelled: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "obj", "labels": { "kubewasm.test/wpurl": ns } } }))
            .unwrap();
    api.create(&PostParams::default(), &labelled).await.unwrap();
    eventually("obj stamped by the downloaded plugin", CONVERGE, || async {
        (stamps(&client, &ns, &label).await == [Some("from-url".to_owned())]).then_some(())
    })
    .await;
    let bad_status = eventually("the wrong digest reported", CONVERGE, || async {
        let wp = plugins.get(&bad).await.ok()?;
        let degraded = condition(&wp, "Degraded")?.clone();
        (degraded.reason == "DigestMismatch").then_some(wp)
    })
    .await;
    assert_eq!(condition(&bad_status, "Ready").unwrap().status, "False");
    // A bad WasmPlugin is reported in its status, not by the host's readiness (which follows
    // the source's first pass and the good plugin's caches, so it may come a moment later).
    eventually("readiness despite the bad WasmPlugin", CONVERGE, || async { app.readiness().is_ready().then_some(()) })
        .await;
    assert!(condition(&bad_status, "Degraded").unwrap().message.contains("pins 0000"), "{bad_status:?}");
    assert!(app.plugins().serving(&bad).await.is_none());

    // Status writes and resyncs re-apply the same spec without downloading again.
    // The good plugin's Ready follows its caches' sync (re-checked every 2 s).
    eventually("the good plugin Ready", CONVERGE, || async {
        let wp = plugins.get(&good).await.ok()?;
        (condition(&wp, "Ready")?.status == "True").then_some(())
    })
    .await;
    assert_eq!(hits.lock().unwrap().get("/stamper.wasm"), Some(&1), "downloaded once, through the redirect");

    stop.cancel();
    source.await.unwrap();
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_whose_caches_cannot_sync_says_why_in_its_status_and_holds_nothing_else_down() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

    let Some(cp) = ControlPlane::shared() else { return };
    let admin = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&admin).await;
    let ns = cp.namespace("wprbac").await;
    // Modules in a namespace of their own: the host keeps plugins out of every ConfigMap there.
    let modules = cp.namespace("wprbac-modules").await;
    let label = format!("kubewasm.test/wprbac={ns}");
    put_module(&admin, &modules, &plugin_wasm("fixture_stamper.wasm")).await;
    // The host runs as the restricted user: WasmPlugins and ConfigMaps, but no Secrets.
    let role: ClusterRole = serde_json::from_value(json!({
    "metadata": {"name": format!("kubewasm-e2e-{ns}")},
    "rules": [
        {"apiGroups": ["kubewasm.dev"], "resources": ["wasmplugins"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["kubewasm.dev"], "resources": ["wasmplugins/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]}))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("kubewasm-e2e-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("kubewasm-e2e-{ns}")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cp.restricted_user()}]}))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await.unwrap();

    let options = kubewasm_host::hotload::Options { sync_timeout: Duration::from_secs(5), ..Default::default() };
    let app =
        App::with_options(cp.restricted_client().await, Some(&common::test_compile_cache()), None, options).unwrap();
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));
    let plugins: Api<WasmPlugin> = Api::all(admin.clone());
    let create = |name: String, grants: serde_json::Value, settings: serde_json::Value| {
        let body = json!({
            "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": { "name": name, "labels": { "test": ns } },
            "spec": {
                "module": { "configMap": { "name": "stamper-module", "key": "plugin.wasm" } },
                "grants": common::approved("fixture_stamper.wasm", grants),
                "settings": settings,
            },
        });
        let plugins = plugins.clone();
        async move { plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap() }
    };
    let blocked = format!("blocked-{ns}");
    let secrets = json!({ "read": ["Secret"], "write": ["ConfigMap"], "sensitive": { "namespaces": [ns] } });
    create(blocked.clone(), secrets, json!({ "version": "blocked", "selector": "never=matched", "readSecrets": true }))
        .await;
    let good = format!("good-{ns}");
    create(good.clone(), json!({ "write": ["ConfigMap"] }), json!({ "version": "good", "selector": label })).await;

    let waiting = eventually("the blocked plugin's status says which cache it waits for", CONVERGE, || async {
        let wp = plugins.get(&blocked).await.ok()?;
        let ready = condition(&wp, "Ready")?.clone();
        let says_why = ready.message.contains("the cache of Secret") && ready.message.contains("forbidden");
        // The ConfigMap cache (shared, cluster-wide under contract 0.2) may still be listing
        // when the first status is written; the status is re-checked until only Secret waits.
        let only_secret = !ready.message.contains("ConfigMap");
        (ready.status == "False" && ready.reason == "CachesNotSynced" && says_why && only_secret).then_some(ready)
    })
    .await;
    assert!(!waiting.message.contains("ConfigMap"), "only the Secret cache waits: {waiting:?}");

    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let labelled: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "obj", "labels": { "kubewasm.test/wprbac": ns } } }))
            .unwrap();
    api.create(&PostParams::default(), &labelled).await.unwrap();
    eventually("obj stamped by the other plugin", CONVERGE, || async {
        (stamps(&admin, &ns, &label).await == [Some("good".to_owned())]).then_some(())
    })
    .await;
    // Its status follows its caches (re-checked every 2 s), so it may say Ready a moment later.
    eventually("the other plugin's status Ready", CONVERGE, || async {
        let wp = plugins.get(&good).await.ok()?;
        condition(&wp, "Ready").is_some_and(|c| c.status == "True").then_some(())
    })
    .await;
    eventually("the host ready despite the blocked plugin", CONVERGE, || async {
        app.readiness().is_ready().then_some(())
    })
    .await;

    stop.cancel();
    source.await.unwrap();
    app.shut_down(Duration::from_secs(10)).await;
}

/// Plugins sent as their own ServiceAccounts, and no RBAC made for this one: its status lists
/// what its identity lacks, and the host serves it nothing its identity may not read (its
/// cached reads included), so it writes nothing either. Once the RBAC `kubewasm rbac` prints is
/// applied, the serving version reviews clean, is served again and writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_plugin_whose_identity_lacks_rights_lists_them_for_it_and_its_canary_and_is_served_nothing_they_cover() {
    use kubewasm_host::hotload::Options;
    use kubewasm_host::rbac::{self, Identity};
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    common::examples::install_wasm_plugin_crd(&client).await;
    let ns = cp.namespace("wp-rbac").await;
    let modules = cp.namespace("wp-rbac-modules").await;
    let label = format!("kubewasm.test/wp-rbac={ns}");
    put_module(&client, &modules, &plugin_wasm("fixture_stamper.wasm")).await;
    let identity = Identity { namespace: "kubewasm-system".into(), host_service_account: "kubewasm".into() };
    let options = Options { identity: Some(identity.clone()), ..Options::default() };
    let app = App::with_options(client.clone(), Some(&common::test_compile_cache()), None, options).unwrap();
    let stop = CancellationToken::new();
    let source = tokio::spawn(app.wasm_plugin_source(&modules).selector(&format!("test={ns}")).run(stop.clone()));

    let name = format!("unbound-{ns}");
    let plugins: Api<WasmPlugin> = Api::all(client.clone());
    let apply_with = |version: &str, canary: bool| {
        let module = json!({ "configMap": { "name": "stamper-module", "key": "plugin.wasm" } });
        let mut spec = json!({
            "module": module,
            "grants": common::approved("fixture_stamper.wasm", json!({ "write": ["ConfigMap"] })),
            "settings": { "version": version, "selector": label },
        });
        if canary {
            spec["canary"] = json!({ "module": module, "settings": { "version": "candidate", "selector": label } });
        }
        let body = json!({
            "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": { "name": name, "labels": { "test": ns } },
            "spec": spec,
        });
        let (plugins, name) = (plugins.clone(), name.clone());
        async move { plugins.patch(&name, &PatchParams::apply("kubewasm-test"), &Patch::Apply(&body)).await.unwrap() }
    };
    let apply = |version: &str| apply_with(version, false);
    apply("v1").await;
    let missing = eventually("RBACMissing True", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        condition(&wp, "RBACMissing").filter(|c| c.status == "True").map(|c| c.message.clone())
    })
    .await;
    assert!(missing.contains("patch configmaps cluster-wide"), "{missing}");
    assert!(missing.contains("create events.events.k8s.io cluster-wide"), "{missing}");

    // A canary candidate is reviewed when it loads, before anyone promotes it.
    apply_with("v1", true).await;
    let candidate_lacks = eventually("the canary's missing rights", CONVERGE, || async {
        let canary = plugins.get(&name).await.ok()?.status?.canary?;
        (!canary.rbac_missing.is_empty()).then_some(canary.rbac_missing)
    })
    .await;
    assert!(candidate_lacks.iter().any(|m| m.contains("patch configmaps cluster-wide")), "{candidate_lacks:?}");
    apply("v1").await;

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let labelled: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "obj", "labels": { "kubewasm.test/wp-rbac": ns } } }))
            .unwrap();
    api.create(&PostParams::default(), &labelled).await.unwrap();
    eventually("the plugin's calls refused", CONVERGE, || async {
        let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
        let labels = [("plugin", name.as_str()), ("result", "forbidden")];
        common::metric_value(&text, "kubewasm_plugin_host_calls_total", &labels).filter(|n| *n > 0.0)
    })
    .await;
    assert_eq!(stamps(&client, &ns, &label).await, [None], "nothing was written");
    // Nor read: the host serves the plugin no ConfigMap from its cache while its identity may not
    // read them (it would otherwise show the plugin what its own identity may not see).
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let labels = [("plugin", name.as_str()), ("function", "cache.get"), ("result", "forbidden")];
    assert!(common::metric_value(&text, "kubewasm_plugin_host_calls_total", &labels).unwrap_or(0.0) > 0.0, "{text}");

    // The RBAC `kubewasm rbac` prints, applied: the serving version is reviewed again by itself
    // and the condition clears, with no new spec.
    let grants = app.plugins().plugin(&name).await.unwrap().grants().clone();
    rbac::review::provision_objects(
        &client,
        "kubewasm-system",
        &rbac::objects(&name, &grants, &identity, &rbac::ResourceNames::guessed()),
    )
    .await
    .unwrap();
    eventually("RBACMissing False without a new version", CONVERGE, || async {
        let wp = plugins.get(&name).await.ok()?;
        condition(&wp, "RBACMissing").filter(|c| c.status == "False").map(drop)
    })
    .await;
    assert_eq!(plugins.get(&name).await.unwrap().status.unwrap().revision, Some(1));
    // A new version re-queues every object at once (the refused key is in backoff).
    apply("v2").await;
    eventually("obj stamped v2", CONVERGE, || async {
        (stamps(&client, &ns, &label).await == [Some("v2".to_owned())]).then_some(())
    })
    .await;
    stop.cancel();
    source.await.unwrap();
}
