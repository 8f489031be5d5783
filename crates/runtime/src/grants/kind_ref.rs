//! A kind regardless of version, as kubectl writes it (`Kind.group`): what grants name.

use std::fmt;
use std::str::FromStr;

use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize};

use super::{SENSITIVE, is_dangerous, is_dangerous_status};
use crate::api::address::{is_kind, is_subdomain};

/// A kind regardless of version, written as kubectl does: `Kind.group`, or `Kind` for the core
/// group (`Secret`, `Deployment.apps`, `ConfigMapSync.examples.kubewasm.dev`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KindRef {
    /// API group; empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

impl KindRef {
    /// The kind of `gvk`, version dropped.
    pub fn of(gvk: &GroupVersionKind) -> Self {
        Self { group: gvk.group.clone(), kind: gvk.kind.clone() }
    }

    /// Whether this kind is always sensitive ([`SENSITIVE`]): touched only in named namespaces.
    pub fn is_sensitive(&self) -> bool {
        SENSITIVE.iter().any(|(g, k)| *g == self.group && *k == self.kind)
    }

    /// Whether writing this kind needs the operator's approval in `grants.dangerous`.
    pub fn is_dangerous(&self) -> bool {
        is_dangerous(&self.group, &self.kind)
    }

    /// Whether writing this kind's status needs the operator's approval in `grants.dangerous`.
    pub fn is_dangerous_status(&self) -> bool {
        is_dangerous_status(&self.group, &self.kind)
    }
}

impl schemars::JsonSchema for KindRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KindRef".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A kind as kubectl writes it: `Kind.group`, or `Kind` for the core group.",
            "pattern": "^[A-Z][A-Za-z0-9]*(\\.[a-z0-9.-]+)?$"
        })
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() { f.write_str(&self.kind) } else { write!(f, "{}.{}", self.kind, self.group) }
    }
}

impl FromStr for KindRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, group) = s.split_once('.').unwrap_or((s, ""));
        // As the API server names kinds (CamelCase, one capital first) and groups (the core one
        // is empty, not `core`): a kind spelled otherwise would name nothing the host serves,
        // yet become a resource once lowercased for RBAC (`secret` → `secrets`).
        if !is_kind(kind) || group == "core" || !(group.is_empty() || is_subdomain(group)) {
            return Err(format!(
                "`{s}` is not a kind: write `Kind` or `Kind.group` as the API server names it, e.g. `Secret`, \
                 `Deployment.apps`"
            ));
        }
        Ok(Self { group: group.to_owned(), kind: kind.to_owned() })
    }
}

impl TryFrom<String> for KindRef {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<KindRef> for String {
    fn from(k: KindRef) -> String {
        k.to_string()
    }
}
