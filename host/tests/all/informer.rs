//! Informer behaviour against a real kube-apiserver + etcd (kubewasm-testenv).
//!
//! No timed assertions: every wait is for a condition, with a generous deadline.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
};
use kubewasm_host::informer::{
    CachedObject, Error, IndexFunc, Indexers, Informer, InformerParams, LABEL_INDEX, Notification,
    SharedInformerFactory,
};
use kubewasm_testenv::ControlPlane;
use prometheus::Registry;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const DEADLINE: Duration = Duration::from_secs(120);

fn configmap_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "ConfigMap")
}

fn factory(client: Client) -> SharedInformerFactory {
    // `RUST_LOG=kubewasm=debug cargo test --test all informer:: -- --nocapture` shows the
    // reflectors: the binary's one global subscriber prints what RUST_LOG asks for.
    crate::hotload_support::Spans::install();
    SharedInformerFactory::new(client, &Registry::new()).unwrap()
}

fn configmap(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": data})).unwrap()
}

async fn create(api: &Api<ConfigMap>, name: &str, data: serde_json::Value) -> ConfigMap {
    api.create(&PostParams::default(), &configmap(name, data)).await.unwrap()
}

async fn patch_data(api: &Api<ConfigMap>, name: &str, data: serde_json::Value) -> ConfigMap {
    let patch = serde_json::json!({"data": data});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap()
}

async fn synced(informer: &Informer) {
    tokio::time::timeout(DEADLINE, informer.wait_for_sync()).await.expect("informer synced in time").unwrap();
}

/// Waits until `cond` holds, polling; panics with `what` after the deadline.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(DEADLINE, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for: {what}");
}

async fn next(rx: &mut UnboundedReceiver<Notification>) -> Notification {
    tokio::time::timeout(DEADLINE, rx.recv()).await.expect("a notification in time").expect("channel open")
}

fn channel_handler() -> (impl Fn(Notification) + Send + Sync + 'static, UnboundedReceiver<Notification>) {
    let (tx, rx) = unbounded_channel();
    (move |n| drop(tx.send(n)), rx)
}

fn rv(o: &CachedObject) -> String {
    o.meta().resource_version.as_deref().unwrap_or_default().to_owned()
}

fn name(o: &CachedObject) -> String {
    o.name().to_owned()
}

#[tokio::test]
async fn initial_sync_lists_a_thousand_configmaps() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-sync").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    stream::iter(0..1000)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &configmap(&format!("cm-{i}"), serde_json::json!({"i": i.to_string()})),
                )
                .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();

    let informer = factory(client).informer(&configmap_gvk(), InformerParams::default().namespace(&ns)).await.unwrap();
    let (handler, mut rx) = channel_handler();
    let _reg = informer.add_event_handler(handler);
    synced(&informer).await;

    // Within the namespace: 1000 ours + kube-root-ca.crt (no controller-manager here, so maybe not).
    let cached = informer.store().list_selected(Some(&ns), "").unwrap();
    let ours = cached.iter().filter(|o| o.name().starts_with("cm-")).count();
    assert_eq!(ours, 1000);
    let body: serde_json::Value =
        serde_json::from_slice(informer.store().get_by_key(&format!("{ns}/cm-7")).unwrap().json()).unwrap();
    assert_eq!(body["kind"], "ConfigMap");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["data"]["i"], "7");
    assert!(body["metadata"].get("managedFields").is_none());

    let mut initial_adds = 0;
    while initial_adds < cached.len() {
        match next(&mut rx).await {
            Notification::Add { is_in_initial_list: true, .. } => initial_adds += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn create_update_delete_arrive_in_order_with_old_and_new() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-events").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let informer = factory(client).informer(&configmap_gvk(), InformerParams::default().namespace(&ns)).await.unwrap();
    synced(&informer).await;
    let (handler, mut rx) = channel_handler();
    let _reg = informer.add_event_handler(handler);
    // Drain the replay of what the namespace already holds (kube-root-ca.crt at most).
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        assert!(matches!(n, Notification::Add { is_in_initial_list: true, .. }), "{n:?}");
    }

    let created = create(&api, "a", serde_json::json!({"v": "1"})).await;
    let Notification::Add { obj, is_in_initial_list: false } = next(&mut rx).await else { panic!("want add") };
    assert_eq!((name(&obj), rv(&obj)), ("a".to_owned(), created.metadata.resource_version.clone().unwrap()));

    let updated = patch_data(&api, "a", serde_json::json!({"v": "2"})).await;
    let Notification::Update { old, new } = next(&mut rx).await else { panic!("want update") };
    assert_eq!(rv(&old), created.metadata.resource_version.unwrap());
    assert_eq!(rv(&new), updated.metadata.resource_version.clone().unwrap());
    assert_eq!(serde_json::from_slice::<serde_json::Value>(new.json()).unwrap()["data"]["v"], "2");

    api.delete("a", &DeleteParams::default()).await.unwrap();
    let Notification::Delete { obj, final_state_unknown } = next(&mut rx).await else { panic!("want delete") };
    assert!(!final_state_unknown);
    assert_eq!(name(&obj), "a");
    assert!(informer.store().get_by_key(&format!("{ns}/a")).is_none());
}

#[tokio::test]
async fn objects_deleted_while_the_watch_is_down_arrive_as_tombstones() {
    if ControlPlane::shared().is_none() {
        return;
    }
    // No watch cache, so a watch resumed after compaction gets 410 Gone from etcd and relists.
    let cp = ControlPlane::builder().apiserver_arg("--watch-cache=false").start().unwrap();
    let admin = cp.admin_client().await;
    let ns = cp.namespace("informer-tombstone").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for n in ["keep", "gone-1", "gone-2"] {
        create(&api, n, serde_json::json!({})).await;
    }
    let proxy = cp.fault_proxy();
    let registry = Registry::new();
    let informer = SharedInformerFactory::new(proxy.client().await, &registry)
        .unwrap()
        .informer(&configmap_gvk(), InformerParams::default().namespace(&ns))
        .await
        .unwrap();
    synced(&informer).await;
    let (handler, mut rx) = channel_handler();
    let _reg = informer.add_event_handler(handler);
    let mut replayed = 0;
    while replayed < informer.store().len() {
        assert!(matches!(next(&mut rx).await, Notification::Add { .. }));
        replayed += 1;
    }

    proxy.cut();
    api.delete("gone-1", &DeleteParams::default()).await.unwrap();
    api.delete("gone-2", &DeleteParams::default()).await.unwrap();
    create(&api, "new", serde_json::json!({})).await;
    cp.compact_etcd().await.unwrap();
    proxy.restore();

    let mut tombstones = Vec::new();
    let mut added = Vec::new();
    while tombstones.len() < 2 || added.is_empty() {
        match next(&mut rx).await {
            Notification::Delete { obj, final_state_unknown } => {
                assert!(final_state_unknown, "{} was deleted while the watch was down", name(&obj));
                tombstones.push(name(&obj));
            }
            Notification::Add { obj, .. } => added.push(name(&obj)),
            Notification::Update { new, .. } => panic!("unexpected update of {}", name(&new)),
        }
    }
    tombstones.sort();
    assert_eq!(tombstones, ["gone-1", "gone-2"]);
    assert_eq!(added, ["new"]);
    let mut keys = informer.store().list_keys();
    keys.retain(|k| !k.ends_with("kube-root-ca.crt"));
    keys.sort();
    assert_eq!(keys, [format!("{ns}/keep"), format!("{ns}/new")]);
    assert_eq!(metric(&registry, "kubewasm_informer_relists_total"), 1.0);
    assert_eq!(metric(&registry, "kubewasm_informer_objects"), informer.store().len() as f64);
}

/// Sum of every series of metric `name` in `registry`.
fn metric(registry: &Registry, name: &str) -> f64 {
    let mut text = Vec::new();
    prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &registry.gather(), &mut text).unwrap();
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_server_that_refuses_streaming_lists_is_listed_with_pages() {
    if ControlPlane::shared().is_none() {
        return;
    }
    let cp = ControlPlane::builder().apiserver_arg("--feature-gates=WatchList=false").start().unwrap();
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-paged").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        create(&api, &format!("cm-{i}"), serde_json::json!({})).await;
    }
    let registry = Registry::new();
    let informer = SharedInformerFactory::new(client, &registry)
        .unwrap()
        .informer(&configmap_gvk(), InformerParams::default().namespace(&ns))
        .await
        .unwrap();
    synced(&informer).await;
    assert!(informer.store().get_by_key(&format!("{ns}/cm-2")).is_some());
    assert_eq!(metric(&registry, "kubewasm_informer_watch_errors_total"), 1.0, "one refused streaming list");
    assert_eq!(metric(&registry, "kubewasm_informer_lists_total"), 1.0, "only the paged list ran");
}

#[tokio::test]
async fn an_update_that_moves_an_object_between_index_values_moves_it_in_the_index() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-index").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let informer = factory(client).informer(&configmap_gvk(), InformerParams::default().namespace(&ns)).await.unwrap();
    synced(&informer).await;
    informer.add_indexers(Indexers::from([("color".to_owned(), IndexFunc::field_path("data.color"))])).unwrap();

    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "paint", "labels": {"tier": "a"}}, "data": {"color": "red"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let store = informer.store().clone();
    eventually("paint indexed under red", || store.index_keys("color", "red").unwrap().len() == 1).await;

    let patch = serde_json::json!({"metadata": {"labels": {"tier": "b"}}, "data": {"color": "blue"}});
    api.patch("paint", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually("paint indexed under blue", || store.index_keys("color", "blue").unwrap().len() == 1).await;
    assert!(store.index_keys("color", "red").unwrap().is_empty());
    assert!(!store.list_index_values("color").unwrap().contains(&"red".to_owned()));
    assert!(store.by_index(LABEL_INDEX, "tier=a").unwrap().is_empty());
    assert_eq!(store.by_index(LABEL_INDEX, "tier=b").unwrap().len(), 1);
    assert_eq!(store.list_selected(Some(&ns), "tier in (b,c)").unwrap().len(), 1);
}

/// Open WATCH requests for `resource`, from the apiserver's `apiserver_longrunning_requests`
/// gauge (`apiserver_request_total` counts a watch only when it ends).
async fn open_watches(client: &Client, resource: &str) -> u64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_longrunning_requests{"))
        .filter(|l| l.contains(r#"verb="WATCH""#) && l.contains(&format!(r#"resource="{resource}""#)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test]
async fn two_consumers_share_one_watch_and_the_last_to_leave_stops_it() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-shared").await;
    // PodTemplates: no other test (and no controller, envtest-style) watches them.
    let gvk = GroupVersionKind::gvk("", "v1", "PodTemplate");
    assert_eq!(open_watches(&client, "podtemplates").await, 0);
    let factory = factory(client.clone());
    let first = factory.informer(&gvk, InformerParams::default()).await.unwrap();
    let second = factory.informer(&gvk, InformerParams::default()).await.unwrap();
    assert_eq!(first.handle_count(), 2, "asking twice returns the same informer");
    assert_eq!(factory.running().await, 1);
    let (h1, mut rx1) = channel_handler();
    let (h2, mut rx2) = channel_handler();
    let reg1 = first.add_event_handler(h1);
    let reg2 = second.add_event_handler(h2);
    synced(&first).await;

    let pt: PodTemplate = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pt"},
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    }))
    .unwrap();
    Api::<PodTemplate>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pt).await.unwrap();
    for rx in [&mut rx1, &mut rx2] {
        let Notification::Add { obj, .. } = next(rx).await else { panic!("want add") };
        assert_eq!(name(&obj), "pt");
    }
    // The watch is open once the add arrived (the initial list may have been a LIST).
    assert_eq!(open_watches(&client, "podtemplates").await, 1, "two consumers, one WATCH");

    drop((first, reg1));
    assert_eq!(factory.running().await, 1, "one consumer is left");
    drop((second, reg2));
    assert_eq!(factory.running().await, 0);
    tokio::time::timeout(DEADLINE, async {
        while open_watches(&client, "podtemplates").await != 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the watch is closed once the last consumer left");
}

#[tokio::test]
async fn a_late_subscriber_first_receives_every_cached_object() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-late").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for i in 0..5 {
        create(&api, &format!("early-{i}"), serde_json::json!({})).await;
    }
    let informer = factory(client).informer(&configmap_gvk(), InformerParams::default().namespace(&ns)).await.unwrap();
    synced(&informer).await;
    // Synced is the first list delivered, which the API server may serve from its watch cache a
    // write or two behind (client-go's semantics); the rest arrives by the watch.
    eventually("the five cached", || (0..5).all(|i| informer.store().get(Some(&ns), &format!("early-{i}")).is_some()))
        .await;

    let (handler, mut rx) = channel_handler();
    let _late = informer.add_event_handler(handler);
    let mut replayed = Vec::new();
    for _ in 0..informer.store().len() {
        let Notification::Add { obj, is_in_initial_list: true } = next(&mut rx).await else { panic!("want replay") };
        replayed.push(name(&obj));
    }
    replayed.retain(|n| n.starts_with("early-"));
    replayed.sort();
    assert_eq!(replayed, (0..5).map(|i| format!("early-{i}")).collect::<Vec<_>>());

    create(&api, "later", serde_json::json!({})).await;
    let Notification::Add { obj, is_in_initial_list: false } = next(&mut rx).await else { panic!("want add") };
    assert_eq!(name(&obj), "later");
}

#[tokio::test]
async fn a_crd_installed_after_start_becomes_watchable() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-crd").await;
    let group = format!("{ns}.kubewasm.test");
    let gvk = GroupVersionKind::gvk(&group, "v1", "Widget");
    let factory = factory(client.clone());
    assert!(matches!(factory.informer_for(&gvk).await, Err(Error::KindNotFound { .. })));

    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();

    let informer = tokio::time::timeout(DEADLINE, async {
        loop {
            match factory.informer_for(&gvk).await {
                Ok(informer) => return informer,
                Err(Error::KindNotFound { .. }) => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(other) => panic!("{other}"),
            }
        }
    })
    .await
    .expect("the CRD is served in time");
    let (handler, mut rx) = channel_handler();
    let _reg = informer.add_event_handler(handler);
    synced(&informer).await;

    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widget: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w1", "namespace": ns}, "spec": {"size": 3}
    }))
    .unwrap();
    // The CRD may take a moment to accept writes after discovery lists it.
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    tokio::time::timeout(DEADLINE, async {
        while widgets.create(&PostParams::default(), &widget).await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the widget is created in time");
    let Notification::Add { obj, .. } = next(&mut rx).await else { panic!("want add") };
    let body: serde_json::Value = serde_json::from_slice(obj.json()).unwrap();
    assert_eq!(body["kind"], "Widget");
    assert_eq!(body["spec"]["size"], 3);
    assert_eq!(informer.store().get_by_key(&format!("{ns}/w1")).map(|o| o.name().to_owned()), Some("w1".to_owned()));
}

/// A CRD of `group` serving `versions` (the first stored), its plural `plural`, any schema.
async fn install_crd(client: &Client, group: &str, kind: &str, plural: &str, versions: &[&str]) {
    let versions: Vec<_> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            serde_json::json!({"name": v, "served": true, "storage": i == 0,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced", "versions": versions,
            "names": {"plural": plural, "kind": kind, "listKind": format!("{kind}List")}}
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await.unwrap();
}

/// Asks `discovery` until it serves `gvk` (a new CRD is served a moment after it is created).
async fn served(discovery: &kubewasm_host::informer::Discovery, gvk: &GroupVersionKind) {
    tokio::time::timeout(DEADLINE, async {
        while discovery.resolve(gvk).await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the CRD is served in time");
}

#[tokio::test]
async fn two_versions_of_one_crd_are_cached_each_in_its_own_version() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-versions").await;
    let group = format!("{ns}.kubewasm.test");
    install_crd(&client, &group, "Gizmo", "gizmos", &["v1", "v2"]).await;
    let factory = factory(client.clone());
    let (v1, v2) = (GroupVersionKind::gvk(&group, "v1", "Gizmo"), GroupVersionKind::gvk(&group, "v2", "Gizmo"));
    served(factory.discovery(), &v1).await;
    served(factory.discovery(), &v2).await;
    let (old, new) = (factory.informer_for(&v1).await.unwrap(), factory.informer_for(&v2).await.unwrap());
    synced(&old).await;
    synced(&new).await;

    let gizmo: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gizmo", "metadata": {"name": "g1", "namespace": ns}
    }))
    .unwrap();
    let resource = factory.discovery().resolve(&v1).await.unwrap().resource;
    Api::<DynamicObject>::namespaced_with(client, &ns, &resource).create(&PostParams::default(), &gizmo).await.unwrap();
    let key = format!("{ns}/g1");
    eventually("both informers cache the gizmo", || {
        old.store().get_by_key(&key).is_some() && new.store().get_by_key(&key).is_some()
    })
    .await;
    let api_version = |informer: &Informer| {
        let object = informer.store().get_by_key(&key).unwrap();
        serde_json::from_slice::<serde_json::Value>(object.json()).unwrap()["apiVersion"].clone()
    };
    assert_eq!(api_version(&old), format!("{group}/v1"));
    assert_eq!(api_version(&new), format!("{group}/v2"));
}

#[tokio::test]
async fn rbac_names_a_crd_by_the_plural_the_api_server_serves_not_a_guess() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("informer-plural").await;
    let group = format!("{ns}.kubewasm.test");
    install_crd(&client, &group, "Octopus", "octopodes", &["v1"]).await;
    let factory = factory(client);
    served(factory.discovery(), &GroupVersionKind::gvk(&group, "v1", "Octopus")).await;
    use kubewasm_host::plugin::grants::{GrantConfig, Grants, KindRef};
    // A plugin reconciling octopodes.
    let registration =
        kubewasm_host::plugin::registration::Registration::new(GroupVersionKind::gvk(&group, "v1", "Octopus"));
    let grants = Grants::resolve(&registration, &GrantConfig::approving_requests()).unwrap();
    let kind = KindRef { group: group.clone(), kind: "Octopus".into() };
    assert_ne!(kubewasm_host::rbac::ResourceNames::guessed().plural(&kind), "octopodes", "kube would guess otherwise");
    let names = kubewasm_host::rbac::ResourceNames::discovered(factory.discovery(), &grants).await;
    assert_eq!(names.plural(&kind), "octopodes");
}
