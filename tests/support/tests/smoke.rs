//! Smoke tests of the harness against the real kube-apiserver + etcd it starts.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};
use kubewasm_testenv::ControlPlane;
use serde_json::json;

/// Guards against a hang only; no test asserts on how long anything takes.
const HANG_GUARD: Duration = Duration::from_secs(60);

async fn guarded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, future).await.unwrap_or_else(|_| panic!("hung: {what}"))
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        data: Some(data.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>()),
        ..Default::default()
    }
}

/// Waits for the `Added` event of `name` on a raw watch stream, skipping other events.
async fn next_added<S>(stream: &mut S, name: &str)
where
    S: Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    guarded(&format!("watching for {name}"), async {
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Added(cm))) if cm.metadata.name.as_deref() == Some(name) => return,
                Some(Ok(_)) => continue,
                Some(Err(e)) => panic!("watch failed while waiting for {name}: {e}"),
                None => panic!("watch ended while waiting for {name}"),
            }
        }
    })
    .await
}

#[tokio::test]
async fn config_maps_can_be_created_read_listed_and_watched() {
    let Some(cp) = ControlPlane::shared() else { return };
    let ns = cp.namespace("configmaps").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);

    let start = api.list(&ListParams::default()).await.unwrap();
    let version = start.metadata.resource_version.unwrap();
    let mut watch = api.watch(&WatchParams::default(), &version).await.unwrap().boxed();

    api.create(&PostParams::default(), &config_map("first", &[("k", "v")])).await.unwrap();
    let got = api.get("first").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    let names: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert!(names.contains(&"first".to_owned()), "list returned {names:?}");
    next_added(&mut watch, "first").await;
}

#[tokio::test]
async fn a_crd_becomes_established_and_serves_its_kind() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.smoke.testenv.kubewasm.dev" },
        "spec": {
            "group": "smoke.testenv.kubewasm.dev",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "properties": { "size": { "type": "integer" } } }
                } } }
            }]
        }
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    guarded(
        "CRD established",
        await_condition(crds, "widgets.smoke.testenv.kubewasm.dev", conditions::is_crd_established()),
    )
    .await
    .unwrap();

    let ns = cp.namespace("crd").await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("smoke.testenv.kubewasm.dev", "v1", "Widget"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "smoke.testenv.kubewasm.dev/v1", "kind": "Widget",
        "metadata": { "name": "w1" }, "spec": { "size": 3 }
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &widget).await.unwrap();
    assert_eq!(widgets.get("w1").await.unwrap().data["spec"]["size"], 3);
}

#[tokio::test]
async fn kubectl_gets_namespaces_and_applies_manifests_with_the_written_kubeconfig() {
    let Some(cp) = ControlPlane::shared() else { return };
    let ns = cp.namespace("kubectl").await;

    let get = cp.kubectl().args(["get", "namespaces", "-o", "name"]).output().unwrap();
    assert!(get.status.success(), "kubectl get failed: {}", String::from_utf8_lossy(&get.stderr));
    let listed = String::from_utf8(get.stdout).unwrap();
    assert!(listed.lines().any(|l| l == format!("namespace/{ns}")), "kubectl listed:\n{listed}");

    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: {ns}\ndata:\n  from: kubectl\n"
        ),
    )
    .unwrap();
    let apply = cp.kubectl().arg("apply").arg("-f").arg(&manifest).output().unwrap();
    assert!(apply.status.success(), "kubectl apply failed: {}", String::from_utf8_lossy(&apply.stderr));

    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    assert_eq!(api.get("applied").await.unwrap().data.unwrap()["from"], "kubectl");
}

#[tokio::test]
async fn the_restricted_user_is_forbidden_to_list_secrets_until_a_role_binding_grants_it() {
    let Some(cp) = ControlPlane::shared() else { return };
    let ns = cp.namespace("rbac").await;
    let secrets: Api<Secret> = Api::namespaced(cp.restricted_client().await, &ns);

    match secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }

    let admin = cp.admin_client().await;
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "secret-reader" },
        "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"] }]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns).create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "restricted-reads-secrets" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secret-reader" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cp.restricted_user() }]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin, &ns).create(&PostParams::default(), &binding).await.unwrap();

    // The RBAC authorizer reads bindings from an informer: the grant applies once it has seen it.
    guarded("the RoleBinding to take effect", async {
        loop {
            match secrets.list(&ListParams::default()).await {
                Ok(_) => return,
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("listing secrets with the grant: {e}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn the_apiserver_reports_the_version_it_was_built_as() {
    let Some(cp) = ControlPlane::shared() else { return };
    let expected = std::env::var("KUBEWASM_K8S_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| kubewasm_testenv::DEFAULT_K8S_VERSION.to_owned());
    let info = cp.admin_client().await.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, format!("v{expected}"));
    let mut parts = expected.split('.');
    assert_eq!(Some(info.major.as_str()), parts.next());
    assert_eq!(Some(info.minor.as_str()), parts.next());
}

#[tokio::test]
async fn a_watch_through_the_fault_proxy_fails_when_cut_and_works_after_restore() {
    let Some(cp) = ControlPlane::shared() else { return };
    let ns = cp.namespace("fault-proxy").await;
    let direct: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let proxy = cp.fault_proxy();
    let proxied: Api<ConfigMap> = Api::namespaced(Client::try_from(proxy.config()).unwrap(), &ns);

    let version = proxied.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = proxied.watch(&WatchParams::default(), &version).await.unwrap().boxed();
    direct.create(&PostParams::default(), &config_map("before-cut", &[])).await.unwrap();
    next_added(&mut watch, "before-cut").await;

    proxy.cut();
    let after_cut = guarded("the watch to notice the cut", watch.next()).await;
    assert!(matches!(after_cut, Some(Err(_))), "expected a stream error after the cut, got {after_cut:?}");
    assert!(proxied.list(&ListParams::default()).await.is_err(), "a request through a cut proxy succeeded");

    proxy.restore();
    let version = proxied.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = proxied.watch(&WatchParams::default(), &version).await.unwrap().boxed();
    direct.create(&PostParams::default(), &config_map("after-restore", &[])).await.unwrap();
    next_added(&mut watch, "after-restore").await;
}

#[tokio::test]
async fn an_owned_apiserver_restarts_on_the_same_etcd_and_keeps_its_objects() {
    let Some(_) = ControlPlane::shared() else { return };
    let mut cp = ControlPlane::builder().start().unwrap();
    eprintln!("owned apiserver ready in {:?}", cp.apiserver_startup_time());
    let ns = cp.namespace("restart").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    api.create(&PostParams::default(), &config_map("survivor", &[("k", "v")])).await.unwrap();

    cp.stop_apiserver();
    assert!(api.get("survivor").await.is_err(), "a request succeeded with the apiserver stopped");

    cp.start_apiserver().unwrap();
    eprintln!("owned apiserver restarted in {:?}", cp.apiserver_startup_time());
    // The same client, made before the restart, reconnects.
    assert_eq!(api.get("survivor").await.unwrap().data.unwrap()["k"], "v");
}

#[tokio::test]
async fn a_watch_resumed_from_before_an_etcd_compaction_gets_410_gone() {
    let Some(_) = ControlPlane::shared() else { return };
    // Without the watch cache the apiserver serves watches from etcd, whose history compaction removes.
    let cp = ControlPlane::builder().apiserver_arg("--watch-cache=false").start().unwrap();
    let ns = cp.namespace("compaction").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.admin_client().await, &ns);
    let old = api.create(&PostParams::default(), &config_map("old", &[])).await.unwrap();
    // A watch from `old` starts one revision after it: two more writes put that revision below
    // the compaction point.
    for name in ["newer", "newest"] {
        api.create(&PostParams::default(), &config_map(name, &[])).await.unwrap();
    }

    cp.compact_etcd().await.unwrap();

    let old_version = old.metadata.resource_version.unwrap();
    let outcome = match api.watch(&WatchParams::default(), &old_version).await {
        Err(e) => Err(e),
        Ok(stream) => guarded("the first watch event", stream.boxed().try_next()).await,
    };
    match outcome {
        Ok(Some(WatchEvent::Error(status))) => assert_eq!(status.code, 410, "{status:?}"),
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}
