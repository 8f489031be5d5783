//! The watched type: an object as the API server sent it, its metadata parsed and every other
//! field transcoded straight into the JSON the cache keeps, so entering the cache builds no
//! value tree.
//!
//! Hand-written because kube-rs' `DynamicObject` decodes the whole body into a
//! `serde_json::Value` that the cache then serializes back (issue 19: 1.9× client-go's sync
//! time). Fields are copied with `serde-transcode` rather than `serde_json::value::RawValue`:
//! kube's `ObjectList` (paginated lists) buffers its items through serde's flatten, where a
//! `RawValue` cannot be deserialized.

use std::borrow::Cow;
use std::fmt;

use kube::api::{ApiResource, ObjectMeta};
use kube::core::{DynamicResourceScope, Resource};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// One watched object. `metadata` (without `managedFields`) is parsed for the watcher's
/// bookkeeping and the cache's index; the body is rebuilt from JSON already written by
/// [`RawObject::to_json`].
#[derive(Clone, Debug)]
pub struct RawObject {
    /// The parsed metadata, without `managedFields`.
    pub metadata: ObjectMeta,
    /// `metadata` as sent, without `managedFields`: a JSON object.
    meta_json: Vec<u8>,
    /// `metadata.managedFields` as sent (JSON).
    managed_fields: Option<Vec<u8>>,
    /// Every top-level field but `apiVersion`, `kind` and `metadata`, in the order sent, as
    /// `,"key":value` segments.
    rest: Vec<u8>,
}

impl RawObject {
    /// The object as JSON with `apiVersion` and `kind` from `resource` (list items omit them),
    /// and with `managedFields` only if `keep_managed_fields`.
    pub fn to_json(&self, resource: &ApiResource, keep_managed_fields: bool) -> Vec<u8> {
        let managed = self.managed_fields.as_ref().filter(|_| keep_managed_fields);
        let extra = managed.map_or(0, |m| m.len() + 20);
        let mut out = Vec::with_capacity(self.rest.len() + self.meta_json.len() + extra + 64);
        out.extend_from_slice(b"{\"apiVersion\":");
        write_str(&mut out, &resource.api_version);
        out.extend_from_slice(b",\"kind\":");
        write_str(&mut out, &resource.kind);
        out.extend_from_slice(b",\"metadata\":");
        match managed {
            Some(managed) => {
                // meta_json is `{…}`: reopen it to append managedFields.
                out.extend_from_slice(&self.meta_json[..self.meta_json.len() - 1]);
                if self.meta_json.len() > 2 {
                    out.push(b',');
                }
                out.extend_from_slice(b"\"managedFields\":");
                out.extend_from_slice(managed);
                out.push(b'}');
            }
            None => out.extend_from_slice(&self.meta_json),
        }
        out.extend_from_slice(&self.rest);
        out.push(b'}');
        out
    }

    /// The `managedFields` entries of the field managers whose name starts with `prefix`, as a
    /// JSON array; `None` when there are none. Objects no such manager wrote are only scanned
    /// for the prefix, never parsed.
    pub fn managed_fields_of(&self, prefix: &str) -> Option<Vec<u8>> {
        let managed = self.managed_fields.as_deref()?;
        if !managed.windows(prefix.len()).any(|w| w == prefix.as_bytes()) {
            return None;
        }
        let entries: Vec<serde_json::Value> = serde_json::from_slice(managed).ok()?;
        let kept: Vec<_> = entries
            .into_iter()
            .filter(|e| e.get("manager").and_then(serde_json::Value::as_str).is_some_and(|m| m.starts_with(prefix)))
            .collect();
        (!kept.is_empty()).then(|| serde_json::to_vec(&kept).expect("JSON values serialize"))
    }
}

/// Writes `s` as a JSON string.
fn write_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("a string serializes into a Vec");
}

/// Appends the value it deserializes to a buffer as JSON, token by token.
struct AppendJson<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for AppendJson<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let mut serializer = serde_json::Serializer::new(self.0);
        serde_transcode::transcode(deserializer, &mut serializer).map_err(de::Error::custom)
    }
}

/// Appends `,"key":` (or `"key":` at the start of an object) and then the map's next value.
fn append_entry<'de, A: MapAccess<'de>>(
    out: &mut Vec<u8>,
    first: bool,
    key: &str,
    map: &mut A,
) -> Result<(), A::Error> {
    if !first {
        out.push(b',');
    }
    write_str(out, key);
    out.push(b':');
    map.next_value_seed(AppendJson(out))
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = RawObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
        let mut meta = RawMeta { json: b"{}".to_vec(), managed_fields: None };
        let mut rest = Vec::with_capacity(512);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match &*key {
                "metadata" => meta = map.next_value()?,
                "apiVersion" | "kind" => drop(map.next_value::<IgnoredAny>()?),
                _ => append_entry(&mut rest, false, &key, &mut map)?,
            }
        }
        let metadata = serde_json::from_slice(&meta.json).map_err(de::Error::custom)?;
        Ok(RawObject { metadata, meta_json: meta.json, managed_fields: meta.managed_fields, rest })
    }
}

/// `metadata` split into `managedFields` and the JSON of everything else.
struct RawMeta {
    json: Vec<u8>,
    managed_fields: Option<Vec<u8>>,
}

impl<'de> Deserialize<'de> for RawMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MetaVisitor;
        impl<'de> Visitor<'de> for MetaVisitor {
            type Value = RawMeta;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("object metadata")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMeta, A::Error> {
                let mut json = Vec::with_capacity(256);
                json.push(b'{');
                let mut managed_fields = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "managedFields" {
                        let mut managed = Vec::new();
                        map.next_value_seed(AppendJson(&mut managed))?;
                        managed_fields = Some(managed);
                    } else {
                        let first = json.len() == 1;
                        append_entry(&mut json, first, &key, &mut map)?;
                    }
                }
                json.push(b'}');
                Ok(RawMeta { json, managed_fields })
            }
        }
        deserializer.deserialize_map(MetaVisitor)
    }
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;
    use serde_json::{Value, json};

    fn configmaps() -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
    }

    fn sent() -> Value {
        json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7", "labels": {"app": "web"},
                         "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}],
                         "creationTimestamp": "2026-11-26T20:00:00Z"},
            "data": {"k": "v\n\"quoted\" \u{e9}"},
            "binaryData": {"b": "AAE="},
            "immutable": false
        })
    }

    #[test]
    fn the_body_is_the_sent_object_with_its_type_and_without_managed_fields() {
        let raw: RawObject = serde_json::from_slice(&serde_json::to_vec(&sent()).unwrap()).unwrap();
        let body: Value = serde_json::from_slice(&raw.to_json(&configmaps(), false)).unwrap();
        let mut expected = sent();
        expected["metadata"].as_object_mut().unwrap().remove("managedFields");
        expected["apiVersion"] = json!("v1");
        expected["kind"] = json!("ConfigMap");
        assert_eq!(body, expected);
        assert_eq!(raw.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(raw.metadata.labels.as_ref().unwrap()["app"], "web");
        assert!(raw.metadata.managed_fields.is_none(), "never parsed");
    }

    #[test]
    fn managed_fields_are_kept_when_asked_for() {
        let raw: RawObject = serde_json::from_slice(&serde_json::to_vec(&sent()).unwrap()).unwrap();
        let body: Value = serde_json::from_slice(&raw.to_json(&configmaps(), true)).unwrap();
        assert_eq!(body["metadata"]["managedFields"], sent()["metadata"]["managedFields"]);
        assert_eq!(body["metadata"]["name"], "a");
    }

    #[test]
    fn a_list_items_sent_type_is_replaced_and_empty_metadata_parses() {
        let raw: RawObject = serde_json::from_str(r#"{"kind":"Other","apiVersion":"x/v9","metadata":{}}"#).unwrap();
        let body: Value = serde_json::from_slice(&raw.to_json(&configmaps(), true)).unwrap();
        assert_eq!(body, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
    }

    #[test]
    fn a_paginated_lists_items_decode_through_kubes_object_list() {
        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "3"},
                          "items": [sent()]});
        let list: kube::core::ObjectList<RawObject> =
            serde_json::from_slice(&serde_json::to_vec(&list).unwrap()).unwrap();
        let body: Value = serde_json::from_slice(&list.items[0].to_json(&configmaps(), true)).unwrap();
        let mut expected = sent();
        expected["apiVersion"] = json!("v1");
        expected["kind"] = json!("ConfigMap");
        assert_eq!(body, expected);
    }

    #[test]
    fn a_watch_event_decodes_into_a_raw_object() {
        let line = r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"9"},"data":{"k":"v"}}}"#;
        let event: kube::api::WatchEvent<RawObject> = serde_json::from_str(line).unwrap();
        let kube::api::WatchEvent::Added(raw) = event else { panic!("an ADDED event") };
        assert_eq!(raw.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(
            String::from_utf8(raw.to_json(&configmaps(), false)).unwrap(),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"9"},"data":{"k":"v"}}"#
        );
    }
}
