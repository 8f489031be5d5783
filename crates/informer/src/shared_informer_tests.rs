use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::Registry;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::*;
use crate::{Notification, factory::InformerParams};

/// An informer whose "reflector" is a task that only flags when it is dropped, fed by hand.
fn informer() -> (Informer, Arc<AtomicBool>) {
    let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let metrics = Arc::new(InformerMetrics::register(&Registry::new()).unwrap());
    let shared = Arc::new(Shared::new(gvk.clone(), metrics));
    let stopped = Arc::new(AtomicBool::new(false));
    struct FlagOnDrop(Arc<AtomicBool>);
    impl Drop for FlagOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = FlagOnDrop(stopped.clone());
    let reflector = tokio::spawn(async move {
        let _flag = flag;
        std::future::pending::<()>().await;
    })
    .abort_handle();
    let key = InformerKey::new(gvk, InformerParams::default());
    (Informer { inner: Arc::new(InformerInner { shared, key, reflector }) }, stopped)
}

fn obj(name: &str, rv: u32) -> Arc<CachedObject> {
    let body = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv.to_string()}});
    Arc::new(CachedObject::from_json(serde_json::to_vec(&body).unwrap()).unwrap())
}

fn handler() -> (impl Fn(Notification) + Send + Sync + 'static, UnboundedReceiver<Notification>) {
    let (tx, rx) = unbounded_channel();
    (move |n| drop(tx.send(n)), rx)
}

fn describe(n: &Notification) -> String {
    let rv = |o: &CachedObject| o.meta().resource_version.as_deref().unwrap().to_owned();
    match n {
        Notification::Add { obj, is_in_initial_list } => format!("add {} {} {is_in_initial_list}", obj.key(), rv(obj)),
        Notification::Update { old, new } => format!("update {} {}->{}", new.key(), rv(old), rv(new)),
        Notification::Delete { obj, final_state_unknown } => format!("delete {} {final_state_unknown}", obj.key()),
    }
}

async fn take(rx: &mut UnboundedReceiver<Notification>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(describe(&rx.recv().await.unwrap()));
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_relist_turns_objects_missing_from_it_into_tombstones() {
    let (informer, _) = informer();
    let shared = &informer.inner.shared;
    shared.apply(obj("a", 1), true);
    shared.apply(obj("b", 1), true);
    shared.replace_done(&HashSet::from([Arc::from("ns/a"), Arc::from("ns/b")]));
    shared.mark_synced();
    let (h, mut rx) = handler();
    let _reg = informer.add_event_handler(h);
    assert_eq!(take(&mut rx, 2).await, ["add ns/a 1 true", "add ns/b 1 true"]);

    // Relist: a unchanged (not re-announced), b gone, c new.
    shared.apply(obj("a", 1), true);
    shared.apply(obj("c", 3), true);
    shared.replace_done(&HashSet::from([Arc::from("ns/a"), Arc::from("ns/c")]));
    assert_eq!(take(&mut rx, 2).await, ["add ns/c 3 false", "delete ns/b true"]);
    assert_eq!(informer.store().len(), 2);
    assert!(rx.try_recv().is_err(), "nothing else, in particular no update of a");
}

#[tokio::test]
async fn a_late_subscriber_gets_a_replay_then_live_events() {
    let (informer, _) = informer();
    let shared = &informer.inner.shared;
    shared.apply(obj("a", 1), true);
    shared.mark_synced();
    let (h, mut rx) = handler();
    let _reg = informer.add_event_handler(h);
    shared.apply(obj("a", 2), false);
    assert_eq!(take(&mut rx, 1).await, ["add ns/a 2 true"], "the replay coalesced with the update");
    shared.apply(obj("a", 3), false);
    assert_eq!(take(&mut rx, 1).await, ["update ns/a 2->3"]);
}

#[tokio::test(start_paused = true)]
async fn a_resync_period_redelivers_every_cached_object_as_an_update() {
    let (informer, _) = informer();
    informer.inner.shared.apply(obj("a", 1), true);
    let (h, mut rx) = handler();
    let _reg = informer.add_event_handler_with_resync(h, Duration::from_secs(30));
    let (plain, mut plain_rx) = handler();
    let _plain = informer.add_event_handler(plain);
    assert_eq!(take(&mut rx, 1).await, ["add ns/a 1 true"]);
    assert_eq!(take(&mut plain_rx, 1).await, ["add ns/a 1 true"]);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(take(&mut rx, 1).await, ["update ns/a 1->1"]);
    assert!(plain_rx.try_recv().is_err(), "resync is per handler and off by default");
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_reflector() {
    let (informer, stopped) = informer();
    let (h, _rx) = handler();
    let registration = informer.add_event_handler(h);
    let second = informer.clone();
    drop(informer);
    drop(second);
    tokio::task::yield_now().await;
    assert!(!stopped.load(Ordering::SeqCst), "the registration still holds the informer");
    drop(registration);
    for _ in 0..100 {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the reflector task was not stopped");
}

#[tokio::test]
async fn wait_for_sync_returns_once_the_first_list_is_applied() {
    let (informer, _) = informer();
    assert!(!informer.has_synced());
    let waiter = tokio::spawn({
        let informer = informer.clone();
        async move { informer.wait_for_sync().await }
    });
    informer.inner.shared.mark_synced();
    waiter.await.unwrap().unwrap();
    assert!(informer.has_synced());
}
