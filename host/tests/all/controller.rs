//! The host end to end against a real kube-apiserver + etcd: namespace-defaults converges,
//! repairs deleted children, follows the opt-out label, reports events, and readiness follows
//! the caches.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubewasm_host::app::PluginFile;
use kubewasm_testenv::ControlPlane;

use common::{eventually, plugin_dir};

const CONVERGE: Duration = Duration::from_secs(60);

fn namespace_defaults() -> PluginFile {
    common::fixture_file("namespace-defaults", "namespace_defaults.wasm", "")
}

async fn new_namespace(client: &kube::Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", std::process::id() as u64 * 1000 + rand_suffix());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    name
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_converges_repairs_children_and_honours_opt_out() {
    converges_repairs_children_and_honours_opt_out("").await;
}

/// The same with namespace-defaults returning its children as its desired state (contract 0.3):
/// the host applies them, and on opt-out prunes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_in_desired_state_mode_converges_repairs_children_and_honours_opt_out() {
    converges_repairs_children_and_honours_opt_out("settings: {desiredState: true}\n").await;
}

/// namespace-defaults with `config` makes a new Namespace's children, makes a deleted one again,
/// reports a `DefaultsApplied` Event, and removes both on opt-out.
async fn converges_repairs_children_and_honours_opt_out(config: &str) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let mut app = common::app(&client);
    assert!(!app.readiness().is_ready(), "not ready before any plugin or cache");
    app.add_plugin(&common::fixture_file("namespace-defaults", "namespace_defaults.wasm", config)).await.unwrap();
    eventually("readiness after the caches synced", CONVERGE, || async { app.readiness().is_ready().then_some(()) })
        .await;

    let ns = new_namespace(&client, "nd").await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns);
    let quota =
        eventually("the default quota", CONVERGE, || async { quotas.get_opt("default-quota").await.unwrap() }).await;
    let owner = &quota.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("Namespace", ns.as_str(), Some(true)));
    assert_eq!(quota.spec.unwrap().hard.unwrap()["pods"].0, "50");
    let managers: Vec<_> = quota.metadata.managed_fields.unwrap().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.contains(&"kubewasm/namespace-defaults".to_owned()), "{managers:?}");
    eventually("the default-deny policy", CONVERGE, || async { policies.get_opt("default-deny").await.unwrap() }).await;

    // A deleted owned child comes back (Owns trigger → owner's key → reconcile).
    let old_uid = quota.metadata.uid.unwrap();
    quotas.delete("default-quota", &DeleteParams::default()).await.unwrap();
    eventually("the quota re-created", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap().filter(|q| q.metadata.uid.as_deref() != Some(&old_uid))
    })
    .await;

    // The event the plugin published.
    let events = Api::<Event>::all(client.clone());
    eventually("a DefaultsApplied event about the namespace", CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("DefaultsApplied")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ns.as_str())
                && e.reporting_controller.as_deref() == Some("kubewasm/namespace-defaults")
        })
    })
    .await;

    // Opting out removes the defaults.
    let label = serde_json::json!({"metadata": {"labels": {"kubewasm.dev/no-defaults": "true"}}});
    Api::<Namespace>::all(client.clone()).patch(&ns, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    eventually("the defaults removed after opt-out", CONVERGE, || async {
        let gone = quotas.get_opt("default-quota").await.unwrap().is_none()
            && policies.get_opt("default-deny").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;

    assert!(app.shut_down(Duration::from_secs(10)).await, "in-flight reconciles finished within the grace period");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_fails_to_load_is_reported_and_the_others_run() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let mut app = common::app(&client);
    let broken =
        PluginFile { name: "broken".into(), wasm: Some(plugin_dir().join("fixture-wrong-world.wasm")), config: None };
    let err = app.add_plugin(&broken).await.unwrap_err();
    assert!(format!("{err:#}").contains("describe"), "{err:#}");
    app.add_plugin(&namespace_defaults()).await.unwrap();

    let ns = new_namespace(&client, "nd-broken").await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    eventually("the default quota despite the broken plugin", CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await;
    eventually("ready: a rejected plugin holds no readiness check", CONVERGE, || async {
        app.readiness().is_ready().then_some(())
    })
    .await;
    let metrics = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    assert!(
        metrics.contains(r#"kubewasm_plugin_load_errors_total{plugin="broken",reason="wrong_world"} 1"#),
        "{metrics}"
    );
    app.shut_down(Duration::from_secs(10)).await;
}

fn deployment(name: &str, reload: bool, configmap: &str) -> k8s_openapi::api::apps::v1::Deployment {
    let labels = if reload { serde_json::json!({"kubewasm.dev/reload": "true"}) } else { serde_json::json!({}) };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                     "envFrom": [{"configMapRef": {"name": configmap}}]}]}}}
    }))
    .unwrap()
}

fn config_hash(d: &k8s_openapi::api::apps::v1::Deployment) -> Option<String> {
    d.spec.template.metadata.as_ref()?.annotations.as_ref()?.get("kubewasm.dev/config-hash").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_reloader_restamps_a_deployment_when_its_configmap_changes() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;

    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    let wasm = common::install_plugin(
        dir.path(),
        "config-reloader",
        "config_reloader.wasm",
        "grants: {write: [Deployment.apps]}\n",
    );
    let file = PluginFile {
        name: "config-reloader".into(),
        wasm: Some(wasm),
        config: Some(dir.path().join("config-reloader.yaml")),
    };
    let mut app = common::app(&client);
    app.add_plugin(&file).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;

    let ns = cp.namespace("reload").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "app-config"}, "data": {"mode": "a"}})).unwrap();
    configmaps.create(&PostParams::default(), &cm).await.unwrap();
    deployments.create(&PostParams::default(), &deployment("web", true, "app-config")).await.unwrap();
    deployments.create(&PostParams::default(), &deployment("ignored", false, "app-config")).await.unwrap();

    let first =
        eventually("the first hash on web", CONVERGE, || async { config_hash(&deployments.get("web").await.unwrap()) })
            .await;
    // The ConfigMap changes: Watches → map → the index finds web → a new hash.
    let change = serde_json::json!({"data": {"mode": "b"}});
    configmaps.patch("app-config", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    let second = eventually("a new hash on web after the ConfigMap changed", CONVERGE, || async {
        config_hash(&deployments.get("web").await.unwrap()).filter(|h| *h != first)
    })
    .await;
    assert_ne!(first, second);
    assert_eq!(
        config_hash(&deployments.get("ignored").await.unwrap()),
        None,
        "a Deployment without the label is left alone"
    );
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_sync_copies_to_matching_namespaces_follows_new_ones_and_cleans_up_on_delete() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds/examples/configmapsync.yaml");
    let applied = cp.kubectl().arg("apply").arg("-f").arg(&crd).output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    common::examples::crd_established(&client, "configmapsyncs.examples.kubewasm.dev").await;

    let id = format!("{}-{}", std::process::id(), rand_suffix());
    let src = new_namespace(&client, "cms-src").await;
    let shared: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "shared"}, "data": {"greeting": "hello"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &src).create(&PostParams::default(), &shared).await.unwrap();
    let namespaces = Api::<Namespace>::all(client.clone());
    let labelled = |name: String| async {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": {"kubewasm-test": id}}}))
                .unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
        name
    };
    let ns_a = labelled(format!("cms-a-{id}")).await;
    let ns_b = labelled(format!("cms-b-{id}")).await;

    let dir = tempfile::tempdir().unwrap();
    let config = "grants: {write: [ConfigMapSync.examples.kubewasm.dev]}\n";
    let wasm = common::install_plugin(dir.path(), "configmap-sync", "configmap_sync.wasm", config);
    let file = PluginFile {
        name: "configmap-sync".into(),
        wasm: Some(wasm),
        config: Some(dir.path().join("configmap-sync.yaml")),
    };
    let mut app = common::app(&client);
    app.add_plugin(&file).await.unwrap();

    let (syncs, name) = common::examples::create_config_map_sync(&client, &id, &src).await;

    let copy_in = |ns: String| {
        let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
        async move { api.get_opt("shared").await.unwrap() }
    };
    let synced = |count: i64| {
        let syncs = syncs.clone();
        let name = name.clone();
        async move {
            let s = syncs.get(&name).await.ok()?;
            let ready = s.data.pointer("/status/conditions/0/status").and_then(|v| v.as_str()) == Some("True");
            (ready && s.data.pointer("/status/syncedCount").and_then(|v| v.as_i64()) == Some(count)).then_some(())
        }
    };
    for ns in [&ns_a, &ns_b] {
        let copy = eventually("a copy in each matching namespace", CONVERGE, || copy_in(ns.clone())).await;
        assert_eq!(copy.data.unwrap()["greeting"], "hello");
    }
    eventually("status: Ready, 2 synced", CONVERGE, || synced(2)).await;

    let ns_c = labelled(format!("cms-c-{id}")).await;
    eventually("a copy in a namespace created later", CONVERGE, || copy_in(ns_c.clone())).await;
    eventually("status: 3 synced", CONVERGE, || synced(3)).await;

    syncs.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("copies removed and the ConfigMapSync gone", CONVERGE, || async {
        let mut left = 0;
        for ns in [&ns_a, &ns_b, &ns_c] {
            left += usize::from(copy_in(ns.clone()).await.is_some());
        }
        (left == 0 && syncs.get_opt(&name).await.unwrap().is_none()).then_some(())
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_a_cache_cannot_sync_and_200_once_it_has() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

    let Some(cp) = ControlPlane::shared() else { return };
    let admin = cp.admin_client().await;
    // The restricted user may discover kinds but not list them: the caches cannot sync.
    let mut app = common::app(&cp.restricted_client().await);
    let router = kubewasm_host::admin::router(app.registry().clone(), app.readiness().clone());
    let (addr, _server) =
        kubewasm_host::admin::serve("127.0.0.1:0".parse().unwrap(), router, std::future::pending()).await.unwrap();
    let readyz = || async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    };
    app.add_plugin(&namespace_defaults()).await.unwrap();
    let refused =
        |text: &str| common::metric_value(text, "kubewasm_informer_watch_errors_total", &[("kind", "v1/Namespace")]);
    eventually("the Namespace list refused at least once", CONVERGE, || async {
        refused(&prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap())
            .filter(|v| *v >= 1.0)
    })
    .await;
    let before = readyz().await;
    assert!(before.starts_with("HTTP/1.1 503"), "ready although a cache never synced:\n{before}");
    assert!(before.contains("[-] controller namespace-defaults"), "{before}");

    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubewasm-e2e-readyz"},
        "rules": [{"apiGroups": ["", "networking.k8s.io"], "resources": ["namespaces", "resourcequotas", "networkpolicies"],
                   "verbs": ["get", "list", "watch"]}]}))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubewasm-e2e-readyz"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubewasm-e2e-readyz"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cp.restricted_user()}]}))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await.unwrap();
    eventually("/readyz 200 once the caches synced", CONVERGE, || async {
        Some(readyz().await).filter(|r| r.starts_with("HTTP/1.1 200"))
    })
    .await;
    app.shut_down(Duration::from_secs(10)).await;
}
