//! The reflector against a scripted API server (tower-test): the two cases a real server cannot
//! be made to produce on demand — a 410 Gone *in the middle* of a watch stream, and malformed
//! watch events. Everything else is tested against the real kube-apiserver (host/tests/all/informer.rs).

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use kube::api::{Api, ApiResource};
use kube::client::Body;
use kube::core::GroupVersionKind;
use prometheus::Registry;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tower_test::mock::{self, Handle};

use super::*;
use crate::factory::{InformerKey, InformerParams};
use crate::metrics::InformerMetrics;
use crate::shared_informer::{Informer, InformerInner, Shared};
use crate::{Notification, ReflectorConfig};

type Server = Handle<Request<Body>, Response<Body>>;

/// An informer whose reflector talks to the returned scripted server; paginated lists.
fn informer() -> (Informer, Server) {
    informer_with(None)
}

/// [`informer`], sharded when `shard` is set.
fn informer_with(shard: Option<ReflectorShard>) -> (Informer, Server) {
    let (service, server) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let resource = ApiResource::from_gvk(&gvk);
    let reflector = Reflector {
        api: Api::<super::RawObject>::all_with(client, &resource),
        resource,
        label_selector: None,
        field_selector: None,
        config: ReflectorConfig { list_strategy: ListStrategy::Paginated, ..ReflectorConfig::default() },
        streaming: false,
        shard,
    };
    let metrics = Arc::new(InformerMetrics::register(&Registry::new()).unwrap());
    let shared = Arc::new(Shared::new(gvk.clone(), metrics));
    let task = tokio::spawn(reflector.run(shared.clone())).abort_handle();
    let key = InformerKey::new(gvk, InformerParams::default());
    (Informer { inner: Arc::new(InformerInner { shared, key, reflector: task }) }, server)
}

fn cm(name: &str, rv: u32) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "ns", "uid": name, "resourceVersion": rv.to_string() } })
}

fn list(rv: u32, items: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({ "apiVersion": "v1", "kind": "ConfigMapList",
                                "metadata": { "resourceVersion": rv.to_string() }, "items": items }))
    .unwrap()
}

fn event(kind: &str, object: Value) -> String {
    format!("{}\n", json!({ "type": kind, "object": object }))
}

fn gone() -> String {
    event(
        "ERROR",
        json!({ "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                           "message": "too old resource version: 10 (15)", "reason": "Expired", "code": 410 }),
    )
}

/// Answers the next request, which must be a list (`watch` false) or a watch from `rv`.
async fn answer(server: &mut Server, expect: &str, body: impl Into<Vec<u8>>) {
    let (request, respond) = tokio::time::timeout(Duration::from_secs(30), server.next_request())
        .await
        .expect("the reflector sent no request in time")
        .expect("the client is gone");
    let query = request.uri().query().unwrap_or_default().to_owned();
    let is_watch = query.contains("watch=true");
    match expect {
        "list" => assert!(!is_watch, "expected a list, got {query}"),
        rv => {
            assert!(is_watch && query.contains(&format!("resourceVersion={rv}")), "expected a watch from {rv}: {query}")
        }
    }
    respond.send_response(Response::builder().status(200).body(Body::from(body.into())).unwrap());
}

fn describe(n: &Notification) -> String {
    let rv = |o: &CachedObject| o.meta().resource_version.as_deref().unwrap_or_default().to_owned();
    match n {
        Notification::Add { obj, .. } => format!("add {} {}", obj.key(), rv(obj)),
        Notification::Update { old, new } => format!("update {} {}->{}", new.key(), rv(old), rv(new)),
        Notification::Delete { obj, final_state_unknown } => format!("delete {} {final_state_unknown}", obj.key()),
    }
}

async fn take(rx: &mut UnboundedReceiver<Notification>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("a notification in time");
        out.push(describe(&next.unwrap()));
    }
    out.sort();
    out
}

fn subscribe(informer: &Informer) -> (crate::HandlerRegistration, UnboundedReceiver<Notification>) {
    let (tx, rx) = unbounded_channel();
    (informer.add_event_handler(move |n| drop(tx.send(n))), rx)
}

#[tokio::test]
async fn a_410_in_the_middle_of_a_watch_relists_and_tombstones_what_was_deleted_meanwhile() {
    let (informer, mut server) = informer();
    let (_reg, mut rx) = subscribe(&informer);
    answer(&mut server, "list", list(10, vec![cm("a", 5), cm("b", 6)])).await;
    assert_eq!(take(&mut rx, 2).await, ["add ns/a 5", "add ns/b 6"]);

    // Two good events, then the server says the resource version is too old — mid-stream.
    let stream = [event("ADDED", cm("c", 11)), event("MODIFIED", cm("a", 12)), gone()].concat();
    answer(&mut server, "10", stream).await;
    assert_eq!(take(&mut rx, 2).await, ["add ns/c 11", "update ns/a 5->12"]);

    // The watcher relists. Meanwhile b was deleted and a changed again: nothing is missed.
    answer(&mut server, "list", list(20, vec![cm("a", 18), cm("c", 11)])).await;
    assert_eq!(take(&mut rx, 2).await, ["delete ns/b true", "update ns/a 12->18"]);
    let mut keys = informer.store().list_keys();
    keys.sort();
    assert_eq!(keys, ["ns/a", "ns/c"]);
    assert!(informer.has_synced());

    // And it watches on from the relist's resource version.
    answer(&mut server, "20", event("DELETED", cm("c", 21))).await;
    assert_eq!(take(&mut rx, 1).await, ["delete ns/c false"]);
}

#[tokio::test]
async fn malformed_watch_events_are_skipped_and_the_watch_goes_on() {
    let (informer, mut server) = informer();
    let (_reg, mut rx) = subscribe(&informer);
    answer(&mut server, "list", list(10, vec![cm("a", 5)])).await;
    assert_eq!(take(&mut rx, 1).await, ["add ns/a 5"]);

    // Valid JSON whose object cannot be cached (no name), then a good event.
    let nameless =
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "namespace": "ns", "resourceVersion": "11" } });
    let stream = [event("ADDED", nameless), event("ADDED", cm("b", 12))].concat();
    answer(&mut server, "10", stream).await;
    assert_eq!(take(&mut rx, 1).await, ["add ns/b 12"]);

    // A line that is not JSON at all: the stream fails, the watcher resumes from the last good
    // resource version, and the next good event arrives.
    answer(&mut server, "12", "{\"type\": \"ADDED\", \"object\": {\"metad\n").await;
    answer(&mut server, "12", event("MODIFIED", cm("b", 13))).await;
    assert_eq!(take(&mut rx, 1).await, ["update ns/b 12->13"]);
    assert_eq!(informer.store().len(), 2);
    assert!(rx.try_recv().is_err(), "nothing was made up from the bad events");
}

/// Two namespaces on either side of the middle of the hash space.
fn namespaces_in_halves() -> (&'static str, &'static str, [crate::shard::HashRange; 2]) {
    let [low, high] = crate::shard::split(2)[..] else { panic!("two ranges") };
    // FNV-1a of names that differ only in their last byte differ only in low bits: vary more.
    let candidates = ["ns-0", "ns-1", "team-a", "team-b", "default", "kube-system"];
    let hash = |ns: &str| crate::shard::fnv1a64(ns);
    let a = candidates.iter().find(|ns| low.contains(hash(ns))).unwrap();
    let b = candidates.iter().find(|ns| high.contains(hash(ns))).unwrap();
    (a, b, [low, high])
}

fn cm_in(namespace: &str, name: &str, rv: u32) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": namespace, "uid": name, "resourceVersion": rv.to_string() } })
}

/// Answers the shard selector probe (a one-item list with `shardSelector`); `echo` as a server
/// with ShardedListAndWatch on does. Watches the previous range's watcher sent before it was
/// dropped are left unanswered.
async fn answer_probe(server: &mut Server, range: &crate::shard::HashRange, echo: bool) {
    let (request, respond) = loop {
        let (request, respond) =
            tokio::time::timeout(Duration::from_secs(30), server.next_request()).await.unwrap().unwrap();
        if !request.uri().query().unwrap_or_default().contains("watch=true") {
            break (request, respond);
        }
    };
    let query: Vec<(String, String)> =
        form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes()).into_owned().collect();
    assert!(query.contains(&("limit".into(), "1".into())), "{query:?}");
    assert!(query.contains(&("shardSelector".into(), range.selector())), "{query:?}");
    let shard_info = if echo { json!({"selector": range.selector()}) } else { Value::Null };
    let body = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "1", "shardInfo": shard_info}, "items": []});
    respond
        .send_response(Response::builder().status(200).body(Body::from(serde_json::to_vec(&body).unwrap())).unwrap());
}

/// A cluster-wide ConfigMap informer sharded by `gate`, its scripted server, and its
/// client-side-filter gauge.
fn sharded_informer(gate: &crate::shard::ShardGate) -> (Informer, Server, prometheus::IntGauge) {
    let gauge = gate.client_side_filter("v1/ConfigMap").unwrap();
    let shard = ReflectorShard {
        caching: gate.caching().unwrap(),
        listed: gate.register_informer().unwrap(),
        client_side_filter: Some(gauge.clone()),
        namespace: None,
    };
    let (informer, server) = informer_with(Some(shard));
    (informer, server, gauge)
}

#[tokio::test]
async fn a_server_that_ignores_the_shard_selector_is_filtered_on_the_client_and_a_new_range_relists() {
    let gate = crate::shard::ShardGate::sharded();
    let (a, b, [low, high]) = namespaces_in_halves();
    let (informer, mut server, gauge) = sharded_informer(&gate);
    let (_reg, mut rx) = subscribe(&informer);
    gate.cache(low);
    answer_probe(&mut server, &low, false).await;
    answer(&mut server, "list", list(10, vec![cm_in(a, "x", 5), cm_in(b, "y", 6)])).await;
    assert_eq!(take(&mut rx, 1).await, [format!("add {a}/x 5")], "only the range's namespace is cached");
    assert_eq!(informer.store().list_keys(), [format!("{a}/x")]);
    assert_eq!(gauge.get(), 1, "the client-side filter is reported");
    assert!(gate.listed_everywhere(low));

    gate.cache(high);
    answer_probe(&mut server, &high, false).await;
    answer(&mut server, "list", list(20, vec![cm_in(a, "x", 5), cm_in(b, "y", 6)])).await;
    assert_eq!(take(&mut rx, 2).await, [format!("add {b}/y 6"), format!("delete {a}/x true")]);
    assert!(gate.listed_everywhere(high));
}

#[tokio::test]
async fn a_server_that_honours_the_shard_selector_gets_it_on_every_list_and_watch() {
    let gate = crate::shard::ShardGate::sharded();
    let (a, _, [low, _]) = namespaces_in_halves();
    let (informer, mut server, gauge) = sharded_informer(&gate);
    gate.cache(low);
    answer_probe(&mut server, &low, true).await;
    for expect in ["list", "10"] {
        let (request, respond) =
            tokio::time::timeout(Duration::from_secs(30), server.next_request()).await.unwrap().unwrap();
        let query = request.uri().query().unwrap_or_default().to_owned();
        assert!(query.contains("shardSelector=shardRange"), "{expect}: {query}");
        let body = if expect == "list" { list(10, vec![cm_in(a, "x", 5)]) } else { Vec::new() };
        respond.send_response(Response::builder().status(200).body(Body::from(body)).unwrap());
    }
    assert_eq!(gauge.get(), 0, "no client-side filter");
    assert_eq!(informer.store().list_keys(), [format!("{a}/x")]);
}
