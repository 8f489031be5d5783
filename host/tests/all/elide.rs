//! Elision of applies that would change nothing, against a real kube-apiserver: each scenario
//! runs with elision on and off, and must leave the same objects and field ownership, with
//! fewer requests sent when on.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch as KubePatch, PatchParams};
use kube::core::GroupVersionKind;
use kubewasm_host::controller::PluginCache;
use kubewasm_host::informer::{CachedObject, Informer, SharedInformerFactory};
use kubewasm_host::plugin::api::{ApiWriterExt, CacheReader, CallError, Caller, FIELD_MANAGER_PREFIX, TypedObject};
use kubewasm_host::plugin::metrics::PluginMetrics;
use kubewasm_host::writer::KubeWriter;
use kubewasm_host::writer::elide::{ElidingWriter, Elision};
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::{eventually, metric_value};

const SYNC: Duration = Duration::from_secs(30);
const PLUGIN: &str = "elide-e2e";

fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// One plugin's write path over the real API server: a live cache of `kind` keeping kubewasm's
/// managedFields entries, and elision on or off.
struct Harness {
    client: kube::Client,
    kind: GroupVersionKind,
    informer: Informer,
    writer: ElidingWriter,
    registry: prometheus::Registry,
    caller: Caller,
}

impl Harness {
    async fn new(client: &kube::Client, api_version: &str, kind: &str, elide: bool) -> Self {
        let registry = prometheus::Registry::new();
        let factory =
            SharedInformerFactory::new(client.clone(), &registry).unwrap().keep_managers(FIELD_MANAGER_PREFIX);
        let kind = gvk(api_version, kind);
        let informer = factory.informer_for(&kind).await.unwrap();
        tokio::time::timeout(SYNC, informer.wait_for_sync()).await.expect("the cache syncs").unwrap();
        let cache = PluginCache::new(PLUGIN);
        cache.insert(informer.clone());
        Self::over(client, kind, informer, Arc::new(cache), elide, registry)
    }

    /// A harness whose plugin reads `cache` (e.g. a frozen copy).
    fn over(
        client: &kube::Client,
        kind: GroupVersionKind,
        informer: Informer,
        cache: Arc<dyn CacheReader>,
        elide: bool,
        registry: prometheus::Registry,
    ) -> Self {
        let elision = Elision::new(elide, PluginMetrics::register(&registry).unwrap());
        let writer = elision.writer(Arc::new(KubeWriter::new(client.clone())), cache, true);
        Self { client: client.clone(), kind, informer, writer, registry, caller: Caller::new(PLUGIN) }
    }

    async fn apply(&self, body: &Value, force: bool) -> Result<Value, CallError> {
        let object = TypedObject::from_json(&serde_json::to_vec(body).unwrap()).unwrap();
        let stored = self.writer.apply(&self.caller, object, force).await?;
        Ok(serde_json::from_slice(&stored).unwrap())
    }

    async fn apply_status(&self, body: &Value) -> Result<Value, CallError> {
        let object = TypedObject::from_json(&serde_json::to_vec(body).unwrap()).unwrap();
        let stored = self.writer.apply_status(&self.caller, object, true).await?;
        Ok(serde_json::from_slice(&stored).unwrap())
    }

    /// Waits until the cache holds `object` at its resourceVersion.
    async fn caught_up(&self, object: &Value) {
        let (ns, name) = (object["metadata"]["namespace"].as_str(), object["metadata"]["name"].as_str().unwrap());
        let rv = object["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        eventually("the cache to show the write", SYNC, || async {
            let cached = self.informer.store().get(ns, name)?;
            (cached.meta().resource_version.as_deref() == Some(rv.as_str())).then_some(())
        })
        .await;
    }

    /// Applies sent to the API server and answered from the cache.
    fn counts(&self) -> (f64, f64) {
        let text = prometheus::TextEncoder::new().encode_to_string(&self.registry.gather()).unwrap();
        let count = |outcome| {
            metric_value(&text, "kubewasm_plugin_writes_total", &[("plugin", PLUGIN), ("outcome", outcome)])
                .unwrap_or(0.0)
        };
        (count("sent"), count("unchanged"))
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk(&self.kind);
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }

    /// What the API server holds now: every field but the server's bookkeeping, and who owns what.
    async fn state(&self, namespace: &str, name: &str) -> Value {
        let object = self.api(namespace).get(name).await.unwrap();
        let mut value = serde_json::to_value(&object).unwrap();
        let meta = value["metadata"].take();
        let owners: Vec<Value> = meta["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| json!([m["manager"], m["operation"], m["subresource"], m["fieldsV1"]]))
            .collect();
        value["metadata"] = json!({"labels": meta["labels"], "owners": owners});
        value
    }
}

fn config_map(ns: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elided", "namespace": ns}, "data": data})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_removed_from_the_body_is_removed_from_the_object() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let mut states = Vec::new();
    for elide in [true, false] {
        let ns = cp.namespace("elide-drop").await;
        let h = Harness::new(&client, "v1", "ConfigMap", elide).await;
        h.caught_up(&h.apply(&config_map(&ns, json!({"a": "1", "b": "2"})), false).await.unwrap()).await;
        let dropped = h.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap();
        assert_eq!(dropped["data"], json!({"a": "1"}), "elide {elide}: b is gone");
        h.caught_up(&dropped).await;
        h.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap();
        let expected = if elide { (2.0, 1.0) } else { (3.0, 0.0) };
        assert_eq!(h.counts(), expected, "elide {elide}: only the apply again changes nothing");
        states.push(h.state(&ns, "elided").await);
    }
    assert_eq!(states[0], states[1], "the same object and ownership either way");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_another_manager_changed_conflicts_without_force_and_is_taken_back_with_it() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let mut states = Vec::new();
    for elide in [true, false] {
        let ns = cp.namespace("elide-steal").await;
        let h = Harness::new(&client, "v1", "ConfigMap", elide).await;
        h.caught_up(&h.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap()).await;
        let params = PatchParams::apply("someone-else").force();
        let theirs = config_map(&ns, json!({"a": "2"}));
        let stolen = h.api(&ns).patch("elided", &params, &KubePatch::Apply(&theirs)).await.unwrap();
        h.caught_up(&serde_json::to_value(&stolen).unwrap()).await;
        let refused = h.apply(&config_map(&ns, json!({"a": "1"})), false).await;
        assert!(matches!(refused, Err(CallError::Conflict(_))), "elide {elide}: {refused:?}");
        let back = h.apply(&config_map(&ns, json!({"a": "1"})), true).await.unwrap();
        assert_eq!(back["data"]["a"], "1", "elide {elide}");
        assert_eq!(h.counts(), (3.0, 0.0), "elide {elide}: nothing here may be elided");
        states.push(h.state(&ns, "elided").await);
    }
    assert_eq!(states[0], states[1]);
}

fn quota(ns: &str, status: bool) -> Value {
    let mut quota =
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "elided", "namespace": ns}});
    if status {
        quota["status"] = json!({"hard": {"pods": "5", "requests.cpu": "1000m"}, "used": {"pods": "0"}});
    } else {
        quota["spec"] = json!({"hard": {"pods": "5", "requests.cpu": "1000m", "requests.memory": "1024Mi"}});
    }
    quota
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_apply_and_quantities_the_server_normalises_are_elided_when_applied_again() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let mut states = Vec::new();
    for elide in [true, false] {
        let ns = cp.namespace("elide-status").await;
        let h = Harness::new(&client, "v1", "ResourceQuota", elide).await;
        let stored = h.apply(&quota(&ns, false), false).await.unwrap();
        assert_eq!(stored["spec"]["hard"]["requests.cpu"], "1", "the server keeps canonical quantities");
        h.caught_up(&stored).await;
        h.caught_up(&h.apply_status(&quota(&ns, true)).await.unwrap()).await;
        h.apply(&quota(&ns, false), false).await.unwrap();
        let status = h.apply_status(&quota(&ns, true)).await.unwrap();
        assert_eq!(status["status"]["used"]["pods"], "0", "elide {elide}");
        let expected = if elide { (2.0, 2.0) } else { (4.0, 0.0) };
        assert_eq!(h.counts(), expected, "elide {elide}");
        states.push(h.state(&ns, "elided").await);
    }
    assert_eq!(states[0], states[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_right_after_the_plugins_own_write_is_sent_while_the_cache_lags() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("elide-lag").await;
    let live = Harness::new(&client, "v1", "ConfigMap", true).await;
    live.caught_up(&live.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap()).await;
    // A cache frozen at this state: it never sees the writes that follow.
    let frozen = |h: &Harness| {
        let cached = h.informer.store().get(Some(&ns), "elided").unwrap();
        let informer = Informer::seeded(&h.kind, [copy_of(&cached)]).unwrap();
        let cache = PluginCache::new(PLUGIN);
        cache.insert(informer.clone());
        Harness::over(&client, h.kind.clone(), informer, Arc::new(cache), true, prometheus::Registry::new())
    };
    let fresh = frozen(&live);
    fresh.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap();
    assert_eq!(fresh.counts(), (0.0, 1.0), "the frozen cache can vouch for the state it holds");

    let lagging = frozen(&live);
    lagging.apply(&config_map(&ns, json!({"a": "2"})), false).await.unwrap();
    let back = lagging.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap();
    assert_eq!(lagging.counts(), (2.0, 0.0), "the cache has not seen the plugin's own last write");
    assert_eq!(back["data"]["a"], "1");
    let stored = live.api(&ns).get("elided").await.unwrap();
    assert_eq!(stored.data["data"]["a"], "1", "the API server has the last apply");
}

/// A copy of a cached object, as the cache holds it (JSON and kept managedFields entries).
fn copy_of(cached: &CachedObject) -> CachedObject {
    let managed = cached.managed_fields().map(<[u8]>::to_vec);
    CachedObject::from_json(cached.json().to_vec()).unwrap().with_managed_fields(managed)
}

fn policy(ns: &str) -> Value {
    // No policyTypes: the API server defaults them to [Ingress].
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "elided", "namespace": ns,
        "labels": {"app": "x"}}, "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "x"}}}]}]}})
}

fn deployment(ns: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "elided", "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_the_server_defaults_still_let_the_second_apply_be_elided() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for (api_version, kind, body) in
        [("networking.k8s.io/v1", "NetworkPolicy", policy as fn(&str) -> Value), ("apps/v1", "Deployment", deployment)]
    {
        let mut states = Vec::new();
        for elide in [true, false] {
            let ns = cp.namespace("elide-defaults").await;
            let h = Harness::new(&client, api_version, kind, elide).await;
            let stored = h.apply(&body(&ns), false).await.unwrap();
            h.caught_up(&stored).await;
            let again = h.apply(&body(&ns), false).await.unwrap();
            assert_eq!(again["spec"], stored["spec"], "{kind} elide {elide}");
            let expected = if elide { (1.0, 1.0) } else { (2.0, 0.0) };
            assert_eq!(h.counts(), expected, "{kind} elide {elide}: {}", stored["spec"]);
            states.push(h.state(&ns, "elided").await);
        }
        assert_eq!(states[0], states[1], "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_cold_cache_elides_from_the_listed_managed_fields() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("elide-restart").await;
    {
        let before = Harness::new(&client, "v1", "ConfigMap", true).await;
        before.apply(&config_map(&ns, json!({"a": "1", "b": "2"})), false).await.unwrap();
    }
    // A new cache and no memory of the writes: what a restarted host has.
    let after = Harness::new(&client, "v1", "ConfigMap", true).await;
    after.apply(&config_map(&ns, json!({"a": "1", "b": "2"})), false).await.unwrap();
    assert_eq!(after.counts(), (0.0, 1.0), "the listed managedFields vouch for the apply");
    let dropped = after.apply(&config_map(&ns, json!({"a": "1"})), false).await.unwrap();
    assert_eq!((after.counts(), dropped["data"].clone()), ((1.0, 1.0), json!({"a": "1"})));
}

/// namespace-defaults' applies and how they went: (sent, unchanged).
fn nd_writes(app: &kubewasm_host::app::App) -> (f64, f64) {
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let count = |outcome| {
        let labels = [("plugin", "namespace-defaults"), ("outcome", outcome)];
        metric_value(&text, "kubewasm_plugin_writes_total", &labels).unwrap_or(0.0)
    };
    (count("sent"), count("unchanged"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_defaults_reapplying_its_unchanged_children_sends_nothing() {
    use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
    use k8s_openapi::api::networking::v1::NetworkPolicy;

    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for elide in [true, false] {
        let ns = cp.namespace("elide-nd").await;
        let config = format!("grants: {{namespaces: {{names: [{ns}]}}}}\nelideUnchangedWrites: {elide}\n");
        let file = common::fixture_file("namespace-defaults", "namespace_defaults.wasm", &config);
        let mut app = common::app(&client);
        app.add_plugin(&file).await.unwrap();
        let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
        let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns);
        eventually("the quota and the policy", SYNC * 2, || async {
            let both = quotas.get_opt("default-quota").await.unwrap().is_some()
                && policies.get_opt("default-deny").await.unwrap().is_some();
            both.then_some(())
        })
        .await;
        // The children's own watch events queue the Namespace again: a second pass re-applies both.
        let settled = eventually("the second pass over the namespace", SYNC, || async {
            let (sent, unchanged) = nd_writes(&app);
            (sent + unchanged >= 4.0).then_some((sent, unchanged))
        })
        .await;
        eprintln!("namespace-defaults, elision {elide}: (sent, unchanged) after converging = {settled:?}");
        // Any later reconcile re-applies the same two objects.
        let label = json!({"metadata": {"labels": {"elide-e2e/touched": "yes"}}});
        let namespaces = Api::<Namespace>::all(client.clone());
        namespaces.patch(&ns, &PatchParams::default(), &KubePatch::Merge(&label)).await.unwrap();
        let after = eventually("a reconcile after the label", SYNC, || async {
            let (sent, unchanged) = nd_writes(&app);
            (sent + unchanged >= settled.0 + settled.1 + 2.0).then_some((sent, unchanged))
        })
        .await;
        eprintln!("namespace-defaults, elision {elide}: (sent, unchanged) after one more reconcile = {after:?}");
        if elide {
            assert!(settled.1 >= 1.0, "the second pass is answered from the cache: {settled:?}");
            assert_eq!(after.0, settled.0, "nothing more is sent once the cache holds both: {after:?}");
        } else {
            assert_eq!((settled.1, after.1), (0.0, 0.0), "the plugin's setting turns elision off");
            assert!(after.0 >= settled.0 + 2.0);
        }
        assert!(app.shut_down(Duration::from_secs(10)).await);

        // A restarted host: cold caches, no memory of its writes, every Namespace reconciled again.
        let mut restarted = common::app(&client);
        restarted.add_plugin(&file).await.unwrap();
        let again = eventually("the reconcile after the restart", SYNC * 2, || async {
            let (sent, unchanged) = nd_writes(&restarted);
            (sent + unchanged >= 2.0).then_some((sent, unchanged))
        })
        .await;
        eprintln!("namespace-defaults, elision {elide}: (sent, unchanged) after a restart = {again:?}");
        // The initial lists of the Namespace and of its children may each queue it: one pass or two.
        let (sent, unchanged) = again;
        if elide {
            assert_eq!(sent, 0.0, "a cold cache vouches for both children: {again:?}");
        } else {
            assert_eq!(unchanged, 0.0, "{again:?}");
        }
        assert!(restarted.shut_down(Duration::from_secs(10)).await);
    }
}
