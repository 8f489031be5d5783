//! The objects, patches and options a plugin's requests carry, parsed once by the host, and the
//! mark the host puts on what a plugin makes.

use kube::core::GroupVersionKind;
use serde_json::Value;

use super::CallError;

/// The label the host puts on every object a plugin makes: `kubewasm.dev/plugin: <name>`.
pub const PLUGIN_LABEL: &str = "kubewasm.dev/plugin";

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

/// Names one object of any kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Kind.
    pub kind: GroupVersionKind,
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// An object a plugin wants written, parsed once by the host: its kind and name (for the grant
/// check and the URL) and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct TypedObject {
    /// Kind, namespace and name from `apiVersion`, `kind` and `metadata`.
    pub target: ObjectRef,
    /// The whole object.
    pub body: Value,
    /// The plugin the host marks the object as made by when it sends it (the
    /// `kubewasm.dev/plugin` label, set by the authorizer's decision); recorders keep the
    /// plugin's own intent and leave it out.
    pub mark: Option<String>,
    /// Send it so that the API server takes it only if no such object exists, and refuses it
    /// with a conflict if one does: for an apply, by naming [`NO_OBJECT_HAS_THIS_VERSION`] as
    /// its resourceVersion (set by the authorizer's decision, `Decision::AllowIfAbsent`).
    pub only_if_absent: bool,
}

/// A resourceVersion no object has: u64::MAX, where kube-apiserver's are etcd revisions (positive
/// int64s) parsed as u64. A server-side apply naming it creates the object if it does not exist;
/// if it does, the optimistic lock refuses the apply with a conflict (checked against
/// kube-apiserver 1.37 in `host/tests/all/first_writes.rs`).
pub const NO_OBJECT_HAS_THIS_VERSION: &str = "18446744073709551615";

/// The largest body the host parses for a plugin: the API server refuses a larger request (its
/// `MaxRequestBodyBytes`, 3 MiB, k8s.io/apiserver's server config), and parsed JSON takes many
/// times its bytes in host memory, outside the plugin's memory budget: 34 MiB of `[0,0,…]`, within
/// a 64 MiB plugin's limit, parses to about a gigabyte.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// A plugin's `what` (an object, a patch body) parsed as JSON: `Invalid` if it is not JSON or
/// is larger than [`MAX_BODY`], which is checked before anything is parsed.
pub(crate) fn parse_body(bytes: &[u8], what: &str) -> Result<Value, CallError> {
    if bytes.len() > MAX_BODY {
        return Err(CallError::Invalid(format!(
            "{what} is {} bytes, more than the API server takes in a request ({MAX_BODY})",
            bytes.len()
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| CallError::Invalid(format!("{what} is not valid JSON: {e}")))
}

impl TypedObject {
    /// The body as sent: with the host's mark, if it carries one.
    pub fn sent_body(&self) -> std::borrow::Cow<'_, Value> {
        match &self.mark {
            Some(plugin) => {
                let mut body = self.body.clone();
                add_mark(&mut body, plugin);
                std::borrow::Cow::Owned(body)
            }
            None => std::borrow::Cow::Borrowed(&self.body),
        }
    }

    /// Parses a plugin's JSON bytes; the error says what is missing.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CallError> {
        Self::from_value(parse_body(bytes, "object")?)
    }

    /// [`from_json`](Self::from_json) of an object already parsed.
    pub fn from_value(body: Value) -> Result<Self, CallError> {
        let field = |v: &Value, path: &[&str]| -> Option<String> {
            path.iter().try_fold(v, |v, k| v.get(k))?.as_str().map(str::to_owned)
        };
        let api_version =
            field(&body, &["apiVersion"]).ok_or_else(|| CallError::Invalid("object has no apiVersion".into()))?;
        let kind = field(&body, &["kind"]).ok_or_else(|| CallError::Invalid("object has no kind".into()))?;
        let name = field(&body, &["metadata", "name"])
            .ok_or_else(|| CallError::Invalid("object has no metadata.name".into()))?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let target = ObjectRef {
            kind: GroupVersionKind::gvk(group, version, &kind),
            namespace: field(&body, &["metadata", "namespace"]),
            name,
        };
        Ok(Self { target, body, mark: None, only_if_absent: false })
    }
}

/// The kinds of patch a plugin can send.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386).
    Merge(Value),
    /// JSON patch (RFC 6902).
    Json(Value),
    /// Strategic merge patch.
    Strategic(Value),
}

/// Conditions the API server checks atomically with a patch or delete (metav1.Preconditions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's resourceVersion must be this.
    pub resource_version: Option<String>,
    /// The object's uid must be this.
    pub uid: Option<String>,
}

impl Preconditions {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.resource_version.is_none() && self.uid.is_none()
    }
}

/// How a patch is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchOptions {
    /// Patch the status subresource instead of the object.
    pub status: bool,
    /// Conditions the object must meet.
    pub preconditions: Preconditions,
    /// The uid of the copy the host's authorizer judged the patch on: the API server refuses it
    /// for any other object of the name (one made in the moment before the cache heard of it).
    /// Checked within the write, with no read of its own ([`Preconditions::uid`] reads first).
    pub judged_uid: Option<String>,
}

/// What happens to an object's dependents when it is deleted (metav1.DeletionPropagation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete at once; the garbage collector deletes dependents afterwards (0.1's only policy).
    #[default]
    Background,
    /// Delete once dependents that block owner deletion are gone.
    Foreground,
    /// Keep dependents, removing their ownerReferences.
    Orphan,
}

/// How a delete is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// Conditions the object must meet.
    pub preconditions: Preconditions,
    /// What happens to dependents.
    pub propagation: Propagation,
    /// As [`PatchOptions::judged_uid`]; a plugin's own uid precondition goes first.
    pub judged_uid: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_object_takes_group_version_kind_and_name_from_its_json() {
        let o = TypedObject::from_json(
            br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"a"}}"#,
        )
        .unwrap();
        assert_eq!(o.target.kind, GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!((o.target.namespace.as_deref(), o.target.name.as_str()), (Some("a"), "web"));
        let core =
            TypedObject::from_json(br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}"#).unwrap();
        assert_eq!((core.target.kind.group.as_str(), core.target.namespace), ("", None));
    }

    #[test]
    fn a_typed_object_without_a_name_or_valid_json_is_invalid_with_a_reason() {
        let no_name = TypedObject::from_json(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#);
        assert_eq!(no_name.unwrap_err(), CallError::Invalid("object has no metadata.name".into()));
        let garbage = TypedObject::from_json(b"{not json").unwrap_err();
        assert!(matches!(garbage, CallError::Invalid(m) if m.starts_with("object is not valid JSON")));
    }

    /// Held-out round of issue 49: a plugin within its memory limit sent a patch body of
    /// `[0,0,…]` that parses to many times its size in host memory.
    #[test]
    fn a_body_larger_than_the_api_server_takes_is_refused_before_it_is_parsed() {
        let mut huge = b"[0".to_vec();
        huge.extend(std::iter::repeat_n(b",0"[..].iter().copied(), MAX_BODY / 2).flatten());
        huge.push(b']');
        let refused = parse_body(&huge, "patch body").unwrap_err();
        assert!(
            matches!(&refused, CallError::Invalid(m) if m.contains("more than the API server takes")),
            "{refused:?}"
        );
        assert!(parse_body(b"[0,0]", "patch body").is_ok());
        let object = TypedObject::from_json(&huge).unwrap_err();
        assert!(matches!(object, CallError::Invalid(m) if m.starts_with("object is")));
    }
}
