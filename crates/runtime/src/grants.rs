//! Grants: which kinds a plugin may read and write, checked at load and at every host call.
//!
//! A plugin asks and its operator approves. The registration asks: reconciling a kind asks to
//! read it and write its status, owning a kind asks to read it and write the objects the plugin
//! controls (see [`WriteScope::Controlled`]), watching asks to read, and `reads`/`writes` ask
//! for what they name. The operator's config approves each kind for each verb (`read`,
//! `status`, `own`, `write`; `write` covers the narrower `status` and `own`), and a plugin that
//! asks for anything not approved is refused at load with the whole list and the config that
//! would approve it. Writing a [`DANGEROUS`] kind (owning it, listing it under `writes`, or
//! reconciling it) also needs the operator's approval by name in `dangerous`. The effective set
//! is what the registration asks for and the operator approved — never more than asked, so a
//! registration is an honest manifest of the plugin's access.

use std::collections::BTreeSet;

use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize};

use super::registration::Registration;

mod dangerous;
mod kind_ref;

pub use dangerous::{DANGEROUS, DANGEROUS_STATUS, is_dangerous, is_dangerous_status};
pub use kind_ref::KindRef;

/// Kinds whose objects hold credentials, always sensitive: a plugin reads or writes them (a write
/// answers with the object) only in the namespaces its operator names for them
/// ([`SensitiveScope`]), and `kubewasm rbac` grants them only there.
pub const SENSITIVE: &[(&str, &str)] = &[("", "Secret")];

/// Whether `set` holds `kind`'s group and kind. Checked on every host call, so it compares in
/// place instead of building a `KindRef`; the sets hold a handful of kinds.
pub(crate) fn holds(set: &BTreeSet<KindRef>, kind: &GroupVersionKind) -> bool {
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

/// Where a plugin may touch its sensitive kinds: [`SENSITIVE`] ones and any its operator marks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SensitiveScope {
    /// Kinds the operator marks sensitive, besides Secret.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub kinds: BTreeSet<KindRef>,
    /// The only namespaces where the plugin reads or writes its sensitive kinds; a plugin that
    /// reads or writes one needs at least one.
    pub namespaces: BTreeSet<String>,
}

impl SensitiveScope {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.namespaces.is_empty()
    }

    /// Whether an object of `kind` in `namespace` is one of these kinds outside these
    /// namespaces. Asked for every cached object and trigger: no kinds answers at once.
    pub fn hides(&self, kind: &GroupVersionKind, namespace: Option<&str>) -> bool {
        holds(&self.kinds, kind) && !namespace.is_some_and(|ns| self.namespaces.contains(ns))
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

/// What the operator approves a plugin to do, kind by kind (`kubewasm check` prints what a
/// plugin asks for; `kubewasm new` writes what its scaffold asks for).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GrantConfig {
    /// Kinds the plugin may read: its for, owns and watches kinds, and any it `reads`.
    pub read: BTreeSet<KindRef>,
    /// Kinds whose status the plugin may write: its for kind.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub status: BTreeSet<KindRef>,
    /// Kinds the plugin may own: create, change and delete the objects it controls (those with
    /// a controller ownerReference to an object it reconciles).
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub own: BTreeSet<KindRef>,
    /// Kinds the plugin may write anywhere, status included: any it `writes`, and owned kinds
    /// beyond the objects it controls.
    pub write: BTreeSet<KindRef>,
    /// Kinds that control the cluster (see `DANGEROUS`: admission webhooks and policies, CRDs,
    /// RBAC, Nodes, …) the operator approves the plugin to write; each also needs its `status`,
    /// `own` or `write` approval.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub dangerous: BTreeSet<KindRef>,
    /// Confine the plugin's reads and writes to these namespaces (unset: the whole cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespaceScope>,
    /// Where the plugin may read and write Secrets, and any kind the operator marks sensitive.
    #[serde(skip_serializing_if = "SensitiveScope::is_empty")]
    pub sensitive: SensitiveScope,
    /// Test builds only (feature `insecure-test-authorizer`): approve every kind the
    /// registration asks for, for tests whose subject is not approval. Never read from a file.
    #[cfg(feature = "insecure-test-authorizer")]
    #[serde(skip)]
    #[schemars(skip)]
    pub approve_requests: bool,
}

impl GrantConfig {
    /// Test builds only: a config that approves whatever the plugin asks for, dangerous kinds
    /// included (see `approve_requests`).
    #[cfg(feature = "insecure-test-authorizer")]
    pub fn approving_requests() -> Self {
        Self::default().plus_requests()
    }

    /// Test builds only: this config, with whatever the plugin asks for approved besides.
    #[cfg(feature = "insecure-test-authorizer")]
    pub fn plus_requests(self) -> Self {
        Self { approve_requests: true, ..self }
    }

    /// This config with everything `registration` asks for approved besides (tests only).
    #[cfg(any(test, feature = "insecure-test-authorizer"))]
    pub(crate) fn with_requests_of(&self, registration: &Registration) -> Self {
        let mut config = self.clone();
        let kinds = |gvks: &[GroupVersionKind]| gvks.iter().map(KindRef::of).collect::<Vec<_>>();
        let for_kind = KindRef::of(&registration.for_kind);
        let watched = registration.watches.iter().map(|w| KindRef::of(&w.kind));
        config.read.extend([for_kind.clone()].into_iter().chain(kinds(&registration.owns)).chain(watched));
        config.read.extend(kinds(&registration.reads));
        config.status.insert(for_kind);
        config.own.extend(kinds(&registration.owns));
        config.write.extend(kinds(&registration.writes));
        let status = config.status.iter().filter(|k| k.is_dangerous_status());
        let written = config.own.iter().chain(&config.write).filter(|k| k.is_dangerous());
        let dangerous: Vec<KindRef> = status.chain(written).cloned().collect();
        config.dangerous.extend(dangerous);
        config
    }
}

/// What a registration asks to do with a kind, as the config approves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Approval {
    Read,
    Status,
    Own,
    Write,
}

impl Approval {
    /// How a missing approval of this verb is listed: `read Pod`, `own ConfigMap`.
    fn says(self) -> &'static str {
        match self {
            Approval::Read => "read",
            Approval::Status => "write status of",
            Approval::Own => "own",
            Approval::Write => "write",
        }
    }
}

/// A registration asked for access the operator did not approve. Its message says what to add
/// to the plugin's config (`<name>.yaml`, or a WasmPlugin's spec), every missing approval at once.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
#[error("the plugin asks for access its operator has not approved: {}; if it should have it, add to its config `{}`{}", .missing.join(", "), self.fix(), self.dangerous_note())]
pub struct NotGranted {
    /// One entry per missing approval, e.g. `read Secret`, `approve Node as dangerous`.
    pub missing: Vec<String>,
    /// The kinds to add to `grants.read`.
    pub read: BTreeSet<KindRef>,
    /// The kinds to add to `grants.status`.
    pub status: BTreeSet<KindRef>,
    /// The kinds to add to `grants.own`.
    pub own: BTreeSet<KindRef>,
    /// The kinds to add to `grants.write`.
    pub write: BTreeSet<KindRef>,
    /// The kinds to add to `grants.dangerous`.
    pub dangerous: BTreeSet<KindRef>,
    /// Whether `grants.sensitive.namespaces` must name where its sensitive kinds may be touched.
    pub sensitive_namespaces: bool,
}

impl NotGranted {
    /// The grants to add, as the config file writes them:
    /// `grants: {read: [Secret], write: [Node], dangerous: [Node]}`.
    pub fn fix(&self) -> String {
        let list = |kinds: &BTreeSet<KindRef>| kinds.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let keys: Vec<String> = [
            ("read", &self.read),
            ("status", &self.status),
            ("own", &self.own),
            ("write", &self.write),
            ("dangerous", &self.dangerous),
        ]
        .into_iter()
        .filter(|(_, kinds)| !kinds.is_empty())
        .map(|(key, kinds)| format!("{key}: [{}]", list(kinds)))
        .chain(self.sensitive_namespaces.then(|| "sensitive: {namespaces: [<namespace>, …]}".to_owned()))
        .collect();
        format!("grants: {{{}}}", keys.join(", "))
    }

    /// The kinds to add to the config's list for `verb`.
    fn of(&mut self, verb: Approval) -> &mut BTreeSet<KindRef> {
        match verb {
            Approval::Read => &mut self.read,
            Approval::Status => &mut self.status,
            Approval::Own => &mut self.own,
            Approval::Write => &mut self.write,
        }
    }

    /// Leaves out `status` and `own` entries a missing `write` entry of the same kind covers.
    fn drop_covered(&mut self) {
        let covered: Vec<KindRef> = self.write.iter().cloned().collect();
        for kind in covered {
            if !kind.is_dangerous_status() && self.status.remove(&kind) {
                self.missing.retain(|m| *m != format!("{} {kind}", Approval::Status.says()));
            }
            if self.own.remove(&kind) {
                self.missing.retain(|m| *m != format!("{} {kind}", Approval::Own.says()));
            }
        }
    }

    /// Notes a missing approval once.
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
            " (a dangerous kind controls the cluster: writing it needs both its `status`, `own` or `write` \
             approval and its name in `dangerous`)"
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
    /// The sensitive kinds among those the plugin may touch, and the only namespaces it may.
    sensitive: SensitiveScope,
}

impl Grants {
    /// The effective access of `registration` under `config`, or which grants are missing.
    pub fn resolve(registration: &Registration, config: &GrantConfig) -> Result<Self, Box<NotGranted>> {
        let mut grants = Grants {
            for_kind: Some(registration.for_kind.clone()),
            for_filter: registration.for_filter.clone(),
            namespaces: config.namespaces.clone(),
            sensitive: SensitiveScope { namespaces: config.sensitive.namespaces.clone(), ..Default::default() },
            ..Grants::default()
        };
        let mut missing = NotGranted::default();
        #[cfg(feature = "insecure-test-authorizer")]
        let approving = config.approve_requests.then(|| config.with_requests_of(registration));
        #[cfg(feature = "insecure-test-authorizer")]
        let config = approving.as_ref().unwrap_or(config);
        let approved = |kind: &KindRef, verb: Approval| {
            let dangerous = if verb == Approval::Status { kind.is_dangerous_status() } else { kind.is_dangerous() };
            !dangerous || config.dangerous.contains(kind)
        };
        // `write` covers `status` and `own`, but not a status that is dangerous on its own.
        let covers = |verb: Approval, kind: &KindRef| {
            verb != Approval::Read
                && config.write.contains(kind)
                && !(verb == Approval::Status && kind.is_dangerous_status())
        };
        // A kind goes into `set` if the operator approved it for the verb (`granted`, or
        // `anywhere`, the `write` entry that covers every narrower write); else each missing
        // approval is noted, and a written dangerous kind needs its approval by name besides.
        let mut need = |set: &mut BTreeSet<KindRef>, kind: KindRef, verb: Approval, granted: &BTreeSet<KindRef>| {
            let allowed = granted.contains(&kind) || covers(verb, &kind);
            let is_approved = verb == Approval::Read || approved(&kind, verb);
            if !allowed {
                missing.note(format!("{} {kind}", verb.says()));
                missing.of(verb).insert(kind.clone());
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
        need(&mut grants.read, for_kind.clone(), Approval::Read, &config.read);
        need(&mut grants.write_status, for_kind, Approval::Status, &config.status);
        for kind in registration.owns.iter().map(KindRef::of) {
            need(&mut grants.read, kind.clone(), Approval::Read, &config.read);
            match config.write.contains(&kind) {
                true => need(&mut grants.write, kind, Approval::Write, &config.write),
                false => need(&mut grants.write_controlled, kind, Approval::Own, &config.own),
            }
        }
        for kind in registration.watches.iter().map(|w| KindRef::of(&w.kind)) {
            need(&mut grants.read, kind, Approval::Read, &config.read);
        }
        for kind in registration.reads.iter().map(KindRef::of) {
            need(&mut grants.read, kind, Approval::Read, &config.read);
        }
        for kind in registration.writes.iter().map(KindRef::of) {
            need(&mut grants.write, kind, Approval::Write, &config.write);
        }
        grants.sensitive.kinds = [&grants.read, &grants.write, &grants.write_controlled, &grants.write_status]
            .into_iter()
            .flatten()
            .filter(|k| k.is_sensitive() || config.sensitive.kinds.contains(k))
            .cloned()
            .collect();
        if !grants.sensitive.kinds.is_empty() && config.sensitive.namespaces.is_empty() {
            let kinds: Vec<String> = grants.sensitive.kinds.iter().map(ToString::to_string).collect();
            missing.note(format!("name the namespaces where it may touch {} (sensitive)", kinds.join(", ")));
            missing.sensitive_namespaces = true;
        }
        for ns in config.sensitive.namespaces.iter().filter(|ns| !super::api::address::is_label(ns)) {
            missing.note(format!("`{ns}` in sensitive.namespaces is not a namespace name"));
        }
        missing.drop_covered();
        if missing.missing.is_empty() { Ok(grants) } else { Err(Box::new(missing)) }
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

    /// Whether the plugin may write the status subresource of any object of `kind` (a `write`
    /// approval covers it, but for [`DANGEROUS_STATUS`] kinds).
    pub fn can_write_status(&self, kind: &GroupVersionKind) -> bool {
        holds(&self.write_status, kind) || (holds(&self.write, kind) && !is_dangerous_status(&kind.group, &kind.kind))
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

    /// Whether `kind` is one of the plugin's sensitive kinds, touched only in
    /// [`sensitive_namespaces`](Self::sensitive_namespaces).
    pub fn is_sensitive(&self, kind: &GroupVersionKind) -> bool {
        holds(&self.sensitive.kinds, kind)
    }

    /// The sensitive kinds the plugin may touch, for RBAC generation.
    pub fn sensitive(&self) -> impl Iterator<Item = &KindRef> {
        self.sensitive.kinds.iter()
    }

    /// The only namespaces where the plugin may touch its sensitive kinds.
    pub fn sensitive_namespaces(&self) -> &BTreeSet<String> {
        &self.sensitive.namespaces
    }

    /// The sensitive kinds the plugin may touch and the only namespaces it may: what its reads
    /// and requests elsewhere are refused by ([`SensitiveScope::hides`]).
    pub fn sensitive_scope(&self) -> &SensitiveScope {
        &self.sensitive
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
        let covered = self.write.iter().filter(|k| !self.write_status.contains(k) && !k.is_dangerous_status());
        self.write_status.iter().chain(covered)
    }

    /// Kinds writable where the plugin controls the object, for RBAC generation and diagnostics.
    pub fn writable_controlled(&self) -> impl Iterator<Item = &KindRef> {
        self.write_controlled.iter()
    }

    /// The [`DANGEROUS`] kinds the plugin may write in some way (each approved by its operator),
    /// sorted, for diagnostics.
    pub fn dangerous(&self) -> impl Iterator<Item = &KindRef> {
        let written = self.write.iter().chain(&self.write_controlled).chain(&self.write_status);
        let status = self.write_status.iter().filter(|k| k.is_dangerous_status());
        written.filter(|k| k.is_dangerous()).chain(status).collect::<BTreeSet<_>>().into_iter()
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

    fn config(yaml: &str) -> GrantConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    /// What `registration()` asks for, approved.
    const APPROVED: &str =
        "{read: [ConfigMap, Namespace, Deployment.apps], status: [Deployment.apps], own: [ConfigMap]}";

    #[test]
    fn approved_requests_read_triggers_write_owned_kinds_where_controlled_and_the_for_status() {
        let grants = Grants::resolve(&registration(), &config(APPROVED)).unwrap();
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
    fn a_plugin_whose_operator_approved_nothing_is_refused_with_every_request_listed() {
        let err = Grants::resolve(&registration(), &GrantConfig::default()).unwrap_err();
        assert_eq!(
            err.missing,
            [
                "read Deployment.apps",
                "write status of Deployment.apps",
                "read ConfigMap",
                "own ConfigMap",
                "read Namespace"
            ]
        );
        assert!(err.to_string().contains("its operator has not approved"), "{err}");
        assert_eq!(format!("grants: {APPROVED}"), err.fix());
    }

    #[test]
    fn owning_a_pod_or_reconciling_a_service_is_refused_without_approval() {
        // Held-out attacks: a pod in kube-system with a powerful ServiceAccount, a LoadBalancer
        // ingress IP written into a Service's status (CVE-2020-8554).
        let owns_pods =
            Registration { owns: vec![gvk("", "v1", "Pod")], ..Registration::new(gvk("", "v1", "ConfigMap")) };
        let err = Grants::resolve(&owns_pods, &config("{read: [ConfigMap, Pod], status: [ConfigMap]}")).unwrap_err();
        assert_eq!(err.missing, ["own Pod"]);
        let services = Registration::new(gvk("", "v1", "Service"));
        let err = Grants::resolve(&services, &config("{read: [Service]}")).unwrap_err();
        assert_eq!(err.missing, ["write status of Service", "approve Service as dangerous"]);
    }

    #[test]
    fn a_missing_write_approval_is_listed_without_the_status_approval_it_covers() {
        let reg = Registration { writes: vec![gvk("apps", "v1", "Deployment")], ..registration() };
        let err = Grants::resolve(&reg, &GrantConfig::default()).unwrap_err();
        assert!(!err.missing.contains(&"write status of Deployment.apps".to_owned()), "{:?}", err.missing);
        assert_eq!(
            err.fix(),
            "grants: {read: [ConfigMap, Namespace, Deployment.apps], own: [ConfigMap], write: [Deployment.apps]}"
        );
        let mut config = config(APPROVED);
        config.status.clear();
        config.write.insert("Deployment.apps".parse().unwrap());
        assert!(Grants::resolve(&reg, &config).unwrap().can_write_status(&gvk("apps", "v1", "Deployment")));
    }

    #[test]
    fn a_services_or_pods_status_is_dangerous_and_a_write_approval_does_not_cover_it() {
        let services = Registration::new(gvk("", "v1", "Service"));
        let err = Grants::resolve(&services, &config("{read: [Service], status: [Service]}")).unwrap_err();
        assert_eq!(err.missing, ["approve Service as dangerous"]);
        let grants = Grants::resolve(&services, &config("{read: [Service], status: [Service], dangerous: [Service]}"));
        assert!(grants.unwrap().can_write_status(&gvk("", "v1", "Service")));
        // Writing Services anywhere is not dangerous; their status still is.
        let writer = Registration { writes: vec![gvk("", "v1", "Service")], ..registration() };
        let mut config = config(APPROVED);
        config.write.insert("Service".parse().unwrap());
        let grants = Grants::resolve(&writer, &config).unwrap();
        assert!(grants.can_write(&gvk("", "v1", "Service")) && !grants.can_write_status(&gvk("", "v1", "Service")));
        assert!(!grants.status_writable().any(|k| k.kind == "Service"), "no RBAC for services/status either");
        let pods = Registration::new(gvk("", "v1", "Pod"));
        let err = Grants::resolve(&pods, &self::config("{read: [Pod], write: [Pod]}")).unwrap_err();
        assert_eq!(err.fix(), "grants: {status: [Pod], dangerous: [Pod]}", "{:?}", err.missing);
    }

    #[test]
    fn extra_reads_and_writes_need_a_grant_and_the_error_lists_each() {
        let mut reg = registration();
        reg.reads.push(gvk("", "v1", "Pod"));
        reg.writes.push(gvk("", "v1", "Service"));
        let err = Grants::resolve(&reg, &config(APPROVED)).unwrap_err();
        assert_eq!(err.missing, vec!["read Pod".to_owned(), "write Service".to_owned()]);
        assert!(err.to_string().ends_with("add to its config `grants: {read: [Pod], write: [Service]}`"), "{err}");
        let mut config = config(APPROVED);
        config.read.insert("Pod".parse().unwrap());
        config.write.insert("Service".parse().unwrap());
        let grants = Grants::resolve(&reg, &config).unwrap();
        assert!(grants.can_read(&gvk("", "v1", "Pod")) && grants.can_write(&gvk("", "v1", "Service")));
    }

    #[test]
    fn an_explicit_write_grant_on_an_owned_kind_writes_it_anywhere() {
        let config =
            config("{read: [Deployment.apps, ConfigMap, Namespace], status: [Deployment.apps], write: [ConfigMap]}");
        let grants = Grants::resolve(&registration(), &config).unwrap();
        assert_eq!(grants.write_scope(&gvk("", "v1", "ConfigMap")), Some(WriteScope::Anywhere));
        assert_eq!(grants.for_kind(), Some(&gvk("apps", "v1", "Deployment")));
    }

    #[test]
    fn secrets_need_an_explicit_grant_even_when_owned() {
        let mut reg = registration();
        reg.owns.push(gvk("", "v1", "Secret"));
        let err = Grants::resolve(&reg, &config(APPROVED)).unwrap_err();
        assert_eq!(err.missing, vec!["read Secret".to_owned(), "own Secret".to_owned()]);
    }

    #[test]
    fn reading_secrets_needs_the_namespaces_to_read_them_in_and_touches_them_only_there() {
        let mut reg = registration();
        reg.reads.push(gvk("", "v1", "Secret"));
        let mut config = config(APPROVED);
        config.read.insert("Secret".parse().unwrap());
        let err = Grants::resolve(&reg, &config).unwrap_err();
        assert_eq!(err.missing, ["name the namespaces where it may touch Secret (sensitive)"]);
        assert_eq!(err.fix(), "grants: {sensitive: {namespaces: [<namespace>, …]}}");
        config.sensitive.namespaces = ["team-a".to_owned(), "Team_B".to_owned()].into();
        let err = Grants::resolve(&reg, &config).unwrap_err();
        assert_eq!(err.missing, ["`Team_B` in sensitive.namespaces is not a namespace name"]);
        config.sensitive.namespaces = ["team-a".to_owned()].into();
        let grants = Grants::resolve(&reg, &config).unwrap();
        assert!(grants.is_sensitive(&gvk("", "v1", "Secret")) && !grants.is_sensitive(&gvk("", "v1", "ConfigMap")));
        assert_eq!(grants.sensitive_namespaces(), &config.sensitive.namespaces);
    }

    #[test]
    fn an_operator_marks_more_kinds_sensitive_and_only_those_the_plugin_touches_count() {
        let mut config = config(APPROVED);
        config.sensitive.kinds = ["ConfigMap".parse().unwrap(), "Pod".parse().unwrap()].into();
        let err = Grants::resolve(&registration(), &config).unwrap_err();
        assert_eq!(err.missing, ["name the namespaces where it may touch ConfigMap (sensitive)"]);
        config.sensitive.namespaces = ["team-a".to_owned()].into();
        let grants = Grants::resolve(&registration(), &config).unwrap();
        assert_eq!(grants.sensitive().map(ToString::to_string).collect::<Vec<_>>(), ["ConfigMap"]);
    }

    #[test]
    fn granting_more_than_registered_gives_nothing_extra() {
        let mut config = config(APPROVED);
        config.read.insert("Pod".parse().unwrap());
        let grants = Grants::resolve(&registration(), &config).unwrap();
        assert!(!grants.can_read(&gvk("", "v1", "Pod")));
    }

    #[test]
    fn a_namespace_scope_parses_names_and_a_selector_and_rejects_a_bad_selector() {
        let scoped = format!("{{namespaces: {{names: [team-a], selector: 'team in (b,c)'}}, {}", &APPROVED[1..]);
        let config = config(&scoped);
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

    #[test]
    fn a_kind_spelled_otherwise_than_the_api_server_names_it_is_refused_in_a_config_and_a_registration() {
        // Lowercased, `secret` would name nothing the host serves yet become `secrets` in RBAC.
        for bad in ["secret", "Secret.core", "Deployment.Apps", "9Lives"] {
            assert!(bad.parse::<KindRef>().is_err(), "{bad}");
        }
        let lowercase = Registration { reads: vec![gvk("", "v1", "secret")], ..registration() };
        assert!(lowercase.validate().is_err());
        let core = Registration { reads: vec![gvk("core", "v1", "Secret")], ..registration() };
        assert!(core.validate().is_err());
        assert!(registration().validate().is_ok());
    }
}
