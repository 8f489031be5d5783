//! Grants: which kinds a plugin may read and write, checked at load and at every host call.
//!
//! A plugin's registration says what it needs; the operator's config says what it may have.
//! Defaults (DESIGN.md): a plugin may read its for/owns/watches kinds, write the objects of its
//! owned kinds that it controls (see [`WriteScope::Controlled`]) and the status of its for kind. Everything else it registers under `reads`/`writes` must be
//! granted, and so must [`SENSITIVE`] kinds wherever they appear. Writing a [`DANGEROUS`] kind
//! (owning it, listing it under `writes`, or reconciling it, which writes its status) needs its
//! `write` grant and the operator's approval by name in `dangerous`, both. The effective set is
//! what the registration asks for and the grants allow — never more than asked, so a
//! registration is an honest manifest of the plugin's access.

use std::collections::BTreeSet;

use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize};

use super::registration::Registration;

mod dangerous;
mod kind_ref;

pub use dangerous::{DANGEROUS, is_dangerous};
pub use kind_ref::KindRef;

/// Kinds that always need an explicit grant, even as a for/owns/watches kind: reading them leaks
/// credentials, or writing them escalates privileges (RBAC, and kubewasm's own WasmPlugin, which
/// would let a plugin grant itself more).
pub const SENSITIVE: &[(&str, &str)] = &[
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("kubewasm.dev", "WasmPlugin"),
];

/// Whether `set` holds `kind`'s group and kind. Checked on every host call, so it compares in
/// place instead of building a `KindRef`; the sets hold a handful of kinds.
fn holds(set: &BTreeSet<KindRef>, kind: &GroupVersionKind) -> bool {
    set.iter().any(|k| k.kind == kind.kind && k.group == kind.group)
}

/// How far a plugin may write objects of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteScope {
    /// Any object of the kind (an explicit `grants.write` entry, or a granted `writes` kind).
    Anywhere,
    /// Only objects the plugin controls: the object (and, for apply and create, the body
    /// written) carries a controller ownerReference to a cached object of the plugin's for kind.
    /// The default for owned kinds.
    Controlled,
}

/// A label selector over Namespaces, checked when the config is read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NamespaceSelector(String);

impl NamespaceSelector {
    /// The parsed selector.
    pub fn selector(&self) -> kube::core::Selector {
        kubewasm_informer::parse_label_selector(&self.0).expect("checked when parsed")
    }
}

impl TryFrom<String> for NamespaceSelector {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        kubewasm_informer::parse_label_selector(&s).map_err(|e| e.to_string())?;
        Ok(Self(s))
    }
}

impl From<NamespaceSelector> for String {
    fn from(s: NamespaceSelector) -> String {
        s.0
    }
}

impl schemars::JsonSchema for NamespaceSelector {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NamespaceSelector".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A label selector over Namespaces, e.g. `team=a,tier!=prod`."
        })
    }
}

/// Namespaces a plugin is confined to: its cache shows, and its writes reach, only namespaced
/// objects in them (and of Namespace objects, only them). A namespace is in scope when it is
/// listed or its labels match the selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NamespaceScope {
    /// Namespaces by name.
    pub names: BTreeSet<String>,
    /// Namespaces whose labels match this selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<NamespaceSelector>,
}

/// What the operator grants a plugin beyond the defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GrantConfig {
    /// Kinds the plugin may read besides its for/owns/watches kinds.
    pub read: BTreeSet<KindRef>,
    /// Kinds the plugin may write anywhere: besides its owned kinds, and for owned kinds beyond
    /// the objects it controls.
    pub write: BTreeSet<KindRef>,
    /// Kinds that control the cluster (see `DANGEROUS`: admission webhooks and policies, CRDs,
    /// RBAC, Nodes, …) the operator approves the plugin to write; each also needs its `write`
    /// grant.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub dangerous: BTreeSet<KindRef>,
    /// Confine the plugin's reads and writes to these namespaces (unset: the whole cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespaceScope>,
}

/// A registration asked for access the operator did not grant. Its message says what to add
/// to the plugin's config (`<name>.yaml`, or a WasmPlugin's spec), every missing grant at once.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
#[error("the plugin asks for access it was not granted: {}; if it should have it, add to its config `{}`{}", .missing.join(", "), self.fix(), self.dangerous_note())]
pub struct NotGranted {
    /// One entry per missing grant, e.g. `read Secret`, `approve Node as dangerous`.
    pub missing: Vec<String>,
    /// The kinds to add to `grants.read`.
    pub read: BTreeSet<KindRef>,
    /// The kinds to add to `grants.write`.
    pub write: BTreeSet<KindRef>,
    /// The kinds to add to `grants.dangerous`.
    pub dangerous: BTreeSet<KindRef>,
}

impl NotGranted {
    /// The grants to add, as the config file writes them:
    /// `grants: {read: [Secret], write: [Node], dangerous: [Node]}`.
    pub fn fix(&self) -> String {
        let list = |kinds: &BTreeSet<KindRef>| kinds.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let keys: Vec<String> = [("read", &self.read), ("write", &self.write), ("dangerous", &self.dangerous)]
            .into_iter()
            .filter(|(_, kinds)| !kinds.is_empty())
            .map(|(key, kinds)| format!("{key}: [{}]", list(kinds)))
            .collect();
        format!("grants: {{{}}}", keys.join(", "))
    }

    /// Notes a missing grant once.
    fn note(&mut self, entry: String) {
        if !self.missing.contains(&entry) {
            self.missing.push(entry);
        }
    }

    /// Why a dangerous kind needs two entries, when one is missing.
    fn dangerous_note(&self) -> &'static str {
        if self.dangerous.is_empty() {
            ""
        } else {
            " (a dangerous kind controls the cluster: writing it needs both its `write` grant and its name in \
             `dangerous`)"
        }
    }
}

/// The access a loaded plugin has; every host call is checked against it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    read: BTreeSet<KindRef>,
    write: BTreeSet<KindRef>,
    write_controlled: BTreeSet<KindRef>,
    write_status: BTreeSet<KindRef>,
    /// The for kind: controller of the objects in `write_controlled`.
    for_kind: Option<GroupVersionKind>,
    /// Which objects of the for kind the plugin reconciles (the only possible controllers).
    for_filter: super::registration::EventFilter,
    namespaces: Option<NamespaceScope>,
}

impl Grants {
    /// The effective access of `registration` under `config`, or which grants are missing.
    pub fn resolve(registration: &Registration, config: &GrantConfig) -> Result<Self, NotGranted> {
        let mut grants = Grants {
            for_kind: Some(registration.for_kind.clone()),
            for_filter: registration.for_filter.clone(),
            namespaces: config.namespaces.clone(),
            ..Grants::default()
        };
        let mut missing = NotGranted::default();
        let approved = |kind: &KindRef| !kind.is_dangerous() || config.dangerous.contains(kind);
        // A kind goes into `set` if the defaults or the grants allow it; else each missing grant
        // is noted, and a written dangerous kind needs its approval besides its grant.
        let mut need =
            |set: &mut BTreeSet<KindRef>, kind: KindRef, by_default: bool, verb: &str, granted: &BTreeSet<KindRef>| {
                let write = verb != "read";
                let sensitive = kind.is_sensitive() || (write && kind.is_dangerous());
                let allowed = (by_default && !sensitive) || granted.contains(&kind);
                let is_approved = !write || approved(&kind);
                if !allowed {
                    missing.note(format!("{verb} {kind}"));
                    if write { &mut missing.write } else { &mut missing.read }.insert(kind.clone());
                }
                if !is_approved {
                    missing.note(format!("approve {kind} as dangerous"));
                    missing.dangerous.insert(kind.clone());
                }
                if allowed && is_approved {
                    set.insert(kind);
                }
            };
        let for_kind = KindRef::of(&registration.for_kind);
        need(&mut grants.read, for_kind.clone(), true, "read", &config.read);
        need(&mut grants.write_status, for_kind, true, "write status of", &config.write);
        for kind in registration.owns.iter().map(KindRef::of) {
            need(&mut grants.read, kind.clone(), true, "read", &config.read);
            if config.write.contains(&kind) && approved(&kind) {
                grants.write.insert(kind);
            } else {
                need(&mut grants.write_controlled, kind, true, "write", &config.write);
            }
        }
        for kind in registration.watches.iter().map(|w| KindRef::of(&w.kind)) {
            need(&mut grants.read, kind, true, "read", &config.read);
        }
        for kind in registration.reads.iter().map(KindRef::of) {
            need(&mut grants.read, kind, false, "read", &config.read);
        }
        for kind in registration.writes.iter().map(KindRef::of) {
            need(&mut grants.write, kind, false, "write", &config.write);
        }
        if missing.missing.is_empty() { Ok(grants) } else { Err(missing) }
    }

    /// Whether the plugin may read objects of `kind`.
    pub fn can_read(&self, kind: &GroupVersionKind) -> bool {
        holds(&self.read, kind)
    }

    /// Which objects of `kind` the plugin may create, apply, patch or delete, if any.
    pub fn write_scope(&self, kind: &GroupVersionKind) -> Option<WriteScope> {
        if holds(&self.write, kind) {
            Some(WriteScope::Anywhere)
        } else if holds(&self.write_controlled, kind) {
            Some(WriteScope::Controlled)
        } else {
            None
        }
    }

    /// Whether the plugin may write some objects of `kind` (see [`write_scope`](Self::write_scope)).
    pub fn can_write(&self, kind: &GroupVersionKind) -> bool {
        self.write_scope(kind).is_some()
    }

    /// Whether the plugin may write the status subresource of any object of `kind`.
    pub fn can_write_status(&self, kind: &GroupVersionKind) -> bool {
        holds(&self.write_status, kind) || holds(&self.write, kind)
    }

    /// The plugin's for kind, whose cached objects control what it writes under
    /// [`WriteScope::Controlled`]; `None` before registration.
    pub fn for_kind(&self) -> Option<&GroupVersionKind> {
        self.for_kind.as_ref()
    }

    /// Which objects of the for kind the plugin reconciles.
    pub fn for_filter(&self) -> &super::registration::EventFilter {
        &self.for_filter
    }

    /// The namespaces the plugin is confined to; `None`: the whole cluster.
    pub fn namespaces(&self) -> Option<&NamespaceScope> {
        self.namespaces.as_ref()
    }

    /// Kinds readable, for RBAC generation and diagnostics.
    pub fn readable(&self) -> impl Iterator<Item = &KindRef> {
        self.read.iter()
    }

    /// Kinds writable anywhere, for RBAC generation and diagnostics.
    pub fn writable(&self) -> impl Iterator<Item = &KindRef> {
        self.write.iter()
    }

    /// Kinds whose status the plugin may write (its for kind, and kinds writable anywhere), for
    /// RBAC generation.
    pub fn status_writable(&self) -> impl Iterator<Item = &KindRef> {
        self.write_status.iter().chain(self.write.iter().filter(|k| !self.write_status.contains(k)))
    }

    /// Kinds writable where the plugin controls the object, for RBAC generation and diagnostics.
    pub fn writable_controlled(&self) -> impl Iterator<Item = &KindRef> {
        self.write_controlled.iter()
    }

    /// The [`DANGEROUS`] kinds the plugin may write in some way (each approved by its operator),
    /// sorted, for diagnostics.
    pub fn dangerous(&self) -> impl Iterator<Item = &KindRef> {
        let written = self.write.iter().chain(&self.write_controlled).chain(&self.write_status);
        written.filter(|k| k.is_dangerous()).collect::<BTreeSet<_>>().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::WatchSpec;

    fn gvk(g: &str, v: &str, k: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(g, v, k)
    }

    fn registration() -> Registration {
        Registration {
            for_kind: gvk("apps", "v1", "Deployment"),
            owns: vec![gvk("", "v1", "ConfigMap")],
            watches: vec![WatchSpec {
                kind: gvk("", "v1", "Namespace"),
                label_selector: None,
                filter: Default::default(),
            }],
            ..Registration::new(gvk("apps", "v1", "Deployment"))
        }
    }

    #[test]
    fn defaults_allow_reading_triggers_and_writing_owned_kinds_and_for_status() {
        let grants = Grants::resolve(&registration(), &GrantConfig::default()).unwrap();
        assert!(grants.can_read(&gvk("apps", "v1", "Deployment")));
        assert!(grants.can_read(&gvk("", "v1", "Namespace")));
        assert_eq!(grants.write_scope(&gvk("", "v1", "ConfigMap")), Some(WriteScope::Controlled));
        assert!(!grants.can_write_status(&gvk("", "v1", "ConfigMap")), "status of owned objects needs a grant");
        assert!(grants.can_write_status(&gvk("apps", "v1", "Deployment")));
        assert!(!grants.can_write(&gvk("apps", "v1", "Deployment")), "status only");
        assert!(!grants.can_write(&gvk("", "v1", "Namespace")), "watched is not writable");
        assert!(!grants.can_read(&gvk("", "v1", "Secret")));
    }

    #[test]
    fn extra_reads_and_writes_need_a_grant_and_the_error_lists_each() {
        let mut reg = registration();
        reg.reads.push(gvk("", "v1", "Pod"));
        reg.writes.push(gvk("", "v1", "Service"));
        let err = Grants::resolve(&reg, &GrantConfig::default()).unwrap_err();
        assert_eq!(err.missing, vec!["read Pod".to_owned(), "write Service".to_owned()]);
        assert!(err.to_string().ends_with("add to its config `grants: {read: [Pod], write: [Service]}`"), "{err}");
        let config = GrantConfig {
            read: ["Pod".parse().unwrap()].into(),
            write: ["Service".parse().unwrap()].into(),
            ..Default::default()
        };
        let grants = Grants::resolve(&reg, &config).unwrap();
        assert!(grants.can_read(&gvk("", "v1", "Pod")) && grants.can_write(&gvk("", "v1", "Service")));
    }

    #[test]
    fn an_explicit_write_grant_on_an_owned_kind_writes_it_anywhere() {
        let config = GrantConfig { write: ["ConfigMap".parse().unwrap()].into(), ..Default::default() };
        let grants = Grants::resolve(&registration(), &config).unwrap();
        assert_eq!(grants.write_scope(&gvk("", "v1", "ConfigMap")), Some(WriteScope::Anywhere));
        assert_eq!(grants.for_kind(), Some(&gvk("apps", "v1", "Deployment")));
    }

    #[test]
    fn secrets_need_an_explicit_grant_even_when_owned() {
        let mut reg = registration();
        reg.owns.push(gvk("", "v1", "Secret"));
        let err = Grants::resolve(&reg, &GrantConfig::default()).unwrap_err();
        assert_eq!(err.missing, vec!["read Secret".to_owned(), "write Secret".to_owned()]);
    }

    #[test]
    fn granting_more_than_registered_gives_nothing_extra() {
        let config = GrantConfig { read: ["Pod".parse().unwrap()].into(), ..Default::default() };
        let grants = Grants::resolve(&registration(), &config).unwrap();
        assert!(!grants.can_read(&gvk("", "v1", "Pod")));
    }

    #[test]
    fn a_namespace_scope_parses_names_and_a_selector_and_rejects_a_bad_selector() {
        let config: GrantConfig =
            serde_yaml::from_str("namespaces: {names: [team-a], selector: 'team in (b,c)'}").unwrap();
        let scope = Grants::resolve(&registration(), &config).unwrap().namespaces().cloned().unwrap();
        assert_eq!(scope.names, ["team-a".to_owned()].into());
        let labels = [("team".to_owned(), "b".to_owned())].into();
        assert!(kube::core::SelectorExt::matches(&scope.selector.unwrap().selector(), &labels));
        assert!(serde_yaml::from_str::<GrantConfig>("namespaces: {selector: 'a in'}").is_err());
        assert!(serde_yaml::from_str::<GrantConfig>("namespaces: {name: [x]}").is_err(), "strict");
    }

    #[test]
    fn kind_refs_round_trip_in_kubectl_notation() {
        let k: KindRef = "ConfigMapSync.examples.kubewasm.dev".parse().unwrap();
        assert_eq!((k.kind.as_str(), k.group.as_str()), ("ConfigMapSync", "examples.kubewasm.dev"));
        assert_eq!(k.to_string(), "ConfigMapSync.examples.kubewasm.dev");
        assert_eq!("Secret".parse::<KindRef>().unwrap().to_string(), "Secret");
        assert!("apps/v1".parse::<KindRef>().is_err());
    }
}
