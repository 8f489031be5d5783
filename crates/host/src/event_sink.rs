//! `EventSink`: plugins' Kubernetes Events sent in the background, from a bounded queue, with
//! repeats merged into an Event series, as client-go's events broadcaster does.
//!
//! A reconcile only enqueues (no API round trip on its critical path); when the queue is full
//! the event is dropped and counted, as the WIT promises ("best-effort: the host batches and may
//! drop them under load"). Hand-written: kube-runtime's `Recorder` publishes inline, one request
//! per event and per repeat.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::OnceLock;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use prometheus::IntCounter;
use tokio::sync::mpsc;

use crate::identity::Identities;
use crate::plugin::host::{Caller, EventRecord};

/// Events waiting to be sent, per host (client-go `tools/events`: `maxQueuedEvents = 1000`).
pub const QUEUE_LENGTH: usize = 1000;

/// Events taken from the queue at once; identical ones among them become one request.
pub const BATCH: usize = 100;

/// Events of a batch sent at once. client-go's events broadcaster sends every Event from a
/// goroutine of its own, unbounded; one at a time, ten plugins' Events (≈ 170/s in the
/// ten-controller benchmark) filled the queue and half were dropped.
pub const IN_FLIGHT: usize = 16;

/// A repeat within this time of the last one joins its series (client-go `tools/events`:
/// `finishTime = 6 * time.Minute`; kube-runtime's `CACHE_TTL` is the same).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What makes two events the same for a series (client-go's `getKey`: reporting controller,
/// regarding object, type, reason; the note of the first one is kept).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    manager: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    warning: bool,
    reason: String,
}

/// An event with the plugin (`kubewasm/<plugin>`) that reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct Queued {
    /// Reporting controller.
    pub manager: String,
    /// The plugin whose identity sends it; `None` for the host's own.
    pub plugin: Option<String>,
    /// The event.
    pub event: EventRecord,
}

impl Queued {
    fn key(&self) -> Key {
        let r = &self.event.regarding;
        Key {
            manager: self.manager.clone(),
            kind: format!("{:?}", r.kind),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            warning: self.event.warning,
            reason: self.event.reason.clone(),
        }
    }
}

/// The host's event queue and its background sender.
pub struct EventSink {
    identities: Identities,
    sender: OnceLock<mpsc::Sender<Queued>>,
    capacity: usize,
    dropped: IntCounter,
}

impl EventSink {
    /// A sink sending each plugin's events as `identities` says, with [`QUEUE_LENGTH`]; the
    /// sender starts with the first event (on the runtime that publishes it).
    pub fn new(identities: Identities) -> Self {
        let dropped =
            IntCounter::new("kubewasm_events_dropped_total", "Events dropped because the event queue was full")
                .expect("a valid metric");
        Self { identities, sender: OnceLock::new(), capacity: QUEUE_LENGTH, dropped }
    }

    /// Events dropped so far, for the host's registry.
    pub fn dropped(&self) -> IntCounter {
        self.dropped.clone()
    }

    /// Enqueues `event` reported by `caller`, sent as the caller; drops and counts it when the
    /// queue is full.
    pub fn publish(&self, caller: &Caller, event: &EventRecord) {
        let plugin = Some(caller.plugin.clone());
        self.enqueue(Queued { manager: caller.manager.clone(), plugin, event: event.clone() });
    }

    /// Enqueues `event` reported by the host itself as `manager`, sent as the host.
    pub fn publish_own(&self, manager: &str, event: &EventRecord) {
        self.enqueue(Queued { manager: manager.to_owned(), plugin: None, event: event.clone() });
    }

    fn enqueue(&self, queued: Queued) {
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = mpsc::channel(self.capacity);
            tokio::spawn(send_all(self.identities.clone(), rx));
            tx
        });
        enqueue(sender, &self.dropped, queued);
    }
}

/// `try_send`, counting what does not fit.
fn enqueue(sender: &mpsc::Sender<Queued>, dropped: &IntCounter, queued: Queued) {
    if sender.try_send(queued).is_err() {
        dropped.inc();
    }
}

/// Identical events of one batch as (first of them, how many), in order of first appearance.
fn merge(batch: Vec<Queued>) -> Vec<(Queued, i32)> {
    let mut merged: Vec<(Queued, i32)> = Vec::new();
    let mut index: HashMap<Key, usize> = HashMap::new();
    for queued in batch {
        match index.entry(queued.key()) {
            Entry::Occupied(i) => merged[*i.get()].1 += 1,
            Entry::Vacant(slot) => {
                slot.insert(merged.len());
                merged.push((queued, 1));
            }
        }
    }
    merged
}

/// A series already in the API server: its Event's namespace and name, count and last time.
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

/// The background sender: takes batches off the queue until every sink is dropped, and sends
/// each batch [`IN_FLIGHT`] at a time. Events in one batch are of different series (`merge`), so
/// no two requests in flight touch the same series.
async fn send_all(identities: Identities, mut rx: mpsc::Receiver<Queued>) {
    let series: Mutex<HashMap<Key, Series>> = Mutex::default();
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let now = Timestamp::now();
        let window = k8s_openapi::jiff::SignedDuration::try_from(SERIES_WINDOW).unwrap_or_default();
        series.lock().retain(|_, s| s.last + window > now);
        futures::stream::iter(merge(std::mem::take(&mut batch)).into_iter().zip(0u32..))
            .for_each_concurrent(IN_FLIGHT, |((queued, count), nth)| {
                let (client, series) = (identities.client_of(queued.plugin.as_deref()), &series);
                async move {
                    if let Err(e) = send(&client, series, &queued, count, now, nth).await {
                        tracing::debug!(manager = %queued.manager, reason = %queued.event.reason, error = %e, "event not sent");
                    }
                }
            })
            .await;
    }
}

/// Creates the Event, or adds `count` to its series with one merge patch.
async fn send(
    client: &Client,
    series: &Mutex<HashMap<Key, Series>>,
    queued: &Queued,
    count: i32,
    now: Timestamp,
    nth: u32,
) -> Result<(), kube::Error> {
    let key = queued.key();
    let known = series.lock().get(&key).map(|s| (s.namespace.clone(), s.name.clone(), s.count + count));
    if let Some((namespace, name, total)) = known {
        let patch = serde_json::json!({"series": {"count": total, "lastObservedTime": MicroTime(now)}});
        let api = Api::<Event>::namespaced(client.clone(), &namespace);
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(status)) if status.code == 404 => {
                series.lock().remove(&key); // expired in the API server: start a new one below
            }
            other => {
                if let Some(s) = series.lock().get_mut(&key) {
                    s.count = total;
                    s.last = now;
                }
                return other.map(drop);
            }
        }
    }
    let event = new_event(queued, count, now, nth);
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let created = Api::<Event>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &event).await?;
    let name = created.metadata.name.unwrap_or_default();
    series.lock().insert(key, Series { namespace, name, count, last: now });
    Ok(())
}

/// The events.k8s.io/v1 Event for `queued` (seen `count` times), in the regarding object's
/// namespace (`default` for cluster-scoped objects, as kube-runtime's `Recorder` does).
fn new_event(queued: &Queued, count: i32, now: Timestamp, nth: u32) -> Event {
    let r = &queued.event.regarding;
    let namespace = r.namespace.clone().unwrap_or_else(|| "default".to_owned());
    let api_version =
        if r.kind.group.is_empty() { r.kind.version.clone() } else { format!("{}/{}", r.kind.group, r.kind.version) };
    Event {
        metadata: ObjectMeta {
            // client-go's `<object>.<time in ns, hex>`, with `nth` added: the batch's Events share
            // one time, and two about one object had one name (the second refused as a duplicate).
            name: Some(format!("{}.{:x}", r.name, now.as_nanosecond() + i128::from(nth))),
            namespace: Some(namespace),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        regarding: Some(ObjectReference {
            api_version: Some(api_version),
            kind: Some(r.kind.kind.clone()),
            name: Some(r.name.clone()),
            namespace: r.namespace.clone(),
            ..Default::default()
        }),
        reason: Some(queued.event.reason.clone()),
        note: Some(queued.event.note.clone()),
        action: Some("Reconcile".to_owned()),
        type_: Some(if queued.event.warning { "Warning" } else { "Normal" }.to_owned()),
        reporting_controller: Some(queued.manager.clone()),
        reporting_instance: Some(std::env::var("POD_NAME").unwrap_or_else(|_| queued.manager.clone())),
        series: (count > 1).then_some(EventSeries { count, last_observed_time: MicroTime(now) }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::host::ObjectRef;
    use kube::core::GroupVersionKind;

    fn queued(manager: &str, name: &str, reason: &str) -> Queued {
        let regarding =
            ObjectRef { kind: GroupVersionKind::gvk("", "v1", "Namespace"), namespace: None, name: name.into() };
        Queued {
            manager: manager.into(),
            plugin: Some(manager.trim_start_matches("kubewasm/").into()),
            event: EventRecord { regarding, warning: false, reason: reason.into(), note: "n".into() },
        }
    }

    #[test]
    fn a_full_queue_drops_the_event_and_counts_it() {
        let (tx, mut rx) = mpsc::channel(2);
        let dropped = IntCounter::new("dropped", "dropped").unwrap();
        for name in ["a", "b", "c"] {
            enqueue(&tx, &dropped, queued("kubewasm/p", name, "Applied"));
        }
        assert_eq!(dropped.get(), 1);
        assert_eq!(rx.try_recv().unwrap().event.regarding.name, "a");
        assert_eq!(rx.try_recv().unwrap().event.regarding.name, "b");
        assert!(rx.try_recv().is_err(), "the third event was dropped, not queued");
    }

    #[test]
    fn identical_events_in_a_batch_become_one_with_their_count() {
        let batch = vec![
            queued("kubewasm/p", "a", "Applied"),
            queued("kubewasm/p", "b", "Applied"),
            queued("kubewasm/p", "a", "Applied"),
            queued("kubewasm/q", "a", "Applied"),
            queued("kubewasm/p", "a", "Failed"),
            queued("kubewasm/p", "a", "Applied"),
        ];
        let merged: Vec<(String, String, String, i32)> =
            merge(batch).into_iter().map(|(q, n)| (q.manager, q.event.regarding.name, q.event.reason, n)).collect();
        let expect = |m: &str, n: &str, r: &str, c| (m.to_owned(), n.to_owned(), r.to_owned(), c);
        assert_eq!(
            merged,
            vec![
                expect("kubewasm/p", "a", "Applied", 3),
                expect("kubewasm/p", "b", "Applied", 1),
                expect("kubewasm/q", "a", "Applied", 1),
                expect("kubewasm/p", "a", "Failed", 1),
            ]
        );
    }

    #[tokio::test]
    async fn the_sender_has_several_events_in_flight_at_once_as_client_go_does() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let sink = EventSink::new(Identities::host(Client::new(service, "default")));
        let names: Vec<String> = (0..IN_FLIGHT).map(|i| format!("ns-{i}")).collect();
        for name in &names {
            sink.publish(&Caller::new("p"), &queued("kubewasm/p", name, "Applied").event);
        }
        // None is answered until all are in flight: a sender that waits for each answer before
        // the next request never sends the second.
        let mut pending = Vec::new();
        for i in 0..IN_FLIGHT {
            let (request, respond) = tokio::time::timeout(Duration::from_secs(30), server.next_request())
                .await
                .unwrap_or_else(|_| panic!("only {i} of {IN_FLIGHT} events were in flight at once"))
                .expect("the sink is alive");
            assert_eq!(request.method(), http::Method::POST);
            pending.push(respond);
        }
        for respond in pending {
            let created = serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "e", "namespace": "default"}, "eventTime": null});
            let body = Body::from(serde_json::to_vec(&created).unwrap());
            respond.send_response(Response::builder().status(201).body(body).unwrap());
        }
        assert_eq!(sink.dropped().get(), 0);
    }

    #[test]
    fn an_event_seen_more_than_once_is_created_as_a_series() {
        let now = Timestamp::now();
        let once = new_event(&queued("kubewasm/p", "a", "Applied"), 1, now, 0);
        assert_eq!(once.series, None);
        assert_eq!(once.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(once.reporting_controller.as_deref(), Some("kubewasm/p"));
        let thrice = new_event(&queued("kubewasm/p", "a", "Applied"), 3, now, 1);
        assert_ne!(thrice.metadata.name, once.metadata.name, "two Events of one batch about one object");
        assert_eq!(thrice.series.map(|s| s.count), Some(3));
    }
}
