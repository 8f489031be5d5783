//! A cached object: the JSON bytes plugins receive plus the metadata the cache indexes on.

use std::{fmt, sync::Arc};

use kube::api::ApiResource;

use super::{Error, Result, labels::Labels, raw::RawObject, uid::Uid};

/// The controller-relevant parts of an `ownerReference`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    /// `apiVersion` of the owner.
    pub api_version: String,
    /// `kind` of the owner.
    pub kind: String,
    /// `name` of the owner.
    pub name: String,
    /// `uid` of the owner.
    pub uid: String,
    /// Whether this reference points at the managing controller.
    pub controller: bool,
}

/// Metadata parsed once when an object enters the cache, so reads never parse JSON. Name and
/// namespace are not repeated here: [`CachedObject::name`] and [`CachedObject::namespace`] read
/// them from the key. Every field is sized for a cache of many objects (issue 4's 1.3× goal).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// `metadata.uid`.
    pub uid: Option<Uid>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<Box<str>>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.labels`, compactly stored.
    pub labels: Labels,
    /// `metadata.ownerReferences`.
    pub owner_references: Box<[OwnerRef]>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl ObjectMeta {
    /// The owner reference marked `controller: true`, if any.
    pub fn controller_owner(&self) -> Option<&OwnerRef> {
        self.owner_references.iter().find(|o| o.controller)
    }
}

/// One object in the cache: immutable, shared by `Arc` between the store, handlers and plugins.
///
/// The JSON is produced once when the object arrives from the watch (from its raw fields,
/// without `managedFields` by default), so handing it to a plugin is a copy of bytes, never a
/// re-serialization.
pub struct CachedObject {
    key: Arc<str>,
    meta: ObjectMeta,
    json: Box<[u8]>,
    /// The kept `managedFields` entries (a JSON array), outside the JSON plugins receive.
    managed: Option<Box<[u8]>>,
}

impl CachedObject {
    /// Builds a cached object from a watched object, filling `apiVersion`/`kind` from `resource`
    /// (list responses omit them on items) so every cached body is self-describing; without
    /// `managedFields` unless `keep_managed_fields`.
    pub fn from_raw(obj: RawObject, resource: &ApiResource, keep_managed_fields: bool) -> Result<Self> {
        let json = obj.to_json(resource, keep_managed_fields);
        Self::new(obj.metadata, json)
    }

    /// Builds a cached object from raw JSON (must be an object with `metadata.name`).
    pub fn from_json(json: Vec<u8>) -> Result<Self> {
        #[derive(serde::Deserialize)]
        struct Partial {
            #[serde(default)]
            metadata: kube::api::ObjectMeta,
        }
        let partial: Partial = serde_json::from_slice(&json).map_err(Error::Serialize)?;
        Self::new(partial.metadata, json)
    }

    fn new(meta: kube::api::ObjectMeta, json: Vec<u8>) -> Result<Self> {
        let name = meta.name.as_deref().filter(|n| !n.is_empty()).ok_or(Error::MissingName)?;
        let key = object_key(meta.namespace.as_deref(), name).into();
        Ok(Self { key, meta: meta_from_k8s(meta), json: json.into_boxed_slice(), managed: None })
    }

    /// The object with `managed` (a JSON array of `managedFields` entries) kept beside its JSON.
    #[must_use]
    pub fn with_managed_fields(mut self, managed: Option<Vec<u8>>) -> Self {
        self.managed = managed.map(Vec::into_boxed_slice);
        self
    }

    /// The `managedFields` entries kept beside the JSON (the reflector's `keep_managers`), as a
    /// JSON array; `None` when none were kept.
    pub fn managed_fields(&self) -> Option<&[u8]> {
        self.managed.as_deref()
    }

    /// The MetaNamespaceKey: `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key, shared: a queue key made from it points at the cache's copy.
    pub fn key_arc(&self) -> &Arc<str> {
        &self.key
    }

    /// `metadata.name` (the key after the namespace; names cannot contain `/`).
    pub fn name(&self) -> &str {
        self.key.split_once('/').map_or(&self.key, |(_, name)| name)
    }

    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.key.split_once('/').map(|(ns, _)| ns)
    }

    /// The parsed metadata.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The object exactly as plugins receive it (JSON, `managedFields` stripped by default).
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Parses the JSON body; used by index functions, not on the read path.
    pub fn value(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.json).map_err(Error::Serialize)
    }

    /// Heap bytes held by this entry: the struct and every buffer it owns (requested sizes,
    /// not the allocator's rounding), for the benchmark's bytes-per-object figure.
    pub fn heap_size(&self) -> usize {
        let m = &self.meta;
        let strings = m.uid.as_ref().map_or(0, |u| if let Uid::Other(s) = u { s.len() } else { 0 })
            + m.resource_version.as_ref().map_or(0, |rv| rv.len())
            + m.labels.heap_size()
            + std::mem::size_of_val(&*m.owner_references)
            + m.owner_references
                .iter()
                .map(|o| o.api_version.capacity() + o.kind.capacity() + o.name.capacity() + o.uid.capacity())
                .sum::<usize>();
        // An Arc's two counters sit in front of its value: one for this struct, one for the key.
        let arc_counters = 2 * std::mem::size_of::<usize>();
        let managed = self.managed.as_ref().map_or(0, |m| m.len());
        2 * arc_counters + std::mem::size_of::<Self>() + self.json.len() + self.key.len() + strings + managed
    }
}

impl fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedObject")
            .field("key", &self.key)
            .field("resource_version", &self.meta.resource_version)
            .field("json_len", &self.json.len())
            .finish()
    }
}

/// client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or `name` when there is no namespace.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

fn meta_from_k8s(m: kube::api::ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        uid: m.uid.as_deref().map(Uid::new),
        resource_version: m.resource_version.map(String::into_boxed_str),
        generation: m.generation,
        labels: m.labels.unwrap_or_default().into(),
        owner_references: m
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|o| OwnerRef {
                api_version: o.api_version,
                kind: o.kind,
                name: o.name,
                uid: o.uid,
                controller: o.controller.unwrap_or(false),
            })
            .collect(),
        deleting: m.deletion_timestamp.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;

    fn configmap_resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
    }

    #[test]
    fn a_listed_item_gets_api_version_and_kind_and_loses_managed_fields() {
        let sent = br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7",
                        "managedFields":[{"manager":"kubectl"}]},"data":{"k":"v"}}"#;
        let obj: RawObject = serde_json::from_slice(sent).unwrap();
        let cached = CachedObject::from_raw(obj, &configmap_resource(), false).unwrap();
        let v = cached.value().unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["data"]["k"], "v");
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(cached.key(), "ns/a");
        assert_eq!((cached.namespace(), cached.name()), (Some("ns"), "a"));
        assert_eq!(cached.meta().resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn only_the_named_managers_entries_are_kept_beside_the_json() {
        let sent = br#"{"metadata":{"name":"a","namespace":"ns","managedFields":[
            {"manager":"kubectl","operation":"Update","fieldsV1":{"f:data":{}}},
            {"manager":"kubewasm/nd","operation":"Apply","fieldsV1":{"f:data":{"f:k":{}}}}]},"data":{"k":"v"}}"#;
        let obj: RawObject = serde_json::from_slice(sent).unwrap();
        let kept = obj.managed_fields_of("kubewasm/");
        let cached = CachedObject::from_raw(obj, &configmap_resource(), false).unwrap().with_managed_fields(kept);
        let entries: serde_json::Value = serde_json::from_slice(cached.managed_fields().unwrap()).unwrap();
        assert_eq!(entries.as_array().unwrap().len(), 1);
        assert_eq!(entries[0]["manager"], "kubewasm/nd");
        assert!(cached.value().unwrap()["metadata"].get("managedFields").is_none(), "plugins never see them");
        let other: RawObject = serde_json::from_slice(
            br#"{"metadata":{"name":"b","managedFields":[
            {"manager":"kubectl","operation":"Update"}]}}"#,
        )
        .unwrap();
        assert_eq!(other.managed_fields_of("kubewasm/"), None, "an object no kubewasm manager wrote keeps nothing");
    }

    #[test]
    fn cluster_scoped_objects_are_keyed_by_name_alone() {
        let cached = CachedObject::from_json(br#"{"metadata":{"name":"node-1","namespace":""}}"#.to_vec()).unwrap();
        assert_eq!(cached.key(), "node-1");
        assert_eq!((cached.namespace(), cached.name()), (None, "node-1"));
        assert_eq!(object_key(Some(""), "x"), "x");
    }

    #[test]
    fn an_object_without_a_name_is_rejected() {
        assert!(matches!(CachedObject::from_json(br#"{"metadata":{}}"#.to_vec()), Err(Error::MissingName)));
    }

    #[test]
    fn the_controller_owner_is_the_reference_marked_controller() {
        let cached = CachedObject::from_json(
            br#"{"metadata":{"name":"p","ownerReferences":[
                {"apiVersion":"v1","kind":"A","name":"a","uid":"u1"},
                {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u2","controller":true}]}}"#
                .to_vec(),
        )
        .unwrap();
        assert_eq!(cached.meta().controller_owner().unwrap().uid, "u2");
    }
}
