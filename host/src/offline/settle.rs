//! `kubewasm test --until-settled`: a reconcile's writes applied to the fixture state and the
//! key reconciled again, until a round's writes change nothing (the reconcile is idempotent)
//! or the rounds run out (it never settles: on a cluster it would write forever).
//!
//! The state is a model of the API server's, not the server: an apply merges its body into the
//! object (maps key by key, anything else replaced) after dropping the fields the same field
//! manager applied before and no longer names, as server-side apply does for the fields a
//! manager owns; a merge or strategic patch merges (lists replaced); a JSON patch patches; a
//! create adds an object that does not exist; a delete removes it, or marks it deleted while it
//! has finalizers. Events change nothing. An object that changes gets a new resourceVersion.
//! Hand-written: `writer::unchanged` decides the same question against the server's
//! `managedFields`, which fixture objects do not carry.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Harness;
use kubewasm_host::plugin::ObjectKey;
use kubewasm_host::plugin::api::{ApiCall, Caller, Patch};

/// How long a value is shown in a change before it is cut.
const SHOWN_VALUE: usize = 80;

/// An object's identity in the state: group, kind, namespace, name (any version).
type Key = (String, String, Option<String>, String);

/// The fixture objects as the writes of the rounds so far left them.
#[derive(Clone, Debug, Default)]
pub struct State {
    objects: BTreeMap<Key, Value>,
    /// The last body each field manager applied to each object (and its status), so the next
    /// apply drops the fields it no longer names.
    applied: BTreeMap<(Key, String, bool), Value>,
    next_version: u64,
}

fn key_of(object: &Value) -> Key {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let api_version = text("/apiVersion").unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g).to_owned();
    (group, text("/kind").unwrap_or_default(), text("/metadata/namespace"), text("/metadata/name").unwrap_or_default())
}

fn key_of_target(call: &ApiCall) -> Key {
    let target = call.target();
    (target.kind.group.clone(), target.kind.kind.clone(), target.namespace.clone(), target.name.clone())
}

impl State {
    /// The state of `objects` (fixture objects, each with its uid).
    pub fn new(objects: &[Value]) -> Self {
        let objects = objects.iter().map(|o| (key_of(o), o.clone())).collect();
        Self { objects, applied: BTreeMap::new(), next_version: 1 }
    }

    /// Every object, in key order.
    pub fn objects(&self) -> Vec<Value> {
        self.objects.values().cloned().collect()
    }

    /// Applies `call`, made as field manager `manager`, to the state: what it changed, one line
    /// per field (`apply v1 ConfigMap a/c: data.count: "1" → "2"`); empty when nothing changed.
    pub fn write(&mut self, manager: &str, call: &ApiCall) -> Vec<String> {
        let key = key_of_target(call);
        let before = self.objects.get(&key).cloned();
        let after = match call {
            ApiCall::Apply { object, .. } => self.apply(&key, manager, &object.sent_body(), false, before.clone()),
            ApiCall::ApplyStatus { object, .. } => {
                before.clone().map(|b| self.apply(&key, manager, &object.body, true, Some(b))).unwrap_or_default()
            }
            ApiCall::Patch { patch, options, .. } => before.clone().map(|mut object| {
                let (Patch::Merge(body) | Patch::Strategic(body) | Patch::Json(body)) = patch;
                match patch {
                    Patch::Json(_) => {
                        if let Ok(ops) = serde_json::from_value::<json_patch::Patch>(body.clone()) {
                            let _ = json_patch::patch(&mut object, &ops);
                        }
                    }
                    _ if options.status => json_patch::merge(&mut object, &status_only(body)),
                    _ => json_patch::merge(&mut object, body),
                }
                object
            }),
            ApiCall::Create(object) => Some(before.clone().unwrap_or_else(|| created(&object.sent_body()))),
            ApiCall::Delete { .. } => before.clone().and_then(deleted),
            ApiCall::Get(_) | ApiCall::Event(_) => before.clone(),
        };
        let mut changes = Vec::new();
        diff("", before.as_ref(), after.as_ref(), &mut changes);
        let changes: Vec<String> = changes.into_iter().map(|c| format!("{}: {c}", call.summary())).collect();
        match after {
            Some(mut after) if !changes.is_empty() => {
                after["metadata"]["resourceVersion"] = self.next_version.to_string().into();
                self.next_version += 1;
                self.objects.insert(key, after);
            }
            Some(_) => {}
            None => {
                self.objects.remove(&key);
            }
        }
        changes
    }

    /// `existing` with `body` applied by `manager` (its status only, if `status`).
    fn apply(
        &mut self,
        key: &Key,
        manager: &str,
        body: &Value,
        status: bool,
        existing: Option<Value>,
    ) -> Option<Value> {
        let mut body = body.clone();
        if let Some(body) = body.as_object_mut() {
            match status {
                true => body.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")),
                false => drop(body.remove("status")),
            }
        }
        let previous = self.applied.insert((key.clone(), manager.to_owned(), status), body.clone());
        let Some(mut object) = existing else { return Some(created(&body)) };
        if let Some(previous) = previous {
            drop_unnamed(&mut object, &previous, &body);
        }
        merge(&mut object, &body);
        Some(object)
    }
}

/// `object` as created: a uid derived from its kind and name, like a fixture's.
fn created(object: &Value) -> Value {
    let mut object = object.clone();
    if object.pointer("/metadata/uid").is_none() && object.pointer("/metadata/name").is_some() {
        object = super::fixtures::with_uid(object);
    }
    object
}

/// What a delete leaves: nothing, or the object marked deleted while finalizers hold it.
fn deleted(mut object: Value) -> Option<Value> {
    let held = object.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    if !held {
        return None;
    }
    if object.pointer("/metadata/deletionTimestamp").is_none() {
        object["metadata"]["deletionTimestamp"] = "1970-01-01T00:00:00Z".into();
    }
    Some(object)
}

fn status_only(body: &Value) -> Value {
    serde_json::json!({ "status": body.get("status").cloned().unwrap_or(Value::Null) })
}

/// Merges `body` into `object`: maps key by key, anything else replaced.
fn merge(object: &mut Value, body: &Value) {
    match (object, body) {
        (Value::Object(object), Value::Object(body)) => {
            for (k, v) in body {
                merge(object.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (object, body) => *object = body.clone(),
    }
}

/// Removes from `object` the fields `previous` named and `body` does not.
fn drop_unnamed(object: &mut Value, previous: &Value, body: &Value) {
    let (Value::Object(object), Value::Object(previous)) = (object, previous) else { return };
    for (k, was) in previous {
        match body.get(k) {
            None => drop(object.remove(k)),
            Some(now) => {
                if let Some(field) = object.get_mut(k) {
                    drop_unnamed(field, was, now);
                }
            }
        }
    }
}

/// One line per field that differs between `before` and `after`, under `path`.
fn diff(path: &str, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<String>) {
    if path == "metadata.resourceVersion" || before == after {
        return;
    }
    if let (Some(Value::Object(b)), Some(Value::Object(a))) = (before, after) {
        let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for k in keys {
            let path = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            diff(&path, b.get(k), a.get(k), out);
        }
        return;
    }
    let at = if path.is_empty() { "the object" } else { path };
    out.push(format!("{at}: {} → {}", shown(before), shown(after)));
}

fn shown(value: Option<&Value>) -> String {
    let Some(value) = value else { return "(none)".into() };
    let mut text = value.to_string();
    if text.len() > SHOWN_VALUE {
        text.truncate(text.floor_char_boundary(SHOWN_VALUE));
        text.push('…');
    }
    text
}

/// Reconciles `key` until a round's writes change nothing, from `objects` (the fixtures), at
/// most `max_rounds` times: the rounds it took (1 when its first reconcile writes nothing that
/// changes the fixtures). Leaves the harness's caches as the fixtures.
pub async fn until_settled(
    harness: &Harness,
    objects: &[Value],
    key: &ObjectKey,
    first: Vec<ApiCall>,
    max_rounds: u32,
) -> Result<u32, NotSettled> {
    let manager = Caller::new(harness.plugin().name()).manager;
    let mut state = State::new(objects);
    let (mut calls, mut before_last, mut round) = (first, Vec::new(), 1);
    let result = loop {
        let changes: Vec<String> = calls.iter().flat_map(|call| state.write(&manager, call)).collect();
        if changes.is_empty() {
            break Ok(round);
        }
        if round >= max_rounds {
            break Err(NotSettled { rounds: round, before_last, last: changes });
        }
        harness.reseed(&state.objects());
        round += 1;
        calls = harness.reconcile_calls(key).await.1;
        before_last = changes;
    };
    harness.reseed(objects);
    result
}

/// Why a reconcile did not settle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "did not settle in {rounds} rounds: its writes still change the state (idempotence)\n  round {}:\n    {}\n  round {rounds}:\n    {}",
    rounds - 1,
    .before_last.join("\n    "),
    .last.join("\n    ")
)]
pub struct NotSettled {
    /// Reconciles made.
    pub rounds: u32,
    /// What the round before the last changed.
    pub before_last: Vec<String>,
    /// What the last round changed.
    pub last: Vec<String>,
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
