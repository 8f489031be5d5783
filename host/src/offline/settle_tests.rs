use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use super::*;
use kubewasm_host::plugin::api::{DeleteOptions, ObjectRef, PatchOptions, TypedObject};

const MANAGER: &str = "kubewasm/p";

fn apply(body: Value) -> ApiCall {
    ApiCall::Apply { object: TypedObject::from_json(body.to_string().as_bytes()).unwrap(), force: true }
}

fn config_map(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}, "data": data})
}

fn target() -> ObjectRef {
    ObjectRef { kind: GroupVersionKind::gvk("", "v1", "ConfigMap"), namespace: Some("a".into()), name: "c".into() }
}

fn only(state: &State) -> Value {
    let objects = state.objects();
    assert_eq!(objects.len(), 1, "{objects:?}");
    objects[0].clone()
}

#[test]
fn the_same_apply_twice_changes_the_state_once() {
    let mut state = State::new(&[]);
    let first = state.write(MANAGER, &apply(config_map(json!({"k": "v"}))));
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].starts_with("apply v1 ConfigMap a/c: the object: (none) → {"), "{first:?}");
    assert!(only(&state)["metadata"]["uid"].is_string(), "a created object gets a uid");
    assert!(state.write(MANAGER, &apply(config_map(json!({"k": "v"})))).is_empty());
}

#[test]
fn an_apply_drops_the_fields_its_manager_applied_before_and_no_longer_names_and_keeps_others() {
    let mut state = State::new(&[config_map(json!({"theirs": "1"}))]);
    state.write(MANAGER, &apply(config_map(json!({"mine": "1", "old": "x"}))));
    let changes = state.write(MANAGER, &apply(config_map(json!({"mine": "2"}))));
    assert_eq!(
        changes,
        ["apply v1 ConfigMap a/c: data.mine: \"1\" → \"2\"", "apply v1 ConfigMap a/c: data.old: \"x\" → (none)"]
    );
    assert_eq!(only(&state)["data"], json!({"theirs": "1", "mine": "2"}));
}

#[test]
fn a_changed_object_gets_a_new_resource_version_and_an_unchanged_one_keeps_it() {
    let mut state = State::new(&[config_map(json!({"k": "v"}))]);
    let patch = |v: &str| ApiCall::Patch {
        target: target(),
        patch: Patch::Merge(json!({"data": {"k": v}})),
        options: PatchOptions::default(),
    };
    assert_eq!(state.write(MANAGER, &patch("w")), ["patch v1 ConfigMap a/c: data.k: \"v\" → \"w\""]);
    let version = only(&state)["metadata"]["resourceVersion"].clone();
    assert!(version.is_string());
    assert!(state.write(MANAGER, &patch("w")).is_empty());
    assert_eq!(only(&state)["metadata"]["resourceVersion"], version);
}

#[test]
fn a_delete_removes_the_object_or_marks_it_while_finalizers_hold_it() {
    let delete = ApiCall::Delete { target: target(), options: DeleteOptions::default() };
    let mut state = State::new(&[config_map(json!({}))]);
    assert_eq!(state.write(MANAGER, &delete).len(), 1);
    assert!(state.objects().is_empty());
    assert!(state.write(MANAGER, &delete).is_empty(), "deleting what is gone changes nothing");

    let mut held = config_map(json!({}));
    held["metadata"]["finalizers"] = json!(["x/y"]);
    let mut state = State::new(&[held]);
    assert_eq!(state.write(MANAGER, &delete).len(), 1);
    assert!(only(&state)["metadata"]["deletionTimestamp"].is_string());
    assert!(state.write(MANAGER, &delete).is_empty());
}

#[test]
fn a_create_of_an_existing_object_and_an_event_change_nothing() {
    let mut state = State::new(&[config_map(json!({"k": "v"}))]);
    let create = ApiCall::Create(TypedObject::from_json(config_map(json!({"k": "w"})).to_string().as_bytes()).unwrap());
    assert!(state.write(MANAGER, &create).is_empty());
    let event = ApiCall::Event(kubewasm_host::plugin::api::EventRecord {
        regarding: target(),
        warning: false,
        reason: "R".into(),
        note: "n".into(),
        by_host: false,
    });
    assert!(state.write(MANAGER, &event).is_empty());
    assert_eq!(only(&state)["data"]["k"], "v");
}

#[test]
fn a_status_apply_changes_only_the_status_of_an_existing_object() {
    let mut state = State::new(&[config_map(json!({"k": "v"}))]);
    let mut body = config_map(json!({"k": "ignored"}));
    body["status"] = json!({"ready": true});
    let call =
        ApiCall::ApplyStatus { object: TypedObject::from_json(body.to_string().as_bytes()).unwrap(), force: false };
    assert_eq!(state.write(MANAGER, &call), ["apply status v1 ConfigMap a/c: status: (none) → {\"ready\":true}"]);
    assert_eq!(only(&state)["data"]["k"], "v");
}

#[test]
fn not_settled_says_what_the_last_two_rounds_changed() {
    let e = NotSettled { rounds: 3, before_last: vec!["x: 1 → 2".into()], last: vec!["x: 2 → 3".into()] };
    let text = e.to_string();
    assert!(text.starts_with("did not settle in 3 rounds"), "{text}");
    assert!(text.contains("round 2:\n    x: 1 → 2\n  round 3:\n    x: 2 → 3"), "{text}");
}
