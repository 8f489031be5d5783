//! Plugins' Events against a real kube-apiserver: sent in the background by the writer's event
//! sink, and repeats of one event joined into its series.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::core::GroupVersionKind;
use kubewasm_host::plugin::api::{ApiWriterExt, Caller, EventRecord, ObjectRef};
use kubewasm_host::writer::KubeWriter;
use kubewasm_testenv::ControlPlane;

use common::eventually;

async fn ours(events: &Api<Event>, namespace: &str) -> Vec<Event> {
    let list = events.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(namespace))
        .filter(|e| e.reporting_controller.as_deref() == Some("kubewasm/events-e2e"))
        .collect()
}

#[tokio::test]
async fn a_published_event_arrives_and_its_repeats_join_one_series() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let namespace = cp.namespace("events").await;
    let writer = KubeWriter::new(client.clone());
    let event = EventRecord {
        regarding: ObjectRef {
            kind: GroupVersionKind::gvk("", "v1", "Namespace"),
            namespace: None,
            name: namespace.clone(),
        },
        warning: false,
        reason: "DefaultsApplied".into(),
        note: "applied".into(),
        by_host: false,
    };
    writer.publish_event(&Caller::new("events-e2e"), event.clone()).await.unwrap();
    // A cluster-scoped object's events go to `default`, as kube-runtime's Recorder puts them.
    let events = Api::<Event>::namespaced(client.clone(), "default");
    eventually("the event", Duration::from_secs(30), || async {
        (ours(&events, &namespace).await.len() == 1).then_some(())
    })
    .await;
    writer.publish_event(&Caller::new("events-e2e"), event.clone()).await.unwrap();
    writer.publish_event(&Caller::new("events-e2e"), event.clone()).await.unwrap();
    let series = eventually("one Event with a series of 3", Duration::from_secs(30), || async {
        let found = ours(&events, &namespace).await;
        let count = found.first().and_then(|e| e.series.as_ref()).map(|s| s.count);
        (found.len() == 1 && count == Some(3)).then_some(count)
    })
    .await;
    assert_eq!(series, Some(3));
}

/// Two different Events about one object published together: the sender takes them in one batch
/// (this test's runtime has one thread, so the sender runs only once both are queued), and both
/// must be created, not the second refused as a duplicate of the first's name.
#[tokio::test]
async fn two_different_events_about_one_object_in_one_batch_are_both_created() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let namespace = cp.namespace("events-batch").await;
    let writer = KubeWriter::new(client.clone());
    let regarding = ObjectRef {
        kind: GroupVersionKind::gvk("", "v1", "ConfigMap"),
        namespace: Some(namespace.clone()),
        name: "same".into(),
    };
    for reason in ["First", "Second"] {
        let event = EventRecord {
            regarding: regarding.clone(),
            warning: false,
            reason: reason.into(),
            note: "n".into(),
            by_host: false,
        };
        writer.publish_event(&Caller::new("events-e2e"), event.clone()).await.unwrap();
    }
    let events = Api::<Event>::namespaced(client.clone(), &namespace);
    let reasons = eventually("two Events about one ConfigMap", Duration::from_secs(30), || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        let mut reasons: Vec<String> = list.items.into_iter().filter_map(|e| e.reason).collect();
        reasons.sort();
        (reasons.len() >= 2).then_some(reasons)
    })
    .await;
    assert_eq!(reasons, ["First", "Second"]);
}

/// One plugin floods Events past its queue before the sender runs (one runtime thread); another
/// plugin's Event and the host's `AccessDenied` report about the flooder's call, published
/// after the flood, still reach the API server, and only the flooder's overflow is counted, as
/// its own (issue 49, class 5: one shared queue dropped both).
#[tokio::test]
async fn a_plugins_event_flood_drops_only_its_own_events_not_anothers_nor_the_hosts_report() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let namespace = cp.namespace("events-flood").await;
    let writer = KubeWriter::new(client.clone());
    let about = |name: &str, reason: &str, by_host| EventRecord {
        regarding: ObjectRef {
            kind: GroupVersionKind::gvk("", "v1", "ConfigMap"),
            namespace: Some(namespace.clone()),
            name: name.into(),
        },
        warning: by_host,
        reason: reason.into(),
        note: "n".into(),
        by_host,
    };
    let over = 500;
    // One series: the sender merges the flood into a few requests, the queue still fills.
    let flood = about("flooded", "Flood", false);
    for _ in 0..kubewasm_host::event_sink::QUEUE_LENGTH + over {
        writer.publish_event(&Caller::new("flooder"), flood.clone()).await.unwrap();
    }
    writer.publish_event(&Caller::new("neighbour"), about("neighbours", "Applied", false)).await.unwrap();
    writer.publish_event(&Caller::new("flooder"), about("refused", "AccessDenied", true)).await.unwrap();
    let dropped = |plugin: &str| writer.events_dropped().with_label_values(&[plugin]).get();
    assert_eq!((dropped("flooder"), dropped("neighbour")), (over as u64, 0), "only the flooder's overflow");
    let events = Api::<Event>::namespaced(client.clone(), &namespace);
    eventually("the neighbour's Event and the AccessDenied report", Duration::from_secs(30), || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        let seen = |reason: &str, manager: &str| {
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some(reason) && e.reporting_controller.as_deref() == Some(manager))
        };
        (seen("Applied", "kubewasm/neighbour") && seen("AccessDenied", "kubewasm/flooder")).then_some(())
    })
    .await;
}
