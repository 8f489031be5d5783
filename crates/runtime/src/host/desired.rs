//! A reconcile's desired state made so (contract 0.3): the children applied as the plugin,
//! concurrently; what the plugin made for the key and no longer wants pruned; then the status
//! applied. Every write is one more caller of [`request_all`](PluginCtx::request_all), the path
//! every host function's request takes (budget, write rate, authorizer, mark, elision, Events).

use std::collections::HashSet;

use kube::core::GroupVersionKind;
use kubewasm_informer::{CONTROLLER_OWNER_INDEX, ObjectKey};
use serde_json::{Value, json};

use crate::api::{ApiCall, CallError, DeleteOptions, ObjectRef, PLUGIN_LABEL, Preconditions, TypedObject, parse_body};
use crate::outcome::{CallFailed, Desired};
use crate::registration::Registration;
use crate::state::PluginCtx;

/// One object, whatever the version it is named in: a desired child, or a candidate for pruning.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Child {
    group: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl Child {
    fn of(target: &ObjectRef) -> Self {
        let (group, kind) = (target.kind.group.clone(), target.kind.kind.clone());
        Self { group, kind, namespace: target.namespace.clone(), name: target.name.clone() }
    }
}

impl PluginCtx {
    /// Makes `desired` so for `key` of `registration`'s for kind: every child applied (at once,
    /// bounded), then, only if they all were, every object of an owned kind with a prune policy
    /// that the plugin made for the key (its mark, a controller ownerReference to the key's
    /// cached object) and that is not a child deleted, then the status applied. A failure
    /// stops before the next step and lists every outcome of its step.
    /// The desired state is kept in the call's state afterwards, made so or not, for whoever
    /// shows it (`Plugin::reconcile_with_desired`).
    pub(crate) async fn make_desired(
        &mut self,
        registration: &Registration,
        key: &ObjectKey,
        desired: Desired,
    ) -> wasmtime::Result<Result<(), CallFailed>> {
        let made = self.make_desired_so(registration, key, &desired).await;
        self.desired = Some(desired);
        made
    }

    async fn make_desired_so(
        &mut self,
        registration: &Registration,
        key: &ObjectKey,
        desired: &Desired,
    ) -> wasmtime::Result<Result<(), CallFailed>> {
        let for_kind = &registration.for_kind;
        let owner = self.cached_owner(for_kind, key);
        let calls: Vec<_> = desired.children.iter().map(|child| apply_call(child, owner.as_ref(), key)).collect();
        let wanted: HashSet<Child> = calls.iter().flatten().map(|call| Child::of(call.target())).collect();
        let summaries: Vec<_> =
            calls.iter().map(|c| c.as_ref().map_or_else(|_| "apply".into(), ApiCall::summary)).collect();
        let applied = self.request_all("desired.apply", calls).await?;
        if let Some(failed) = failures(&summaries, &applied, false) {
            return Ok(Err(CallFailed::Desired(failed)));
        }
        let Some(owner) = owner else { return Ok(Ok(())) };
        let prunes = match self.prunes(registration, &owner, &wanted) {
            Ok(prunes) => prunes,
            Err(e) => return Ok(Err(CallFailed::Desired(format!("listing what to prune: {e}")))),
        };
        let summaries: Vec<_> = prunes.iter().map(ApiCall::summary).collect();
        let pruned = self.request_all("desired.prune", prunes.into_iter().map(Ok).collect()).await?;
        if let Some(failed) = failures(&summaries, &pruned, true) {
            return Ok(Err(CallFailed::Desired(failed)));
        }
        let Some(status) = &desired.status else { return Ok(Ok(())) };
        let call = status_call(status, for_kind, key);
        let summary = vec![call.as_ref().map_or_else(|_| "apply status".into(), ApiCall::summary)];
        let applied = self.request_all("desired.status", vec![call]).await?;
        Ok(failures(&summary, &applied, false).map_or(Ok(()), |failed| Err(CallFailed::Desired(failed))))
    }

    /// The key's object as the plugin's cache holds it, if it does.
    fn cached_owner(&self, for_kind: &GroupVersionKind, key: &ObjectKey) -> Option<Value> {
        let bytes = self.shared.cache.get(for_kind, key.namespace(), key.name()).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// Deletes of what the plugin made for `owner` and no longer wants, kind by owned kind with a
    /// prune policy, each on the uid it was judged on; the cache's error if it cannot say, so
    /// that nothing is left unpruned without a word.
    fn prunes(
        &self,
        registration: &Registration,
        owner: &Value,
        wanted: &HashSet<Child>,
    ) -> Result<Vec<ApiCall>, CallError> {
        let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else { return Ok(Vec::new()) };
        let plugin = self.shared.authorizer.plugin();
        let mark = format!("/metadata/labels/{}", PLUGIN_LABEL.replace('/', "~1"));
        let mut prunes = Vec::new();
        for (kind, policy) in registration.owns.iter().zip(&registration.owns_prune) {
            let Some(propagation) = *policy else { continue };
            let objects = self.shared.cache.by_index(kind, CONTROLLER_OWNER_INDEX, uid, usize::MAX)?;
            for object in objects.iter().filter_map(|bytes| serde_json::from_slice::<Value>(bytes).ok()) {
                let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
                let (Some(name), Some(child_uid)) = (text("/metadata/name"), text("/metadata/uid")) else { continue };
                let target = ObjectRef { kind: kind.clone(), namespace: text("/metadata/namespace"), name };
                if text(&mark).as_deref() != Some(plugin) || wanted.contains(&Child::of(&target)) {
                    continue;
                }
                let preconditions = Preconditions { uid: Some(child_uid), resource_version: None };
                let options = DeleteOptions { preconditions, propagation, judged_uid: None };
                prunes.push(ApiCall::Delete { target, options });
            }
        }
        Ok(prunes)
    }
}

/// The apply of one desired child, with a controller ownerReference to `owner` added when it
/// has none and Kubernetes allows one (a cluster-scoped owner, or the child in its namespace).
fn apply_call(child: &[u8], owner: Option<&Value>, key: &ObjectKey) -> Result<ApiCall, CallError> {
    let mut body = parse_body(child, "desired child")?;
    if let Some(owner) = owner {
        let same_scope = key.namespace().is_none_or(|ns| body.pointer("/metadata/namespace") == Some(&json!(ns)));
        let refs = body.pointer("/metadata/ownerReferences").and_then(Value::as_array);
        let controlled = refs.into_iter().flatten().any(|r| r.get("controller") == Some(&json!(true)));
        if same_scope
            && !controlled
            && let Some(reference) = controller_reference(owner)
        {
            let meta = body.as_object_mut().and_then(|o| o.get_mut("metadata")).and_then(Value::as_object_mut);
            if let Some(meta) = meta {
                let refs = meta.entry("ownerReferences").or_insert_with(|| json!([]));
                if let Some(refs) = refs.as_array_mut() {
                    refs.push(reference);
                }
            }
        }
    }
    TypedObject::from_value(body).map(|object| ApiCall::Apply { object, force: true })
}

/// A controller ownerReference to `owner` (`controller` and `blockOwnerDeletion` set), if it
/// has the fields one needs.
fn controller_reference(owner: &Value) -> Option<Value> {
    let text = |pointer: &str| owner.pointer(pointer).and_then(Value::as_str);
    Some(json!({
        "apiVersion": text("/apiVersion")?,
        "kind": text("/kind")?,
        "name": text("/metadata/name")?,
        "uid": text("/metadata/uid")?,
        "controller": true,
        "blockOwnerDeletion": true,
    }))
}

/// The status apply of the key's object: `status` (the field's JSON) under its kind and key.
fn status_call(status: &[u8], for_kind: &GroupVersionKind, key: &ObjectKey) -> Result<ApiCall, CallError> {
    let status = parse_body(status, "desired status")?;
    if !status.is_object() {
        return Err(CallError::Invalid("the desired status is not a JSON object".into()));
    }
    let mut metadata = json!({ "name": key.name() });
    if let Some(namespace) = key.namespace() {
        metadata["namespace"] = json!(namespace);
    }
    let body =
        json!({ "apiVersion": for_kind.api_version(), "kind": for_kind.kind, "metadata": metadata, "status": status });
    TypedObject::from_value(body).map(|object| ApiCall::ApplyStatus { object, force: true })
}

/// `None` if every call of a step succeeded (a prune that found its object gone did too); else
/// every call's outcome, failures first.
fn failures<T>(summaries: &[String], results: &[Result<T, CallError>], gone_is_done: bool) -> Option<String> {
    let ok = |r: &Result<T, CallError>| r.is_ok() || (gone_is_done && matches!(r, Err(CallError::NotFound)));
    if results.iter().all(ok) {
        return None;
    }
    let (mut failed, mut done) = (Vec::new(), 0);
    for (summary, result) in summaries.iter().zip(results) {
        match result {
            Err(e) if !ok(result) => failed.push(format!("{summary}: {e}")),
            _ => done += 1,
        }
    }
    Some(format!("{} failed ({}); {done} succeeded", failed.len(), failed.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(namespace: Option<&str>) -> Value {
        let mut owner = json!({"apiVersion": "example.dev/v1", "kind": "Foo", "metadata": {"name": "a", "uid": "u-a"}});
        if let Some(ns) = namespace {
            owner["metadata"]["namespace"] = json!(ns);
        }
        owner
    }

    fn child(namespace: &str) -> Vec<u8> {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": namespace}})
            .to_string()
            .into_bytes()
    }

    fn references(call: &ApiCall) -> Vec<Value> {
        let ApiCall::Apply { object, .. } = call else { panic!("not an apply: {call:?}") };
        object.body.pointer("/metadata/ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default()
    }

    #[test]
    fn a_child_without_a_controller_gets_one_to_the_key_object_in_its_namespace() {
        let key = ObjectKey::new(Some("ns"), "a");
        let call = apply_call(&child("ns"), Some(&owner(Some("ns"))), &key).unwrap();
        let refs = references(&call);
        assert_eq!(refs.len(), 1);
        assert_eq!((refs[0]["uid"].as_str(), refs[0]["controller"].as_bool()), (Some("u-a"), Some(true)));
        assert!(matches!(call, ApiCall::Apply { force: true, .. }), "children are applied with force");
    }

    #[test]
    fn no_controller_reference_is_added_across_namespaces_or_over_the_plugins_own() {
        let key = ObjectKey::new(Some("ns"), "a");
        let elsewhere = apply_call(&child("other"), Some(&owner(Some("ns"))), &key).unwrap();
        assert!(references(&elsewhere).is_empty(), "a namespaced owner cannot own an object in another namespace");
        let mut own = serde_json::from_slice::<Value>(&child("ns")).unwrap();
        own["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u-x", "controller": true}]);
        let own = apply_call(own.to_string().as_bytes(), Some(&owner(Some("ns"))), &key).unwrap();
        assert_eq!(references(&own).len(), 1, "the plugin's own controller reference is kept alone");
        let cluster = apply_call(&child("any"), Some(&owner(None)), &ObjectKey::new(None, "a")).unwrap();
        assert_eq!(references(&cluster).len(), 1, "a cluster-scoped owner may own a namespaced child");
    }

    #[test]
    fn a_desired_status_is_applied_to_the_key_objects_status_and_must_be_an_object() {
        let kind = GroupVersionKind::gvk("example.dev", "v1", "Foo");
        let call = status_call(br#"{"ready":true}"#, &kind, &ObjectKey::new(Some("ns"), "a")).unwrap();
        let ApiCall::ApplyStatus { object, force: true } = &call else { panic!("{call:?}") };
        assert_eq!(object.body["apiVersion"], "example.dev/v1");
        assert_eq!(
            (object.body["metadata"]["namespace"].as_str(), object.body["status"]["ready"].as_bool()),
            (Some("ns"), Some(true))
        );
        let err = status_call(b"[1]", &kind, &ObjectKey::new(None, "a")).unwrap_err();
        assert!(matches!(err, CallError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn a_step_fails_with_every_outcome_and_a_prune_of_an_object_already_gone_succeeds() {
        let summaries = vec!["apply ConfigMap a".to_owned(), "apply Secret b".to_owned()];
        let ok: Vec<Result<(), CallError>> = vec![Ok(()), Ok(())];
        assert_eq!(failures(&summaries, &ok, false), None);
        let one_failed = vec![Ok(()), Err(CallError::Forbidden("no grant".into()))];
        let message = failures(&summaries, &one_failed, false).unwrap();
        assert!(
            message.contains("apply Secret b: forbidden: no grant") && message.ends_with("1 succeeded"),
            "{message}"
        );
        let gone = vec![Ok(()), Err(CallError::NotFound)];
        assert_eq!(failures(&summaries, &gone, true), None, "a prune that found nothing to delete is done");
    }
}
