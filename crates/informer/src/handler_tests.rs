use super::*;

fn obj(name: &str, uid: &str, rv: u32) -> Arc<CachedObject> {
    let body = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv.to_string()}});
    Arc::new(CachedObject::from_json(serde_json::to_vec(&body).unwrap()).unwrap())
}

fn rv(o: &CachedObject) -> &str {
    o.meta().resource_version.as_deref().unwrap()
}

fn drain(l: &Listener) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(batch) = l.pop() {
        for n in batch {
            out.push(match n {
                Notification::Add { obj, is_in_initial_list } => {
                    format!("add {} {} {is_in_initial_list}", obj.key(), rv(&obj))
                }
                Notification::Update { old, new } => format!("update {} {}->{}", new.key(), rv(&old), rv(&new)),
                Notification::Delete { obj, final_state_unknown } => {
                    format!("delete {} {} {final_state_unknown}", obj.key(), rv(&obj))
                }
            });
        }
    }
    out
}

#[test]
fn a_fast_consumer_sees_every_event_in_order() {
    let l = Listener::default();
    let (v1, v2) = (obj("a", "u", 1), obj("a", "u", 2));
    l.upserted(None, &v1, false);
    assert_eq!(drain(&l), ["add ns/a 1 false"]);
    l.upserted(Some(&v1), &v2, false);
    assert_eq!(drain(&l), ["update ns/a 1->2"]);
    l.deleted(&obj("a", "u", 3), false);
    assert_eq!(drain(&l), ["delete ns/a 3 false"]);
}

#[test]
fn a_slow_consumer_gets_one_coalesced_update_per_key_with_the_old_it_last_saw() {
    let l = Listener::default();
    let mut prev = obj("a", "u", 1);
    for i in 2..1000 {
        let next = obj("a", "u", i);
        l.upserted(Some(&prev), &next, false);
        prev = next;
    }
    l.upserted(None, &obj("b", "u2", 5), false);
    assert_eq!(l.pending(), 2, "memory is per key, not per event");
    assert_eq!(drain(&l), ["update ns/a 1->999", "add ns/b 5 false"]);
}

#[test]
fn an_add_then_delete_before_delivery_delivers_nothing() {
    let l = Listener::default();
    let v = obj("a", "u", 1);
    l.upserted(None, &v, false);
    l.deleted(&v, false);
    assert!(drain(&l).is_empty());
}

#[test]
fn a_delete_and_recreate_before_delivery_is_a_tombstone_then_an_add() {
    let l = Listener::default();
    let old = obj("a", "u1", 1);
    l.deleted(&old, false);
    l.upserted(None, &obj("a", "u2", 5), false);
    assert_eq!(drain(&l), ["delete ns/a 1 true", "add ns/a 5 false"]);
}

#[test]
fn a_tombstone_keeps_its_final_state_unknown_flag() {
    let l = Listener::default();
    l.deleted(&obj("a", "u", 4), true);
    assert_eq!(drain(&l), ["delete ns/a 4 true"]);
}

#[test]
fn a_resync_redelivers_unchanged_objects_but_not_pending_ones() {
    let l = Listener::default();
    let (a, b1, b2) = (obj("a", "u", 1), obj("b", "v", 1), obj("b", "v", 2));
    l.upserted(Some(&b1), &b2, false);
    l.resync(&a);
    l.resync(&b2);
    assert_eq!(drain(&l), ["update ns/b 1->2", "update ns/a 1->1"]);
}

#[tokio::test]
async fn the_delivery_task_survives_a_panicking_handler() {
    let l = Arc::new(Listener::default());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handler = move |n: Notification| {
        if let Notification::Add { obj, .. } = &n
            && obj.key() == "ns/boom"
        {
            panic!("handler bug");
        }
        tx.send(n).unwrap();
    };
    let task = tokio::spawn(l.clone().run(Arc::new(handler)));
    l.upserted(None, &obj("boom", "u", 1), false);
    l.upserted(None, &obj("fine", "u2", 1), false);
    let got = rx.recv().await.unwrap();
    assert!(matches!(got, Notification::Add { obj, .. } if obj.key() == "ns/fine"));
    task.abort();
}
