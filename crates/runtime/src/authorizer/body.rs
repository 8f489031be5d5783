//! What a write's body would change: the comparisons the authorizer makes on objects and patches.

use serde_json::Value;

use crate::api::{PLUGIN_LABEL, Patch};

/// The mark as a JSON pointer segment (`/` escaped as `~1`).
const PLUGIN_LABEL_POINTER: &str = "/metadata/labels/kubewasm.dev~1plugin";

/// Metadata a write may name without changing anything: the object's identity and its
/// resourceVersion (a precondition, not a change).
const IDENTITY: &[&str] = &["name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp"];

/// The plugin named by `object`'s mark, if any.
pub fn mark(object: &Value) -> Option<&str> {
    object.pointer("/metadata/labels")?.get(PLUGIN_LABEL)?.as_str()
}

/// Whether `object` was made by the plugin with field manager `manager`: the host's mark names
/// `plugin`, or (objects made before the mark, so unmarked) an entry of its managedFields names
/// `manager`. A mark naming another plugin decides, as it does for the admission policy: a
/// handover (`kubewasm handover`) moves the mark, and the old manager's entries do not keep the
/// object the old plugin's.
pub fn made_by(object: &Value, plugin: &str, manager: &str) -> bool {
    match mark(object) {
        Some(maker) => maker == plugin,
        None => object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|entries| entries.iter().any(|e| e.get("manager").and_then(Value::as_str) == Some(manager))),
    }
}

/// Why an object body may not be written by `plugin`: it sets managedFields, or a mark naming
/// another plugin.
pub fn object_refusal(object: &Value, plugin: &str) -> Option<String> {
    if object.pointer("/metadata/managedFields").is_some() {
        return Some("a plugin may not write metadata.managedFields".into());
    }
    match object.pointer("/metadata/labels").and_then(|l| l.get(PLUGIN_LABEL)) {
        Some(Value::String(p)) if p == plugin => None,
        Some(other) => Some(format!(
            "the label {PLUGIN_LABEL} is the host's mark of who made an object; {other} is not this plugin"
        )),
        None => None,
    }
}

/// Why no plugin may send this body to a Service: it sets `spec.externalIPs`, which makes every
/// node route the cluster's traffic for those addresses to the Service (CVE-2020-8554; Kubernetes
/// ships the DenyServiceExternalIPs admission plugin for it). A JSON patch is judged by every
/// value it writes at or above the field, a merge patch by the field it sets.
pub fn external_ips_refusal(object: Option<&Value>, patch: Option<&Patch>) -> Option<String> {
    let sets = |v: &Value, at: &str| v.pointer(at).and_then(Value::as_array).is_some_and(|ips| !ips.is_empty());
    let refused = match (object, patch) {
        (Some(object), _) => sets(object, "/spec/externalIPs"),
        (_, Some(Patch::Merge(body) | Patch::Strategic(body))) => sets(body, "/spec/externalIPs"),
        (_, Some(Patch::Json(ops))) => ops.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                let (path, value) = (op.get("path").and_then(Value::as_str).unwrap_or(""), op.get("value"));
                match op.get("op").and_then(Value::as_str) {
                    Some("add" | "replace") => match path {
                        "" => value.is_some_and(|v| sets(v, "/spec/externalIPs")),
                        "/spec" => value.is_some_and(|v| sets(v, "/externalIPs")),
                        p => p.starts_with("/spec/externalIPs"),
                    },
                    Some("copy" | "move") => {
                        path.is_empty() || path == "/spec" || path.starts_with("/spec/externalIPs")
                    }
                    _ => false,
                }
            })
        }),
        _ => false,
    };
    refused.then(|| {
        "no plugin sets a Service's spec.externalIPs: they route the cluster's traffic for any address to it \
         (CVE-2020-8554)"
            .to_owned()
    })
}

/// Why a patch may not be sent by `plugin`: it touches managedFields, the host's mark (unless
/// setting it to `plugin`) or, with `guard_owners`, the ownerReferences.
pub fn patch_refusal(patch: &Patch, plugin: &str, guard_owners: bool) -> Option<String> {
    let guarded = |path: &str| {
        let on = |p: &str| path == p || p.starts_with(&format!("{path}/")) || path.starts_with(&format!("{p}/"));
        if on("/metadata/managedFields") {
            Some("a plugin may not write metadata.managedFields".to_owned())
        } else if on(PLUGIN_LABEL_POINTER) {
            Some(format!("the label {PLUGIN_LABEL} is the host's mark of who made an object"))
        } else if guard_owners && on("/metadata/ownerReferences") {
            Some("a plugin without a write grant may not change the ownerReferences of what it made".to_owned())
        } else {
            None
        }
    };
    match patch {
        Patch::Json(ops) => ops.as_array()?.iter().find_map(|op| {
            if op.get("op").and_then(Value::as_str) == Some("test") {
                return None;
            }
            let paths = ["path", "from"].into_iter().filter_map(|k| op.get(k).and_then(Value::as_str));
            paths.into_iter().find_map(|p| if p.is_empty() { guarded("/metadata") } else { guarded(p) })
        }),
        Patch::Merge(body) | Patch::Strategic(body) => {
            let meta = body.get("metadata")?;
            if meta.is_null() {
                return guarded("/metadata");
            }
            if meta.get("managedFields").is_some() {
                return guarded("/metadata/managedFields");
            }
            if guard_owners && meta.get("ownerReferences").is_some() {
                return guarded("/metadata/ownerReferences");
            }
            match meta.get("labels") {
                Some(Value::Null) => guarded("/metadata/labels"),
                Some(labels) => match labels.get(PLUGIN_LABEL) {
                    Some(Value::String(p)) if p == plugin => None,
                    Some(_) => guarded(PLUGIN_LABEL_POINTER),
                    None => None,
                },
                None => None,
            }
        }
    }
}

/// What writing a body to the status subresource would do to an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusEffect {
    /// It changes nothing outside `status`.
    OnlyStatus,
    /// It changes this field outside `status` (a JSON pointer).
    Changes(String),
    /// The patch does not apply to the object as given (a JSON patch whose path or `from` is
    /// missing, or whose `test` fails), and why.
    DoesNotApply(String),
}

/// What writing `body` to the status subresource of `existing` does outside `status`, judged on
/// the object it would leave, not on how the body is spelled: the body is applied to
/// `existing` (an object body or a merge patch merged, a JSON patch applied op by op) and the
/// result compared with `existing` everywhere but `status`. A `move` whose `path` is under
/// `/status` still removes its `from`, and so is refused. Strategic merge patches are merged as
/// merge patches, which replace the lists a strategic patch would merge: that can only find a
/// change where there is none, never miss one; their directives (`$patch`, `$retainKeys`, …)
/// are refused outside `status`. The object's identity and resourceVersion (a precondition,
/// not a change) may be named with any value.
pub fn status_write_effect(body: &StatusBody<'_>, existing: &Value) -> StatusEffect {
    let mut after = existing.clone();
    match body {
        StatusBody::Object(object) => json_patch::merge(&mut after, object),
        StatusBody::Patch(Patch::Merge(patch)) => json_patch::merge(&mut after, patch),
        StatusBody::Patch(Patch::Strategic(patch)) => {
            if let Some(path) = directive_outside_status(patch, "") {
                return StatusEffect::Changes(path);
            }
            json_patch::merge(&mut after, patch);
        }
        StatusBody::Patch(Patch::Json(ops)) => {
            let ops: json_patch::Patch = match serde_json::from_value(ops.clone()) {
                Ok(ops) => ops,
                Err(e) => return StatusEffect::DoesNotApply(format!("it is not a JSON patch: {e}")),
            };
            if let Err(e) = json_patch::patch(&mut after, &ops) {
                return StatusEffect::DoesNotApply(e.to_string());
            }
        }
    }
    match difference_outside_status(existing, &after) {
        Some(path) => StatusEffect::Changes(path),
        None => StatusEffect::OnlyStatus,
    }
}

/// The first path outside `status` at which `before` and `after` differ; the object's kind and
/// metadata's identity fields are left out of the comparison.
fn difference_outside_status(before: &Value, after: &Value) -> Option<String> {
    let top = |k: &str| !matches!(k, "status" | "apiVersion" | "kind");
    let (empty, meta) = (Value::Null, |k: &str| !IDENTITY.contains(&k));
    object_difference(before, after, "", &top).or_else(|| {
        let (b, a) = (before.get("metadata").unwrap_or(&empty), after.get("metadata").unwrap_or(&empty));
        object_difference(b, a, "/metadata", &meta)
    })
}

/// The first path under `path` at which `before` and `after` differ: objects key by key (those
/// `compared` says, in key order; `metadata` at the top is compared by the caller), anything
/// else as a whole.
fn object_difference(before: &Value, after: &Value, path: &str, compared: &dyn Fn(&str) -> bool) -> Option<String> {
    let (Value::Object(b), Value::Object(a)) = (before, after) else {
        return (before != after).then(|| path.to_owned());
    };
    let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    keys.into_iter().filter(|k| compared(k) && !(path.is_empty() && k.as_str() == "metadata")).find_map(|key| {
        let here = format!("{path}/{}", pointer_segment(key));
        match (b.get(key), a.get(key)) {
            (Some(b), Some(a)) => object_difference(b, a, &here, &|_| true),
            (None, None) => None,
            _ => Some(here),
        }
    })
}

/// The first key outside `status` of a strategic merge patch that is a directive (`$patch`,
/// `$retainKeys`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…`), as a JSON pointer.
fn directive_outside_status(patch: &Value, path: &str) -> Option<String> {
    match patch {
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let here = format!("{path}/{}", pointer_segment(k));
            if path.is_empty() && k == "status" {
                None
            } else if k.starts_with('$') {
                Some(here)
            } else {
                directive_outside_status(v, &here)
            }
        }),
        Value::Array(items) => items.iter().find_map(|v| directive_outside_status(v, path)),
        _ => None,
    }
}

fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// What a status write carries: a whole object (apply) or a patch.
pub enum StatusBody<'a> {
    /// An apply's object.
    Object(&'a Value),
    /// A patch.
    Patch(&'a Patch),
}
