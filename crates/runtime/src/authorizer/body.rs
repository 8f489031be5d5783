//! What a write's body would change: the comparisons the authorizer makes on objects and patches.

use serde_json::Value;

use super::super::host::Patch;

/// The label the host puts on every object a plugin makes: `kubewasm.dev/plugin: <name>`.
pub const PLUGIN_LABEL: &str = "kubewasm.dev/plugin";

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
/// `plugin`, or (objects made before the mark) an entry of its managedFields names `manager`.
pub fn made_by(object: &Value, plugin: &str, manager: &str) -> bool {
    mark(object) == Some(plugin)
        || object
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|entries| entries.iter().any(|e| e.get("manager").and_then(Value::as_str) == Some(manager)))
}

/// Adds the host's mark naming `plugin` to an object body.
pub fn add_mark(object: &mut Value, plugin: &str) {
    let Some(object) = object.as_object_mut() else { return };
    let meta = object.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else { return };
    let labels = meta.entry("labels").or_insert_with(|| Value::Object(Default::default()));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(PLUGIN_LABEL.to_owned(), Value::String(plugin.to_owned()));
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

/// The first field outside `status` that writing `body` to the status subresource of
/// `existing` would change, as a JSON pointer; `None` if it changes only `status`. An object
/// body or a merge/strategic patch changes a field when it names it with another value (`null`
/// removes); a JSON patch changes every path it names but `/status…` (`test` ops change nothing).
pub fn status_write_changes(body: &StatusBody<'_>, existing: &Value) -> Option<String> {
    match body {
        StatusBody::Object(_) | StatusBody::Patch(Patch::Merge(_) | Patch::Strategic(_)) => {
            let object = match body {
                StatusBody::Object(object) => *object,
                StatusBody::Patch(Patch::Merge(object) | Patch::Strategic(object)) => object,
                StatusBody::Patch(Patch::Json(_)) => return None,
            };
            let object = object.as_object()?;
            object.iter().find_map(|(key, value)| match key.as_str() {
                "status" | "apiVersion" | "kind" => None,
                "metadata" => {
                    let meta = value.as_object()?;
                    meta.iter()
                        .filter(|(k, _)| !IDENTITY.contains(&k.as_str()))
                        .find_map(|(k, v)| {
                            changes(v, existing.pointer("/metadata").and_then(|m| m.get(k)), &format!("/metadata/{k}"))
                        })
                        .or_else(|| value.is_null().then(|| "/metadata".to_owned()))
                }
                _ => changes(value, existing.get(key), &format!("/{key}")),
            })
        }
        StatusBody::Patch(Patch::Json(ops)) => ops.as_array()?.iter().find_map(|op| {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            let status = path == "/status" || path.starts_with("/status/");
            let identity = IDENTITY.iter().any(|k| path == format!("/metadata/{k}"));
            let harmless = op.get("op").and_then(Value::as_str) == Some("test") || status || identity;
            (!harmless).then(|| path.to_owned())
        }),
    }
}

/// What a status write carries: a whole object (apply) or a patch.
pub enum StatusBody<'a> {
    /// An apply's object.
    Object(&'a Value),
    /// A patch.
    Patch(&'a Patch),
}

/// The first path at which writing `wanted` over `current` changes something, merge-patch style:
/// objects compare key by key (a key absent from `wanted` is left alone), anything else must be
/// equal (`null` over an absent field changes nothing).
fn changes(wanted: &Value, current: Option<&Value>, path: &str) -> Option<String> {
    match (wanted, current) {
        (Value::Null, None | Some(Value::Null)) => None,
        (Value::Object(w), Some(Value::Object(c))) => w
            .iter()
            .find_map(|(k, v)| changes(v, c.get(k), &format!("{path}/{}", k.replace('~', "~0").replace('/', "~1")))),
        (Value::Object(w), None) if w.is_empty() => None,
        (w, Some(c)) if w == c => None,
        _ => Some(path.to_owned()),
    }
}
