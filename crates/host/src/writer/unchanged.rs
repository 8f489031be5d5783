//! Whether a server-side apply would change nothing: the body against the cached object and the
//! field manager's own `managedFields` entry (fieldsV1), without the object's schema.
//!
//! Hand-written: no Rust crate reads fieldsV1 (the format is structured-merge-diff's, in Go).
//! An apply changes nothing when every value the body names is already in the object and the
//! set of fields the body names equals the set the manager owns by Apply, so the apply neither
//! drops a field nor takes one back. The set the body names is read off the owned set where
//! the schema would be needed: a field owned as a leaf whose body value is a non-empty map or
//! list is taken as atomic and must equal the object's value as a whole. Anything else that
//! cannot be decided (nulls, empty lists never owned, reordered items, keys of an atomic value
//! the body lacks) is reported, and the apply sent.

use kube_quantity::ParsedQuantity;
use serde_json::{Map, Value};

/// Why an apply may change something, at which path of the body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{why} at {at}")]
pub struct Differs {
    /// The body's path (`spec.hard.pods`).
    pub at: String,
    /// What differs, or why it cannot be decided.
    pub why: &'static str,
}

/// `Result` of this module.
pub type Result<T, E = Differs> = std::result::Result<T, E>;

/// Maps of built-in kinds whose values the API server stores as canonical quantities
/// (`1000m` → `1`), compared by value there.
const QUANTITY_MAPS: &[&str] =
    &["hard", "used", "limits", "requests", "capacity", "allocatable", "max", "min", "default", "defaultRequest"];

/// Metadata set by the API server; a body naming one is sent (a resourceVersion or uid is a
/// precondition).
const SERVER_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// What an apply is compared against.
pub struct Apply<'a> {
    /// The body as it would be sent.
    pub body: &'a Value,
    /// The cached object.
    pub cached: &'a Value,
    /// The cached object's kept `managedFields` entries (a JSON array), if any.
    pub managed_fields: Option<&'a [u8]>,
    /// The field manager the apply is sent as.
    pub manager: &'a str,
    /// An apply of the status subresource.
    pub status: bool,
    /// A kind the API server serves itself (its quantities are normalised).
    pub builtin: bool,
}

fn differs(at: &str, why: &'static str) -> Differs {
    Differs { at: if at.is_empty() { "the object".into() } else { at.to_owned() }, why }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

impl Apply<'_> {
    /// `Ok` when sending the apply would change neither the object nor the manager's fields.
    pub fn changes_nothing(&self) -> Result<()> {
        let body = self.body.as_object().ok_or_else(|| differs("", "the body is not an object"))?;
        let api_version = body.get("apiVersion");
        if self.cached.get("apiVersion") != api_version {
            return Err(differs("apiVersion", "the cache holds another version"));
        }
        let owned = self.owned(api_version)?;
        let mut named = Vec::new();
        for (key, value) in body {
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    if self.metadata(value, owned.get("f:metadata"))? {
                        named.push("metadata");
                    }
                }
                "status" if !self.status => return Err(differs(key, "status in an apply of the object is reset")),
                other if self.status && other != "status" => {
                    return Err(differs(key, "only status is applied to the status subresource"));
                }
                _ => {
                    named.push(key);
                    self.node(key, false, value, self.cached.get(key), child(&owned, key)?)?;
                }
            }
        }
        only_named(&owned, &named, "")
    }

    /// The fieldsV1 of the manager's Apply entry for this subresource and version.
    fn owned(&self, api_version: Option<&Value>) -> Result<Map<String, Value>> {
        let entries: Vec<Value> = match self.managed_fields {
            Some(bytes) => serde_json::from_slice(bytes).map_err(|_| differs("", "managedFields do not parse"))?,
            None => Vec::new(),
        };
        let subresource = if self.status { "status" } else { "" };
        let mut mine = entries.into_iter().filter(|e| {
            let field = |f: &str| e.get(f).and_then(Value::as_str);
            field("manager") == Some(self.manager)
                && field("operation") == Some("Apply")
                && field("subresource").unwrap_or("") == subresource
        });
        let entry = mine.next().ok_or_else(|| differs("", "the manager owns no fields by Apply"))?;
        if mine.next().is_some() {
            return Err(differs("", "the manager has two Apply entries"));
        }
        if entry.get("apiVersion") != api_version || entry.get("fieldsType").and_then(Value::as_str) != Some("FieldsV1")
        {
            return Err(differs("", "the manager's fields are of another version or format"));
        }
        match entry.get("fieldsV1") {
            Some(Value::Object(fields)) => Ok(fields.clone()),
            None => Ok(Map::new()),
            Some(_) => Err(differs("", "fieldsV1 is not an object")),
        }
    }

    /// Compares the body's metadata but the name and namespace (never in managedFields);
    /// whether it names any field.
    fn metadata(&self, value: &Value, owned: Option<&Value>) -> Result<bool> {
        let meta = value.as_object().ok_or_else(|| differs("metadata", "not an object"))?;
        let owned = owned.map(fields).transpose()?;
        let cached = self.cached.get("metadata");
        let mut named = Vec::new();
        for (key, value) in meta {
            let at = join("metadata", key);
            match key.as_str() {
                "name" | "namespace" => {}
                k if SERVER_METADATA.contains(&k) => return Err(differs(&at, "set by the server or a precondition")),
                _ if self.status => return Err(differs(&at, "metadata in a status apply is reset")),
                _ => {
                    named.push(key.as_str());
                    let owned_child = owned.map(|o| child(o, key)).transpose()?.flatten();
                    self.node(&at, false, value, cached.and_then(|c| c.get(key)), owned_child)?;
                }
            }
        }
        if let Some(owned) = owned {
            only_named(owned, &named, "metadata")?;
        } else if !named.is_empty() {
            return Err(differs("metadata", "not owned"));
        }
        Ok(!named.is_empty())
    }

    /// One value of the body (`quantity`: inside a map of quantities) against the cached value
    /// and the owned node at its path (`None`: not owned).
    fn node(
        &self,
        at: &str,
        quantity: bool,
        body: &Value,
        cached: Option<&Value>,
        owned: Option<&Map<String, Value>>,
    ) -> Result<()> {
        match body {
            Value::Null => Err(differs(at, "a null in the body")),
            Value::Bool(_) | Value::Number(_) | Value::String(_) => match owned {
                Some(o) if is_leaf(o) => scalar_eq(at, quantity, body, cached),
                _ => Err(differs(at, "a value the manager does not own")),
            },
            Value::Object(map) if map.is_empty() => match (owned, cached) {
                (Some(o), _) if !is_leaf(o) => Err(differs(at, "owned fields the body drops")),
                (None, _) => Err(differs(at, "an empty map the manager does not own")),
                (Some(_), None | Some(Value::Null)) => Ok(()),
                (Some(_), Some(Value::Object(c))) if c.is_empty() => Ok(()),
                (Some(_), Some(_)) => Err(differs(at, "an empty map over a value: atomic or not")),
            },
            Value::Object(map) => match owned {
                Some(o) if is_leaf(o) => atomic_eq(at, quantity, body, cached),
                _ => {
                    let in_quantities = self.builtin && QUANTITY_MAPS.contains(&last(at));
                    for (key, value) in map {
                        let owned_child = owned.map(|o| child(o, key)).transpose()?.flatten();
                        let cached_child = cached.and_then(|c| c.get(key));
                        self.node(&join(at, key), in_quantities, value, cached_child, owned_child)?;
                    }
                    match owned {
                        Some(o) => only_named(o, &map.keys().map(String::as_str).collect::<Vec<_>>(), at),
                        None => Ok(()),
                    }
                }
            },
            Value::Array(items) => match owned {
                None if items.is_empty() => Err(differs(at, "an empty list never owned: atomic or not")),
                None => Err(differs(at, "a list the manager does not own")),
                Some(o) if is_leaf(o) => atomic_eq(at, quantity, body, cached),
                Some(o) => self.list(at, items, cached, o),
            },
        }
    }

    /// A granular list: each body item matched to an owned `k:` or `v:` item and to the cached
    /// item with the same key, in the same order; every owned item named by the body.
    fn list(&self, at: &str, items: &[Value], cached: Option<&Value>, owned: &Map<String, Value>) -> Result<()> {
        let cached = cached.and_then(Value::as_array).ok_or_else(|| differs(at, "the list is not in the object"))?;
        let mut matched: Vec<&str> = Vec::new();
        let mut last_position = None;
        for (i, item) in items.iter().enumerate() {
            let at = format!("{at}[{i}]");
            let (key, owned_item) = item_key(&at, item, owned)?;
            if matched.contains(&key) {
                return Err(differs(&at, "two items with one key"));
            }
            matched.push(key);
            let same = |c: &Value| match key.strip_prefix("k:") {
                Some(k) => key_fields(k).is_some_and(|k| k.iter().all(|(f, v)| c.get(f) == Some(v))),
                None => c == item,
            };
            let position = cached.iter().position(same).ok_or_else(|| differs(&at, "an item not in the object"))?;
            if last_position.is_some_and(|p| p >= position) {
                return Err(differs(&at, "items in another order"));
            }
            last_position = Some(position);
            if key.starts_with("k:") {
                self.node(&at, false, item, Some(&cached[position]), Some(fields(owned_item)?))?;
            }
        }
        match owned.keys().find(|k| *k != "." && !matched.contains(&k.as_str())) {
            Some(_) => Err(differs(at, "an owned item the body drops")),
            None => Ok(()),
        }
    }
}

/// The owned `k:` or `v:` entry a list item is: a scalar by value, a map by its key fields. A
/// key field the item leaves out is one the server defaulted (a port's `protocol`): the owned
/// key holds the default, and the owned item does not name the field (checked on the item).
fn item_key<'o>(at: &str, item: &Value, owned: &'o Map<String, Value>) -> Result<(&'o str, &'o Value)> {
    let mut found = owned.iter().filter(|(k, _)| match item {
        Value::Object(_) => k.strip_prefix("k:").and_then(key_fields).is_some_and(|key| {
            key.keys().any(|f| item.get(f).is_some()) && key.iter().all(|(f, v)| item.get(f).is_none_or(|i| i == v))
        }),
        Value::Array(_) | Value::Null => false,
        scalar => k.strip_prefix("v:").and_then(|v| serde_json::from_str::<Value>(v).ok()).as_ref() == Some(scalar),
    });
    let (key, value) = found.next().ok_or_else(|| differs(at, "an item the manager does not own"))?;
    if found.next().is_some() {
        return Err(differs(at, "an item matching two owned keys"));
    }
    Ok((key.as_str(), value))
}

/// The key fields of a `k:{…}` element.
fn key_fields(key: &str) -> Option<Map<String, Value>> {
    serde_json::from_str(key).ok()
}

/// The owned node `f:<key>` under `owned`, if owned.
fn child<'o>(owned: &'o Map<String, Value>, key: &str) -> Result<Option<&'o Map<String, Value>>> {
    owned.get(&format!("f:{key}")).map(fields).transpose()
}

fn fields(v: &Value) -> Result<&Map<String, Value>> {
    v.as_object().ok_or_else(|| differs("", "a fieldsV1 node is not an object"))
}

/// A node that is a member of the set and has no children.
fn is_leaf(owned: &Map<String, Value>) -> bool {
    owned.keys().all(|k| k == ".")
}

/// `Ok` when every owned child of a map is a field the body names.
fn only_named(owned: &Map<String, Value>, named: &[&str], at: &str) -> Result<()> {
    for key in owned.keys().filter(|k| *k != ".") {
        let field = key.strip_prefix("f:").ok_or_else(|| differs(at, "an owned element of an unexpected kind"))?;
        if !named.contains(&field) {
            return Err(differs(&join(at, field), "an owned field the body drops"));
        }
    }
    Ok(())
}

fn last(at: &str) -> &str {
    at.rsplit('.').next().unwrap_or(at)
}

fn is_empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// An atomic value, replaced whole by an apply: equal to the cached one, empty counting as absent.
fn atomic_eq(at: &str, quantity: bool, body: &Value, cached: Option<&Value>) -> Result<()> {
    match body {
        Value::Object(map) if map.is_empty() && is_empty(cached) => Ok(()),
        Value::Array(items) if items.is_empty() && is_empty(cached) => Ok(()),
        Value::Object(map) => {
            let c = cached.and_then(Value::as_object).ok_or_else(|| differs(at, "a map where the object has none"))?;
            for (key, value) in map {
                atomic_eq(&join(at, key), quantity, value, c.get(key))?;
            }
            match c.iter().find(|(k, v)| !map.contains_key(*k) && !is_empty(Some(v))) {
                Some((k, _)) => Err(differs(&join(at, k), "a key the atomic body lacks")),
                None => Ok(()),
            }
        }
        Value::Array(items) => {
            let c = cached.and_then(Value::as_array).ok_or_else(|| differs(at, "a list where the object has none"))?;
            if c.len() != items.len() {
                return Err(differs(at, "a list of another length"));
            }
            items.iter().zip(c).try_for_each(|(b, c)| atomic_eq(at, quantity, b, Some(c)))
        }
        Value::Null => Err(differs(at, "a null in the body")),
        scalar => scalar_eq(at, quantity, scalar, cached),
    }
}

/// Scalars as the API server stores them: numbers by value, quantities (in a built-in kind's
/// quantity map) by value.
fn scalar_eq(at: &str, quantity: bool, body: &Value, cached: Option<&Value>) -> Result<()> {
    let same = match (body, cached) {
        (b, Some(c)) if b == c => true,
        (Value::Number(b), Some(Value::Number(c))) => match (b.as_i64(), c.as_i64(), b.as_u64(), c.as_u64()) {
            (Some(b), Some(c), _, _) => b == c,
            (_, _, Some(b), Some(c)) => b == c,
            _ => b.as_f64() == c.as_f64(),
        },
        (Value::String(b), Some(Value::String(c))) if quantity => {
            matches!((ParsedQuantity::try_from(b.as_str()), ParsedQuantity::try_from(c.as_str())), (Ok(b), Ok(c)) if b == c)
        }
        _ => false,
    };
    if same { Ok(()) } else { Err(differs(at, "another value")) }
}

#[cfg(test)]
#[path = "unchanged_tests.rs"]
mod tests;
