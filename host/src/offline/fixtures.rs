//! Fixture files: the objects an offline run caches, read from multi-document YAML, and the
//! header of a recorded reconcile (`kubewasm record`) that says which key to replay and what
//! it wrote.

use serde::Deserialize;
use serde_json::Value;

use super::{Error, Result};
use kubewasm_host::plugin::ObjectKey;

/// `apiVersion` of the recorded-reconcile header.
pub const RECORDING_API_VERSION: &str = "kubewasm.dev/v1alpha1";

/// `kind` of the recorded-reconcile header: the first document of a file `kubewasm record`
/// wrote; every other document is an object the reconcile read.
pub const RECORDING_KIND: &str = "RecordedReconcile";

/// What a recording says about its reconcile.
#[derive(Clone, Debug, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recording {
    /// Always [`RECORDING_API_VERSION`].
    pub api_version: String,
    /// Always [`RECORDING_KIND`].
    pub kind: String,
    /// The plugin that was recorded.
    pub plugin: String,
    /// The key reconciled (`namespace/name` or `name`).
    pub key: String,
    /// The report of that reconcile, as `kubewasm test` prints it.
    pub expect: Value,
    /// What the plugin read from the wall clock (RFC 3339); `kubewasm test` replays it at that
    /// time. Absent in recordings made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
}

/// The contents of a fixture file.
#[derive(Debug, Default)]
pub struct Fixtures {
    /// The objects to cache, each with `apiVersion`, `kind` and `metadata.name`.
    pub objects: Vec<Value>,
    /// Set when the file is a recording.
    pub recording: Option<Recording>,
}

/// Parses a multi-document YAML file of objects; `kind: List` documents contribute their items,
/// empty documents are skipped. An object without a `metadata.uid` gets one derived from its
/// kind and name, so ownerReferences in fixtures can name it and reports stay the same from run
/// to run.
pub fn parse(text: &str) -> Result<Fixtures> {
    let mut fixtures = Fixtures::default();
    for (n, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document).map_err(|e| Error::Fixture(format!("document {}: {e}", n + 1)))?;
        match value {
            Value::Null => {}
            v if v["kind"] == RECORDING_KIND && v["apiVersion"] == RECORDING_API_VERSION => {
                let recording =
                    serde_json::from_value(v).map_err(|e| Error::Fixture(format!("recording header: {e}")))?;
                fixtures.recording = Some(recording);
            }
            Value::Object(mut list) if list.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = list.remove("items").unwrap_or_default();
                for item in items.as_array().into_iter().flatten() {
                    fixtures.objects.push(checked(item.clone(), n)?);
                }
            }
            v => fixtures.objects.push(checked(v, n)?),
        }
    }
    Ok(fixtures)
}

fn checked(object: Value, n: usize) -> Result<Value> {
    let text = |path: &str| object.pointer(path).and_then(Value::as_str).is_some();
    if !(text("/apiVersion") && text("/kind") && text("/metadata/name")) {
        return Err(Error::Fixture(format!("document {}: an object needs apiVersion, kind and metadata.name", n + 1)));
    }
    Ok(with_uid(object))
}

/// `object` with a `metadata.uid` derived from its kind, namespace and name if it has none.
pub(crate) fn with_uid(mut object: Value) -> Value {
    let text = |path: &str| object.pointer(path).and_then(Value::as_str).map(str::to_owned);
    let (api_version, kind, name) = (text("/apiVersion"), text("/kind"), text("/metadata/name"));
    let (api_version, kind, name) =
        (api_version.unwrap_or_default(), kind.unwrap_or_default(), name.unwrap_or_default());
    if text("/metadata/uid").is_none() {
        let namespace = text("/metadata/namespace").unwrap_or_default();
        let digest = kubewasm_host::plugin::sha256_hex(format!("{api_version}/{kind}/{namespace}/{name}").as_bytes());
        let uid = format!(
            "{}-{}-4{}-8{}-{}",
            &digest[..8],
            &digest[8..12],
            &digest[13..16],
            &digest[17..20],
            &digest[20..32]
        );
        object["metadata"]["uid"] = uid.into();
    }
    object
}

/// Parses `namespace/name` or `name`.
pub fn parse_key(key: &str) -> ObjectKey {
    ObjectKey::from(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_take_every_document_and_the_items_of_lists() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: a}}\n";
        let f = parse(text).unwrap();
        assert_eq!(f.objects.len(), 2);
        assert_eq!(f.objects[1]["kind"], "ConfigMap");
        assert!(f.recording.is_none());
    }

    #[test]
    fn an_object_without_a_uid_gets_the_same_one_every_time() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n";
        let (one, two) = (parse(text).unwrap(), parse(text).unwrap());
        let uid = one.objects[0]["metadata"]["uid"].as_str().unwrap().to_owned();
        assert_eq!(uid.len(), 36);
        assert_eq!(two.objects[0]["metadata"]["uid"], uid);
        let kept = parse("apiVersion: v1\nkind: Namespace\nmetadata: {name: a, uid: u1}\n").unwrap();
        assert_eq!(kept.objects[0]["metadata"]["uid"], "u1");
    }

    #[test]
    fn an_object_without_a_name_is_refused_with_its_document_number() {
        let err = parse("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: ConfigMap\n").unwrap_err();
        assert!(err.to_string().contains("document 2"), "{err}");
    }

    #[test]
    fn a_recording_header_is_read_apart_from_the_objects() {
        let text = "apiVersion: kubewasm.dev/v1alpha1\nkind: RecordedReconcile\nplugin: p\nkey: a/b\nexpect: []\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n";
        let f = parse(text).unwrap();
        assert_eq!(f.recording.unwrap().key, "a/b");
        assert_eq!(f.objects.len(), 1);
        assert_eq!(parse_key("a/b"), ObjectKey::new(Some("a"), "b"));
        assert_eq!(parse_key("b").namespace(), None);
    }
}
