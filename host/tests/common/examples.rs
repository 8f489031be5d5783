//! The three example plugins as deploy/overlays/examples runs them, and what "converged" means
//! for each (the checks of the controller tests, against any host process).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;

use super::{eventually, plugin_dir};

/// How long a plugin may take to converge (generous: the machine is shared).
pub const CONVERGE: Duration = Duration::from_secs(90);

/// The repository's `deploy/` directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Example plugin `name`'s operator config, as deploy/overlays/examples mounts it beside it.
pub fn example_config(name: &str) -> String {
    let path = deploy_dir().join(format!("overlays/examples/plugins/{name}.yaml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Copies the example components into `dir` as `<name>.wasm`, each with its [`example_config`].
pub fn install_examples(dir: &Path) {
    for name in ["namespace-defaults", "config-reloader", "configmap-sync"] {
        super::install_plugin_verbatim(dir, name, &format!("{}.wasm", name.replace('-', "_")), &example_config(name));
    }
    assert!(plugin_dir().is_dir());
}

/// Installs (server-side applies) the WasmPlugin CRD the host generates and waits until it is
/// established.
pub async fn install_wasm_plugin_crd(client: &Client) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd = kubewasm_host::hotload::crd();
    crds.patch("wasmplugins.kubewasm.dev", &PatchParams::apply("kubewasm-test").force(), &Patch::Apply(crd))
        .await
        .unwrap();
    crd_established(client, "wasmplugins.kubewasm.dev").await;
}

/// Server-side applies the ConfigMap `name` in `ns` holding WasmPlugin modules: each entry is a
/// `binaryData` key and its bytes.
pub async fn put_module_config_map(client: &Client, ns: &str, name: &str, entries: &[(&str, &[u8])]) {
    let binary = entries.iter().map(|(key, bytes)| ((*key).to_owned(), k8s_openapi::ByteString(bytes.to_vec())));
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        binary_data: Some(binary.collect()),
        ..Default::default()
    };
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    api.patch(name, &PatchParams::apply("kubewasm-test").force(), &Patch::Apply(&cm)).await.unwrap();
}

/// Waits until CRD `name` is established.
pub async fn crd_established(client: &Client, name: &str) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    eventually(&format!("CRD {name} established"), CONVERGE, || async {
        let conditions = crds.get_opt(name).await.ok()??.status?.conditions?;
        conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
}

/// The example CRD `deploy/crds/examples/<file>` applied and established (its name `crd`), and
/// the API of its `kind` in namespace `ns`.
pub async fn example_crd(
    cp: &kubewasm_testenv::ControlPlane,
    client: &Client,
    file: &str,
    crd: &str,
    kind: GroupVersionKind,
    ns: &str,
) -> Api<DynamicObject> {
    let path = deploy_dir().join("crds/examples").join(file);
    let applied = cp.kubectl().args(["apply", "--server-side", "-f"]).arg(&path).output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    crd_established(client, crd).await;
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&kind))
}

/// Creates the Namespace `name` with `labels`.
pub async fn create_namespace(client: &Client, name: &str, labels: serde_json::Value) {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

/// All three example plugins converge on fresh objects named after `id` (the examples overlay
/// running, by whatever binary).
pub async fn all_converge(client: &Client, id: &str) {
    namespace_defaults_converges(client, &format!("nd-{id}")).await;
    config_reloader_converges(client, &format!("cr-{id}")).await;
    configmap_sync_converges(client, id).await;
}

/// namespace-defaults: a new namespace gets its quota (from the overlay's config), its
/// default-deny policy and an event; a deleted quota comes back; opting out removes both.
pub async fn namespace_defaults_converges(client: &Client, ns: &str) {
    create_namespace(client, ns, serde_json::json!({})).await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), ns);
    let quota =
        eventually("the default quota", CONVERGE, || async { quotas.get_opt("default-quota").await.unwrap() }).await;
    assert_eq!(quota.spec.unwrap().hard.unwrap()["pods"].0, "20", "the overlay's config was used");
    eventually("the default-deny policy", CONVERGE, || async { policies.get_opt("default-deny").await.unwrap() }).await;
    quotas.delete("default-quota", &DeleteParams::default()).await.unwrap();
    eventually("the quota re-created", CONVERGE, || async { quotas.get_opt("default-quota").await.unwrap() }).await;
    let events = Api::<Event>::all(client.clone());
    eventually("a DefaultsApplied event about the namespace", CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("DefaultsApplied")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ns)
        })
    })
    .await;
    let label = serde_json::json!({"metadata": {"labels": {"kubewasm.dev/no-defaults": "true"}}});
    Api::<Namespace>::all(client.clone()).patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    eventually("the defaults removed after opt-out", CONVERGE, || async {
        let gone = quotas.get_opt("default-quota").await.unwrap().is_none()
            && policies.get_opt("default-deny").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
}

fn config_hash(d: &Deployment) -> Option<String> {
    d.spec.template.metadata.as_ref()?.annotations.as_ref()?.get("kubewasm.dev/config-hash").cloned()
}

/// config-reloader: a labelled Deployment gets its ConfigMap's hash, and a new one when the
/// ConfigMap changes.
pub async fn config_reloader_converges(client: &Client, ns: &str) {
    create_namespace(client, ns, serde_json::json!({"kubewasm.dev/no-defaults": "true"})).await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "app-config"}, "data": {"mode": "a"}})).unwrap();
    configmaps.create(&PostParams::default(), &cm).await.unwrap();
    let web: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "labels": {"kubewasm.dev/reload": "true"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1",
                                     "envFrom": [{"configMapRef": {"name": "app-config"}}]}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &web).await.unwrap();
    let first =
        eventually("the first hash on web", CONVERGE, || async { config_hash(&deployments.get("web").await.unwrap()) })
            .await;
    let change = serde_json::json!({"data": {"mode": "b"}});
    configmaps.patch("app-config", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    eventually("a new hash on web after the ConfigMap changed", CONVERGE, || async {
        config_hash(&deployments.get("web").await.unwrap()).filter(|h| *h != first)
    })
    .await;
}

/// Creates ConfigMapSync `sync-<id>` copying `<src>/shared` into namespaces labelled
/// `kubewasm-test=<id>`; returns the API for ConfigMapSyncs and the object's name.
pub async fn create_config_map_sync(client: &Client, id: &str, src: &str) -> (Api<DynamicObject>, String) {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("examples.kubewasm.dev", "v1alpha1", "ConfigMapSync"));
    let syncs = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let name = format!("sync-{id}");
    let sync: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "examples.kubewasm.dev/v1alpha1", "kind": "ConfigMapSync", "metadata": {"name": name},
        "spec": {"source": {"namespace": src, "name": "shared"}, "namespaceSelector": format!("kubewasm-test={id}")}}))
    .unwrap();
    syncs.create(&PostParams::default(), &sync).await.unwrap();
    (syncs, name)
}

/// configmap-sync: copies into matching namespaces, `Ready` status with the count, and the
/// copies and the finalizer gone after the ConfigMapSync is deleted. `id` makes names unique.
pub async fn configmap_sync_converges(client: &Client, id: &str) {
    let opted_out = serde_json::json!({"kubewasm.dev/no-defaults": "true"});
    let src = format!("cms-src-{id}");
    create_namespace(client, &src, opted_out.clone()).await;
    let shared: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "shared"}, "data": {"greeting": "hello"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &src).create(&PostParams::default(), &shared).await.unwrap();
    let targets = [format!("cms-a-{id}"), format!("cms-b-{id}")];
    for ns in &targets {
        create_namespace(client, ns, serde_json::json!({"kubewasm-test": id, "kubewasm.dev/no-defaults": "true"}))
            .await;
    }
    let (syncs, name) = create_config_map_sync(client, id, &src).await;
    let copies = || async {
        let mut found = 0;
        for ns in &targets {
            found += usize::from(
                Api::<ConfigMap>::namespaced(client.clone(), ns).get_opt("shared").await.unwrap().is_some(),
            );
        }
        found
    };
    eventually("a copy in each matching namespace", CONVERGE, || async { (copies().await == 2).then_some(()) }).await;
    eventually("status: Ready, 2 synced", CONVERGE, || async {
        let s = syncs.get(&name).await.ok()?;
        let ready = s.data.pointer("/status/conditions/0/status").and_then(|v| v.as_str()) == Some("True");
        (ready && s.data.pointer("/status/syncedCount").and_then(|v| v.as_i64()) == Some(2)).then_some(())
    })
    .await;
    syncs.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually("copies removed and the ConfigMapSync gone", CONVERGE, || async {
        (copies().await == 0 && syncs.get_opt(&name).await.unwrap().is_none()).then_some(())
    })
    .await;
}
