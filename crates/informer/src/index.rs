//! Index functions: map an object to the index values it is filed under (client-go `IndexFunc`).

use std::{collections::HashMap, fmt, sync::Arc};

use serde_json::Value;

use super::object::CachedObject;

/// Name of the built-in index on `metadata.namespace` (client-go `NamespaceIndex`);
/// cluster-scoped objects are filed under `""`, as in client-go.
pub const NAMESPACE_INDEX: &str = "namespace";
/// Name of the built-in index on labels; values are `key=value`.
pub const LABEL_INDEX: &str = "label";
/// Name of the built-in index on the UID of the controller `ownerReference`.
pub const CONTROLLER_OWNER_INDEX: &str = "controller-owner";

/// A function a host component registers to index objects by something computed from the whole
/// body, e.g. the ConfigMap names a Deployment's pod template references.
pub type JsonIndexFn = Arc<dyn Fn(&Value) -> Vec<String> + Send + Sync>;

/// How an index computes its values for an object.
#[derive(Clone)]
pub enum IndexFunc {
    /// Computed from the key and the parsed metadata only (the built-in indexes); never parses
    /// JSON.
    Meta(fn(&CachedObject) -> Vec<String>),
    /// The value(s) at a dotted field path such as `spec.nodeName`; arrays along the path are
    /// flattened (`spec.containers.image` yields every container's image); scalars are
    /// stringified, objects and nulls are skipped.
    FieldPath(Arc<[String]>),
    /// A host-registered function over the whole object.
    Json(JsonIndexFn),
}

impl IndexFunc {
    /// An index on a dotted field path, e.g. `IndexFunc::field_path("spec.nodeName")`.
    pub fn field_path(path: &str) -> Self {
        Self::FieldPath(path.split('.').filter(|s| !s.is_empty()).map(str::to_owned).collect())
    }

    /// An index computed by `f` over the parsed object.
    pub fn json(f: impl Fn(&Value) -> Vec<String> + Send + Sync + 'static) -> Self {
        Self::Json(Arc::new(f))
    }

    /// Whether this function needs the parsed JSON body.
    pub(crate) fn needs_json(&self) -> bool {
        !matches!(self, Self::Meta(_))
    }

    /// The index values of `obj`. `parsed` is the object's parsed body, present when
    /// [`needs_json`](Self::needs_json) is true.
    pub(crate) fn values(&self, obj: &CachedObject, parsed: Option<&Value>) -> Vec<String> {
        let mut out = match (self, parsed) {
            (Self::Meta(f), _) => f(obj),
            (Self::FieldPath(path), Some(v)) => {
                let mut out = Vec::new();
                collect_path(v, path, &mut out);
                out
            }
            (Self::Json(f), Some(v)) => f(v),
            (_, None) => Vec::new(),
        };
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl fmt::Debug for IndexFunc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Meta(_) => f.write_str("IndexFunc::Meta"),
            Self::FieldPath(p) => write!(f, "IndexFunc::FieldPath({})", p.join(".")),
            Self::Json(_) => f.write_str("IndexFunc::Json"),
        }
    }
}

/// Index name → function (client-go `Indexers`).
pub type Indexers = HashMap<String, IndexFunc>;

/// The indexes every store starts with: namespace, label and controller owner.
pub fn default_indexers() -> Indexers {
    HashMap::from([
        (NAMESPACE_INDEX.to_owned(), IndexFunc::Meta(namespace_index)),
        (LABEL_INDEX.to_owned(), IndexFunc::Meta(label_index)),
        (CONTROLLER_OWNER_INDEX.to_owned(), IndexFunc::Meta(controller_owner_index)),
    ])
}

fn namespace_index(obj: &CachedObject) -> Vec<String> {
    vec![obj.namespace().unwrap_or_default().to_owned()]
}

fn label_index(obj: &CachedObject) -> Vec<String> {
    obj.meta().labels.pairs().map(str::to_owned).collect()
}

fn controller_owner_index(obj: &CachedObject) -> Vec<String> {
    obj.meta().controller_owner().map(|o| o.uid.clone()).into_iter().collect()
}

fn collect_path(v: &Value, path: &[String], out: &mut Vec<String>) {
    match v {
        Value::Array(items) => items.iter().for_each(|item| collect_path(item, path, out)),
        _ => match path.split_first() {
            Some((head, tail)) => {
                if let Some(next) = v.get(head.as_str()) {
                    collect_path(next, tail, out);
                }
            }
            None => match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                Value::Bool(b) => out.push(b.to_string()),
                Value::Null | Value::Object(_) | Value::Array(_) => {}
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> CachedObject {
        CachedObject::from_json(
            serde_json::to_vec(&serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "fe"}},
                "spec": {
                    "nodeName": "node-1",
                    "replicas": 3,
                    "containers": [
                        {"image": "nginx", "envFrom": [{"configMapRef": {"name": "a"}}]},
                        {"image": "envoy", "envFrom": [{"configMapRef": {"name": "b"}}, {"secretRef": {}}]},
                        {"image": "nginx"}
                    ]
                }
            }))
            .unwrap(),
        )
        .unwrap()
    }

    fn eval(f: &IndexFunc, obj: &CachedObject) -> Vec<String> {
        let parsed = f.needs_json().then(|| obj.value().unwrap());
        f.values(obj, parsed.as_ref())
    }

    #[test]
    fn a_field_path_index_reads_a_scalar() {
        assert_eq!(eval(&IndexFunc::field_path("spec.nodeName"), &pod()), ["node-1"]);
        assert_eq!(eval(&IndexFunc::field_path("spec.replicas"), &pod()), ["3"]);
    }

    #[test]
    fn a_field_path_index_flattens_arrays_and_dedups() {
        assert_eq!(eval(&IndexFunc::field_path("spec.containers.image"), &pod()), ["envoy", "nginx"]);
        assert_eq!(eval(&IndexFunc::field_path("spec.containers.envFrom.configMapRef.name"), &pod()), ["a", "b"]);
    }

    #[test]
    fn a_missing_field_path_yields_no_values() {
        assert!(eval(&IndexFunc::field_path("spec.nope.deeper"), &pod()).is_empty());
        assert!(eval(&IndexFunc::field_path("spec"), &pod()).is_empty());
    }

    #[test]
    fn the_built_in_indexes_read_metadata() {
        let idx = default_indexers();
        let obj = pod();
        assert_eq!(eval(&idx[NAMESPACE_INDEX], &obj), ["ns"]);
        assert_eq!(eval(&idx[LABEL_INDEX], &obj), ["app=web", "tier=fe"]);
        assert!(eval(&idx[CONTROLLER_OWNER_INDEX], &obj).is_empty());
    }

    #[test]
    fn a_json_index_function_sees_the_whole_object() {
        let f = IndexFunc::json(|v| vec![v["spec"]["containers"].as_array().map_or(0, Vec::len).to_string()]);
        assert_eq!(eval(&f, &pod()), ["3"]);
    }
}
