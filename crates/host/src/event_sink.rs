//! `EventSink`: plugins' Kubernetes Events sent in the background, from a bounded queue per
//! plugin, with repeats merged into an Event series, as client-go's events broadcaster does.
//!
//! A reconcile only enqueues (no API round trip on its critical path); when its plugin's queue
//! is full the event is dropped and counted for that plugin, as the WIT promises ("best-effort:
//! the host batches and may drop them under load"). The host's reports (its own, and the
//! `AccessDenied` and `WriteRejected` it makes about a plugin's calls) queue apart from any
//! plugin's Events and go first, so no plugin's flood drops them; the sender takes each batch
//! from the plugins in turn (`event_sink::lanes`). Hand-written: kube-runtime's `Recorder` publishes
//! inline, one request per event and per repeat.

mod lanes;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use prometheus::{IntCounterVec, Opts};
use tokio::sync::Notify;

use self::lanes::{Lanes, Tier};
use crate::identity::Identities;
use crate::plugin::api::{Caller, EventRecord};

/// Events waiting to be sent, per plugin, and as many of the host's reports per plugin and of
/// its own (client-go `tools/events`: `maxQueuedEvents = 1000` per broadcaster, which is one per
/// controller process; each plugin is such a controller). One queue of 1000 for every plugin let
/// one plugin's flood drop every other plugin's Events and every `AccessDenied` report.
pub const QUEUE_LENGTH: usize = 1000;

/// Events taken from the queues at once, one plugin's after another's (`lanes`); identical
/// ones among them become one request.
pub const BATCH: usize = 100;

/// Events of a batch sent at once. client-go's events broadcaster sends every Event from a
/// goroutine of its own, unbounded; one at a time, ten plugins' Events (≈ 170/s in the
/// ten-controller benchmark) filled the queue and half were dropped.
pub const IN_FLIGHT: usize = 16;

/// A repeat within this time of the last one joins its series (client-go `tools/events`:
/// `finishTime = 6 * time.Minute`; kube-runtime's `CACHE_TTL` is the same).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Series remembered at once, across plugins (client-go's events correlator keeps an LRU of
/// 4096). Protects the host's memory from a plugin that publishes ever-new reasons or objects:
/// past it a repeat is created as an Event of its own instead of joining its series, so
/// nothing is lost, only not merged.
pub const MAX_SERIES: usize = 4096;

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

/// The host's event queues and their background sender.
pub struct EventSink {
    identities: Identities,
    queue: Arc<Queue>,
    started: OnceLock<()>,
}

/// What the sink and its sender share.
struct Queue {
    lanes: Mutex<Lanes<Queued>>,
    /// Woken on each event queued and when the sink is dropped.
    ready: Notify,
    /// The sink is gone: the sender sends what is queued, then stops.
    closed: AtomicBool,
    dropped: IntCounterVec,
}

impl EventSink {
    /// A sink sending each plugin's events as `identities` says, with [`QUEUE_LENGTH`] per
    /// plugin; the sender starts with the first event (on the runtime that publishes it).
    pub fn new(identities: Identities) -> Self {
        let opts = Opts::new(
            "kubewasm_events_dropped_total",
            "Events dropped because their plugin's event queue was full, by plugin (empty: the host's own)",
        );
        let dropped = IntCounterVec::new(opts, &["plugin"]).expect("a valid metric");
        let queue = Queue {
            lanes: Mutex::new(Lanes::new(QUEUE_LENGTH)),
            ready: Notify::new(),
            closed: AtomicBool::new(false),
            dropped,
        };
        Self { identities, queue: Arc::new(queue), started: OnceLock::new() }
    }

    /// Events dropped so far, by plugin, for the host's registry.
    pub fn dropped(&self) -> IntCounterVec {
        self.queue.dropped.clone()
    }

    /// Enqueues `event` about `caller`'s work, sent as the caller: in its plugin's queue of
    /// Events, or of the host's reports if the host made it ([`EventRecord::by_host`]). Drops
    /// and counts it when that queue is full.
    pub fn publish(&self, caller: &Caller, event: &EventRecord) {
        let plugin = Some(caller.plugin.clone());
        let tier = if event.by_host { Tier::Report } else { Tier::Event };
        self.enqueue(tier, Queued { manager: caller.manager.clone(), plugin, event: event.clone() });
    }

    /// Enqueues `event` reported by the host itself as `manager`, sent as the host, in the
    /// host's own queue.
    pub fn publish_own(&self, manager: &str, event: &EventRecord) {
        self.enqueue(Tier::Report, Queued { manager: manager.to_owned(), plugin: None, event: event.clone() });
    }

    fn enqueue(&self, tier: Tier, queued: Queued) {
        self.started.get_or_init(|| {
            tokio::spawn(send_all(self.identities.clone(), self.queue.clone()));
        });
        self.queue.push(tier, queued);
    }
}

impl Drop for EventSink {
    fn drop(&mut self) {
        self.queue.closed.store(true, Ordering::Release);
        self.queue.ready.notify_one();
    }
}

impl Queue {
    /// Queues `queued` in its plugin's lane, counting it as that plugin's if it does not fit.
    fn push(&self, tier: Tier, queued: Queued) {
        let lane = queued.plugin.clone();
        let refused = self.lanes.lock().push(lane, tier, queued);
        match refused {
            Ok(()) => self.ready.notify_one(),
            Err(queued) => self.dropped.with_label_values(&[queued.plugin.as_deref().unwrap_or_default()]).inc(),
        }
    }

    /// The next batch, waiting for one; empty once the sink is dropped and all is taken.
    async fn next_batch(&self) -> Vec<Queued> {
        loop {
            let batch = self.lanes.lock().take(BATCH);
            if !batch.is_empty() || self.closed.load(Ordering::Acquire) {
                return batch;
            }
            // A permit stored by a push or the drop since `take` makes this return at once.
            self.ready.notified().await;
        }
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

/// The background sender: takes batches off the queues until the sink is dropped, and sends
/// each batch [`IN_FLIGHT`] at a time. Events in one batch are of different series (`merge`), so
/// no two requests in flight touch the same series.
async fn send_all(identities: Identities, queue: Arc<Queue>) {
    let series: Mutex<HashMap<Key, Series>> = Mutex::default();
    loop {
        let batch = queue.next_batch().await;
        if batch.is_empty() {
            return;
        }
        let now = Timestamp::now();
        let window = k8s_openapi::jiff::SignedDuration::try_from(SERIES_WINDOW).unwrap_or_default();
        series.lock().retain(|_, s| s.last + window > now);
        futures::stream::iter(merge(batch).into_iter().zip(0u32..))
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
    let mut series = series.lock();
    if series.len() < MAX_SERIES {
        series.insert(key, Series { namespace, name, count, last: now });
    }
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
    use crate::plugin::api::ObjectRef;
    use kube::core::GroupVersionKind;

    fn queued(manager: &str, name: &str, reason: &str) -> Queued {
        let regarding =
            ObjectRef { kind: GroupVersionKind::gvk("", "v1", "Namespace"), namespace: None, name: name.into() };
        Queued {
            manager: manager.into(),
            plugin: Some(manager.trim_start_matches("kubewasm/").into()),
            event: EventRecord { regarding, warning: false, reason: reason.into(), note: "n".into(), by_host: false },
        }
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
        assert_eq!(sink.dropped().with_label_values(&["p"]).get(), 0);
    }

    /// Answers every request the sink sends (201, the Event as sent) until none comes for 30 s
    /// of virtual time, and returns each created Event's reporting controller and reason.
    async fn answer_all(
        server: &mut tower_test::mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>,
    ) -> Vec<(String, String)> {
        use http_body_util::BodyExt as _;
        let mut created = Vec::new();
        while let Ok(Some((request, respond))) =
            tokio::time::timeout(Duration::from_secs(30), server.next_request()).await
        {
            let body = request.into_body().collect().await.expect("a request body").to_bytes();
            let event: Event = serde_json::from_slice(&body).expect("an Event created");
            created.push((
                event.reporting_controller.clone().unwrap_or_default(),
                event.reason.clone().unwrap_or_default(),
            ));
            let body = kube::client::Body::from(body.to_vec());
            respond.send_response(http::Response::builder().status(201).body(body).unwrap());
        }
        created
    }

    /// Plugin `a` publishes more Events than its queue holds before the sender runs (this test's
    /// runtime has one thread); then plugin `b` publishes one, the runtime reports `a`'s refused
    /// call (`AccessDenied`, sent as `a`) and the host reports one of its own. Only `a`'s
    /// overflow is dropped, counted as `a`'s; the other three are sent.
    #[tokio::test(start_paused = true)]
    async fn one_plugins_flood_drops_only_its_own_events_not_anothers_nor_the_hosts_reports() {
        let (service, mut server) = tower_test::mock::pair();
        let sink = EventSink::new(Identities::host(Client::new(service, "default")));
        let over = 500;
        for i in 0..QUEUE_LENGTH + over {
            sink.publish(&Caller::new("a"), &queued("kubewasm/a", &format!("a-{i}"), "Flood").event);
        }
        sink.publish(&Caller::new("b"), &queued("kubewasm/b", "b", "Applied").event);
        let denied = EventRecord { by_host: true, ..queued("kubewasm/a", "a-0", "AccessDenied").event };
        sink.publish(&Caller::new("a"), &denied);
        sink.publish_own("kubewasm-host", &queued("kubewasm-host", "h", "CanaryFailed").event);
        let dropped = |plugin: &str| sink.dropped().with_label_values(&[plugin]).get();
        assert_eq!(dropped("a"), over as u64, "a's Events past its queue are dropped, counted as a's");
        assert_eq!((dropped("b"), dropped("")), (0, 0), "neither b's Event nor the host's report is dropped");
        let created = answer_all(&mut server).await;
        for (manager, reason) in
            [("kubewasm/b", "Applied"), ("kubewasm/a", "AccessDenied"), ("kubewasm-host", "CanaryFailed")]
        {
            assert!(
                created.iter().any(|(m, r)| m == manager && r == reason),
                "{manager}'s {reason} was not sent after a's flood"
            );
        }
        let flood = created.iter().filter(|(_, r)| r == "Flood").count();
        assert_eq!(flood, QUEUE_LENGTH, "a's queue was sent whole");
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
