use std::{collections::BTreeSet, sync::Arc};

use kube::core::SelectorExt;
use proptest::prelude::*;

use super::*;
use crate::index::CONTROLLER_OWNER_INDEX;

fn obj(ns: Option<&str>, name: &str, labels: &[(&str, &str)], node: Option<&str>) -> Arc<CachedObject> {
    let labels: serde_json::Map<String, Value> =
        labels.iter().map(|(k, v)| ((*k).to_owned(), Value::from(*v))).collect();
    let mut meta = serde_json::json!({"name": name, "labels": labels, "resourceVersion": "1"});
    if let Some(ns) = ns {
        meta["namespace"] = ns.into();
    }
    let mut body = serde_json::json!({"metadata": meta, "spec": {}});
    if let Some(node) = node {
        body["spec"]["nodeName"] = node.into();
    }
    Arc::new(CachedObject::from_json(serde_json::to_vec(&body).unwrap()).unwrap())
}

fn sorted(objs: Vec<Arc<CachedObject>>) -> Vec<String> {
    let mut keys: Vec<String> = objs.iter().map(|o| o.key().to_owned()).collect();
    keys.sort();
    keys
}

#[test]
fn get_by_key_returns_the_same_arc_without_copying() {
    let store = Store::new();
    let a = obj(Some("ns"), "a", &[], None);
    store.upsert(a.clone());
    assert!(Arc::ptr_eq(&store.get_by_key("ns/a").unwrap(), &a));
    assert!(Arc::ptr_eq(&store.get(Some("ns"), "a").unwrap(), &a));
    assert!(store.get_by_key("a").is_none());
}

#[test]
fn an_update_moves_an_object_between_index_values() {
    let store = Store::new();
    store.add_indexers(Indexers::from([("node".to_owned(), IndexFunc::field_path("spec.nodeName"))])).unwrap();
    store.upsert(obj(Some("ns"), "p", &[("app", "web")], Some("n1")));
    assert_eq!(store.index_keys("node", "n1").unwrap(), ["ns/p"]);

    store.upsert(obj(Some("ns"), "p", &[("app", "db")], Some("n2")));
    assert!(store.index_keys("node", "n1").unwrap().is_empty());
    assert_eq!(store.index_keys("node", "n2").unwrap(), ["ns/p"]);
    assert!(store.by_index(LABEL_INDEX, "app=web").unwrap().is_empty());
    assert_eq!(sorted(store.by_index(LABEL_INDEX, "app=db").unwrap()), ["ns/p"]);
    assert_eq!(store.list_index_values("node").unwrap(), ["n2"]);
}

#[test]
fn a_delete_removes_the_object_from_every_index() {
    let store = Store::new();
    store.upsert(obj(Some("ns"), "p", &[("app", "web")], None));
    assert!(store.delete("ns/p").is_some());
    assert!(store.list_index_values(LABEL_INDEX).unwrap().is_empty());
    assert!(store.list_index_values(NAMESPACE_INDEX).unwrap().is_empty());
    assert!(store.delete("ns/p").is_none());
}

#[test]
fn add_indexers_backfills_objects_already_cached() {
    let store = Store::new();
    store.upsert(obj(Some("a"), "p1", &[], Some("n1")));
    store.upsert(obj(Some("b"), "p2", &[], Some("n1")));
    store.upsert(obj(Some("b"), "p3", &[], None));
    store
        .add_indexers(Indexers::from([(
            "has-node".to_owned(),
            IndexFunc::json(|v| vec![v["spec"].get("nodeName").is_some().to_string()]),
        )]))
        .unwrap();
    assert_eq!(sorted(store.by_index("has-node", "true").unwrap()), ["a/p1", "b/p2"]);
    assert_eq!(sorted(store.by_index("has-node", "false").unwrap()), ["b/p3"]);
}

#[test]
fn a_removed_index_is_gone_and_can_be_added_again_with_another_function() {
    let store = Store::new();
    store.upsert(obj(Some("a"), "p1", &[], Some("n1")));
    let by_node = Indexers::from([("v1/node".to_owned(), IndexFunc::field_path("spec.nodeName"))]);
    store.add_indexers(by_node).unwrap();
    assert_eq!(sorted(store.by_index("v1/node", "n1").unwrap()), ["a/p1"]);
    store.remove_indexers(["v1/node", "never-added"]);
    assert!(matches!(store.by_index("v1/node", "n1"), Err(Error::IndexNotFound(_))));
    let by_name = Indexers::from([("v1/node".to_owned(), IndexFunc::field_path("metadata.name"))]);
    store.add_indexers(by_name).unwrap();
    assert_eq!(sorted(store.by_index("v1/node", "p1").unwrap()), ["a/p1"]);
    // Objects added after the removal keep the other indexes exact.
    store.upsert(obj(Some("a"), "p2", &[], None));
    assert_eq!(sorted(store.by_index(NAMESPACE_INDEX, "a").unwrap()), ["a/p1", "a/p2"]);
}

#[test]
fn adding_an_index_twice_or_reading_an_unknown_one_is_an_error() {
    let store = Store::new();
    let again = Indexers::from([(NAMESPACE_INDEX.to_owned(), IndexFunc::field_path("x"))]);
    assert!(matches!(store.add_indexers(again), Err(Error::IndexExists(_))));
    assert!(matches!(store.by_index("nope", "x"), Err(Error::IndexNotFound(_))));
}

#[test]
fn list_selected_filters_by_namespace_and_set_based_selector() {
    let store = Store::new();
    store.upsert(obj(Some("a"), "web", &[("app", "web"), ("env", "prod")], None));
    store.upsert(obj(Some("a"), "db", &[("app", "db"), ("env", "dev")], None));
    store.upsert(obj(Some("b"), "web", &[("app", "web"), ("env", "dev")], None));
    store.upsert(obj(None, "node", &[("app", "web")], None));
    assert_eq!(sorted(store.list_selected(Some("a"), "").unwrap()), ["a/db", "a/web"]);
    assert_eq!(sorted(store.list_selected(None, "app=web").unwrap()), ["a/web", "b/web", "node"]);
    assert_eq!(sorted(store.list_selected(None, "app=web,env in (dev,prod)").unwrap()), ["a/web", "b/web"]);
    assert_eq!(sorted(store.list_selected(Some("a"), "env notin (prod)").unwrap()), ["a/db"]);
    assert_eq!(sorted(store.list_selected(None, "!env").unwrap()), ["node"]);
    assert!(store.list_selected(None, "app=").unwrap().is_empty());
    assert!(store.list_selected(None, "app in").is_err());
}

#[test]
fn retain_keys_returns_what_was_dropped() {
    let store = Store::new();
    store.upsert(obj(Some("a"), "x", &[], None));
    store.upsert(obj(Some("a"), "y", &[], None));
    let keep = HashSet::from([Arc::<str>::from("a/x")]);
    assert_eq!(sorted(store.retain_keys(&keep)), ["a/y"]);
    assert_eq!(store.list_keys(), ["a/x"]);
}

#[test]
fn the_controller_owner_index_finds_owned_objects() {
    let store = Store::new();
    let owned = CachedObject::from_json(
        br#"{"metadata":{"name":"p","namespace":"n","ownerReferences":[
            {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"rs-uid","controller":true}]}}"#
            .to_vec(),
    )
    .unwrap();
    store.upsert(Arc::new(owned));
    assert_eq!(store.index_keys(CONTROLLER_OWNER_INDEX, "rs-uid").unwrap(), ["n/p"]);
}

#[derive(Debug, Clone)]
enum Op {
    Upsert { ns: u8, name: u8, app: Option<u8>, node: Option<u8> },
    Delete { ns: u8, name: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..2u8, 0..6u8, proptest::option::of(0..3u8), proptest::option::of(0..3u8))
            .prop_map(|(ns, name, app, node)| Op::Upsert { ns, name, app, node }),
        1 => (0..2u8, 0..6u8).prop_map(|(ns, name)| Op::Delete { ns, name }),
    ]
}

proptest! {
    #[test]
    fn indexes_always_agree_with_a_brute_force_scan(ops in proptest::collection::vec(op(), 1..60)) {
        let store = Store::new();
        store.add_indexers(Indexers::from([("node".to_owned(), IndexFunc::field_path("spec.nodeName"))])).unwrap();
        for op in ops {
            match op {
                Op::Upsert { ns, name, app, node } => {
                    let app = app.map(|a| format!("app{a}"));
                    let labels: Vec<(&str, &str)> = app.iter().map(|a| ("app", a.as_str())).collect();
                    let node = node.map(|n| format!("n{n}"));
                    store.upsert(obj(Some(&format!("ns{ns}")), &format!("o{name}"), &labels, node.as_deref()));
                }
                Op::Delete { ns, name } => { store.delete(&format!("ns{ns}/o{name}")); }
            }
        }
        let all = store.list();
        for (index, f) in [
            ("node", IndexFunc::field_path("spec.nodeName")),
            (LABEL_INDEX, default_indexers().remove(LABEL_INDEX).unwrap()),
            (NAMESPACE_INDEX, default_indexers().remove(NAMESPACE_INDEX).unwrap()),
        ] {
            let mut expected_values = BTreeSet::new();
            for o in &all {
                let parsed = o.value().unwrap();
                expected_values.extend(f.values(o, Some(&parsed)));
            }
            let actual_values: BTreeSet<String> = store.list_index_values(index).unwrap().into_iter().collect();
            prop_assert_eq!(&actual_values, &expected_values);
            for value in &expected_values {
                let brute: Vec<Arc<CachedObject>> = all.iter()
                    .filter(|o| f.values(o, Some(&o.value().unwrap())).contains(value))
                    .cloned().collect();
                prop_assert_eq!(sorted(store.by_index(index, value).unwrap()), sorted(brute));
            }
        }
        for sel in ["app=app1", "app in (app0,app2)", "!app", "app!=app1"] {
            let selector = parse_label_selector(sel).unwrap();
            let brute: Vec<Arc<CachedObject>> = all.iter()
                .filter(|o| o.namespace() == Some("ns1") && selector.matches(&o.meta().labels.to_map()))
                .cloned().collect();
            prop_assert_eq!(sorted(store.list_selected(Some("ns1"), sel).unwrap()), sorted(brute));
        }
    }
}
