//! The authorizer: the one place that decides whether a plugin may make a request, from who asks,
//! what it addresses, what exists there and what it would write.
//!
//! Every host function that reads or writes on a plugin's behalf builds a [`Request`] and asks
//! [`Authorizer::decide`]; none decides anything itself. A decision may first need facts the host
//! must fetch (the kind's scope from discovery, the addressed object from the cache or, where the
//! cache does not hold it, from the API server): `decide` then answers [`Decision::Lookup`] and
//! is asked again with the fact filled in (`PluginCtx::authorize` in `host/authorize.rs` runs
//! that loop). So a write is always judged on the object as it exists, never on its body alone:
//! an apply of an object the cache does not hold is let through only as a create
//! ([`Decision::AllowIfAbsent`]), which the API server refuses if the object exists after all,
//! and the host then asks again with the server's copy.
//!
//! The rules, in order:
//! 0. Hidden: no plugin reads, gets or is handed what the host hides from all (the Secrets of
//!    its own and the module namespace, [`Protected::hides`]); the authorizer installs the same
//!    rule on the plugin's cache view, so cached reads leave them out.
//! 1. Kind grants: reads of readable kinds, writes of writable kinds, status writes of the for
//!    kind (or of a kind granted `write`).
//! 2. Address: a cluster-scoped kind names no namespace; the object's namespace (a Namespace's
//!    own name) lies in `grants.namespaces`; no write reaches a protected host object, no Event
//!    a protected namespace.
//! 3. Body: no write sets managedFields or the host's mark ([`PLUGIN_LABEL`](crate::api::PLUGIN_LABEL)) to another
//!    plugin; a status write changes nothing outside `status`, judged on the object the write
//!    would leave ([`body::status_write_effect`]), and only of an object the plugin reconciles
//!    (its for filter) unless granted `write` on the kind.
//! 4. Ownership, for owned kinds without a `write` grant: the plugin may create objects it
//!    controls (a controller ownerReference to an object it reconciles), and may change or delete
//!    only objects it made (the mark, or its field manager in managedFields) and controls (a
//!    controller of its for kind, selected or not, so it can clean up after an owner leaves its
//!    selection). What it creates or applies there carries its mark.
//! 5. Ownership, under a `write` grant: the plugin may change or delete any object of the kind
//!    in its scope but one another plugin's mark names (an operator hands that over); what it
//!    creates carries its mark, and what it made keeps it.

pub mod body;
#[cfg(test)]
mod tests;

use kube::core::GroupVersionKind;
use serde_json::Value;

use super::api::{ApiCall, CacheReader, Hidden, ObjectRef, Patch, Scope};
use super::control;
use super::grants::{Grants, KindRef, WriteScope};
use super::protected::Protected;
use body::{StatusBody, StatusEffect};

/// What a plugin asks to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// A read of the cache (get, list, by-index), or a key or `map` input handed to the plugin.
    Read,
    /// The uncached `client.get`.
    Get,
    /// Server-side apply.
    Apply,
    /// Create.
    Create,
    /// Patch (merge, strategic or JSON).
    Patch,
    /// Delete.
    Delete,
    /// An Event regarding the object.
    Event,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Get => "get",
            Verb::Apply => "apply",
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Event => "publish an Event about",
        }
    }
}

/// The body a write carries.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// None (delete, reads, Events).
    None,
    /// A whole object (apply, create).
    Object(&'a Value),
    /// A patch.
    Patch(&'a Patch),
}

/// One request of one plugin.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// What it does.
    pub verb: Verb,
    /// The object as addressed (for apply and create: as the body names it).
    pub target: &'a ObjectRef,
    /// Whether it writes the status subresource.
    pub status: bool,
    /// What it writes.
    pub body: Body<'a>,
}

impl<'a> Request<'a> {
    /// The request `call` makes, as the authorizer judges it.
    pub fn of(call: &'a ApiCall) -> Self {
        let (verb, status, body) = match call {
            ApiCall::Apply { object, .. } => (Verb::Apply, false, Body::Object(&object.body)),
            ApiCall::ApplyStatus { object, .. } => (Verb::Apply, true, Body::Object(&object.body)),
            ApiCall::Create(object) => (Verb::Create, false, Body::Object(&object.body)),
            ApiCall::Patch { patch, options, .. } => (Verb::Patch, options.status, Body::Patch(patch)),
            ApiCall::Delete { .. } => (Verb::Delete, false, Body::None),
            ApiCall::Get(_) => (Verb::Get, false, Body::None),
            ApiCall::Event(_) => (Verb::Event, false, Body::None),
        };
        Request { verb, target: call.target(), status, body }
    }
}

/// What the host has found out for a request so far.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The kind's scope; `None` until looked up.
    pub scope: Option<Scope>,
    /// The addressed object.
    pub existing: Existing,
}

/// The addressed object, as far as the host has looked.
#[derive(Clone, Debug, Default)]
pub enum Existing {
    /// Not looked up yet.
    #[default]
    Unknown,
    /// Not in the cache: the API server may or may not hold it.
    Uncached,
    /// The cache's copy (without managedFields).
    Cached(Value),
    /// The API server's copy (`None`: it does not exist).
    Server(Option<Value>),
}

/// A fact the authorizer needs before it decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The kind's scope, from discovery.
    Scope,
    /// The addressed object: the cache's copy, else [`Existing::Uncached`].
    Existing,
    /// The addressed object as the API server has it (with managedFields).
    Server,
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send it; with `mark`, the host first labels the body as made by this plugin.
    Allow {
        /// Whether to add the host's mark to the body.
        mark: bool,
    },
    /// Send it, marked, only as a create: the object is not in the cache, and the body would be
    /// allowed to create it. The host sends it so that the API server refuses it if the object
    /// exists (`only_if_absent`), and on that refusal asks again with the server's copy. This
    /// spares the read of the server's copy before each first write, without a moment between
    /// the read and the write in which another client could create the object.
    AllowIfAbsent,
    /// Refused, and why.
    Deny(String),
    /// Refused because another plugin made the object (its mark names `holder`), and why: only
    /// an operator hands it over (`kubewasm handover`), so the plugin's status says so too.
    Held {
        /// The plugin whose mark the object carries.
        holder: String,
        /// The refusal, naming the holder and the handover.
        why: String,
    },
    /// The addressed object does not exist: answer not-found without sending anything.
    Absent,
    /// Ask again with this fact.
    Lookup(Lookup),
}

/// One plugin version's authorizer: its grants, the host's protected objects, and its cache
/// (for owners and namespace scope).
pub struct Authorizer {
    plugin: String,
    manager: String,
    grants: Grants,
    protected: Protected,
    cache: std::sync::Arc<dyn CacheReader>,
    /// Allow every request: only a test build's runtime sets it
    /// (`RuntimeConfig::authorizer_allows_everything`).
    allow_all: bool,
    /// Kinds the plugin's identity was found to lack read rights on: the host serves it none of
    /// them (cache reads included) until a review finds the rights ([`withhold`](Self::withhold)).
    withheld: parking_lot::RwLock<std::collections::BTreeSet<KindRef>>,
}

impl Authorizer {
    /// The authorizer of plugin `plugin` (whose field manager is `kubewasm/<plugin>`).
    pub fn new(plugin: &str, grants: Grants, protected: Protected, cache: std::sync::Arc<dyn CacheReader>) -> Self {
        // What the cache leaves out of the plugin's reads: what no plugin reads (the host's
        // Secrets, [`Protected::hides`]), and its sensitive kinds outside the namespaces its
        // operator named for them.
        let (hidden, sensitive) = (protected.clone(), grants.sensitive_scope().clone());
        cache.hide(Hidden::new(move |kind, namespace| {
            hidden.hides(kind, namespace).is_some() || sensitive.hides(kind, namespace)
        }));
        Self {
            plugin: plugin.to_owned(),
            manager: format!("kubewasm/{plugin}"),
            grants,
            protected,
            cache,
            allow_all: false,
            withheld: Default::default(),
        }
    }

    /// With `allow`, every request is allowed and sent as the plugin wrote it (unmarked): the
    /// test builds' switch that leaves the API server as the only layer.
    pub(crate) fn allowing_everything(self, allow: bool) -> Self {
        Self { allow_all: allow, ..self }
    }

    /// The plugin it decides for: a canary candidate's is the plugin it is a candidate of.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// The plugin's effective grants.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// Whether the plugin may see an object at this address: namespaced objects in its
    /// namespaces, Namespaces by name, other cluster-scoped objects always.
    pub fn sees(&self, kind: &GroupVersionKind, namespace: Option<&str>, name: &str) -> bool {
        let sensitive = !self.allow_all && self.grants.sensitive_scope().hides(kind, namespace);
        if sensitive || self.protected.hides(kind, namespace).is_some() {
            return false;
        }
        // Asked for every trigger event: an unconfined plugin (most) answers without a lock.
        if self.grants.namespaces().is_none() {
            return true;
        }
        match namespace {
            Some(ns) => self.cache.in_scope(ns),
            None if is_namespace(kind) => self.cache.in_scope(name),
            None => true,
        }
    }

    /// Why the plugin may not touch an object of `kind` in `namespace`, if `kind` is sensitive
    /// to it and the namespace is not one its operator named for sensitive kinds.
    fn sensitive_refusal(&self, kind: &GroupVersionKind, namespace: Option<&str>) -> Option<String> {
        if self.allow_all || !self.grants.sensitive_scope().hides(kind, namespace) {
            return None;
        }
        match namespace {
            Some(ns) => Some(format!(
                "{} is sensitive: the plugin touches it only in the namespaces of grants.sensitive.namespaces, \
                 not {ns}",
                KindRef::of(kind)
            )),
            None => Some(format!("{} is sensitive: the plugin touches it only in named namespaces", KindRef::of(kind))),
        }
    }

    /// From now on, serve the plugin nothing of `kinds` (what a review found its identity may not
    /// read), replacing the kinds withheld before: the host's cache would otherwise show it what
    /// its own identity may not see.
    pub fn withhold(&self, kinds: std::collections::BTreeSet<KindRef>) {
        *self.withheld.write() = kinds;
    }

    /// Whether the plugin may read `kind` at all: [`Verb::Read`]'s whole rule (the cache shows a
    /// confined plugin only what it may see), here without building a request, since every
    /// cache read asks.
    pub fn may_read(&self, kind: &GroupVersionKind) -> Result<(), String> {
        if self.allow_all {
            return Ok(());
        }
        if self.grants.can_read(kind) {
            let withheld = self.withheld.read();
            if crate::grants::holds(&withheld, kind) {
                return Err(format!(
                    "its identity lacks the right to read {} (the WasmPlugin's RBACMissing condition lists it): \
                     the host serves it none until it has",
                    KindRef::of(kind)
                ));
            }
            Ok(())
        } else {
            let kind = KindRef::of(kind);
            Err(format!(
                "register the kind {kind} in describe() (for, owns, watches or reads), approved as \
                 `grants.read: [{kind}]` in the plugin's config ({}.yaml)",
                self.plugin
            ))
        }
    }

    /// The refusal message of a read of `kind` denied with `why`.
    pub fn read_message(&self, kind: &GroupVersionKind, why: &str) -> String {
        format!("plugin `{}` may not read {}: {why}", self.plugin, KindRef::of(kind))
    }

    /// Decides `request` on `facts`; see the module doc for the rules.
    pub fn decide(&self, request: &Request<'_>, facts: &Facts) -> Decision {
        if self.allow_all {
            // Sent as the plugin wrote it: the host's mark is the host's layer too.
            return Decision::Allow { mark: false };
        }
        match self.refusal(request, facts) {
            Ok(decision) => decision,
            Err(why) => Decision::Deny(why),
        }
    }

    fn refusal(&self, req: &Request<'_>, facts: &Facts) -> Result<Decision, String> {
        let (target, kind) = (req.target, &req.target.kind);
        let kind_ref = || KindRef::of(kind);
        if matches!(req.verb, Verb::Read | Verb::Get | Verb::Event) {
            self.may_read(kind)?;
            if let Some(why) = self.protected.hides(kind, target.namespace.as_deref()) {
                return Err(why);
            }
        }
        if let Some(why) = self.sensitive_refusal(kind, target.namespace.as_deref()) {
            return Err(why);
        }
        if req.verb == Verb::Read {
            return Ok(Decision::Allow { mark: false });
        }
        let Some(scope) = facts.scope.clone() else { return Ok(Decision::Lookup(Lookup::Scope)) };
        if let (Scope::Cluster, Some(ns)) = (&scope, &target.namespace) {
            return Err(format!(
                "{} is cluster-scoped: a request for it names no namespace (it named {ns})",
                kind_ref()
            ));
        }
        let home = match scope {
            Scope::Namespaced => target.namespace.as_deref(),
            Scope::Cluster => is_namespace(kind).then_some(target.name.as_str()),
        };
        if let Some(ns) = home.filter(|ns| !self.cache.in_scope(ns)) {
            return Err(format!(
                "namespace {ns} is outside the namespaces the plugin is confined to (grants.namespaces)"
            ));
        }
        match req.verb {
            Verb::Get => return Ok(Decision::Allow { mark: false }),
            Verb::Event => {
                // Where the Event is created: the object's namespace, `default` for cluster-scoped.
                let ns = target.namespace.as_deref().unwrap_or("default");
                return match self.protected.refuses_namespace(ns) {
                    Some(why) => Err(format!("no plugin publishes Events in {ns}: {why}")),
                    None => Ok(Decision::Allow { mark: false }),
                };
            }
            _ => {}
        }
        if let Some(why) = self.protected.refuses(target) {
            return Err(why);
        }
        let write = self.grants.write_scope(kind);
        let why = match (req.body, write) {
            (Body::Object(object), _) => body::object_refusal(object, &self.plugin),
            (Body::Patch(patch), scope) => {
                body::patch_refusal(patch, &self.plugin, scope != Some(WriteScope::Anywhere) && !req.status)
            }
            (Body::None, _) => None,
        };
        if let Some(why) = why {
            return Err(why);
        }
        if kind.group.is_empty() && kind.kind == "Service" && !req.status {
            let (object, patch) = match req.body {
                Body::Object(object) => (Some(object), None),
                Body::Patch(patch) => (None, Some(patch)),
                Body::None => (None, None),
            };
            if let Some(why) = body::external_ips_refusal(object, patch) {
                return Err(why);
            }
        }
        if req.status {
            // `write` opens every object's status, but for kinds whose status is dangerous on its
            // own (a Service's load balancer, a Pod's readiness): those need their approval.
            let anywhere = write == Some(WriteScope::Anywhere) && self.grants.can_write_status(kind);
            return self.status_write(req, facts, anywhere);
        }
        match write {
            None => Err(format!(
                "own the kind {0} (its controlled objects, approved as `grants.own: [{0}]`), or register it under \
                 writes in describe() with `grants.write: [{0}]` in the plugin's config ({1}.yaml)",
                kind_ref(),
                self.plugin
            )),
            Some(WriteScope::Anywhere) => Ok(self.anywhere_write(req, facts)),
            Some(WriteScope::Controlled) => self.controlled_write(req, facts),
        }
    }

    /// A status write: only of objects the plugin reconciles (or of a kind granted `write`),
    /// changing nothing outside `status`.
    fn status_write(&self, req: &Request<'_>, facts: &Facts, granted: bool) -> Result<Decision, String> {
        if !granted && !self.grants.can_write_status(&req.target.kind) {
            // No grant is suggested: `write` on the kind would open every object's status to it.
            return Err(format!(
                "a plugin writes the status of its for kind only, and {} is not its for kind \
                 (its controller writes an owned object's status)",
                KindRef::of(&req.target.kind)
            ));
        }
        let existing = match &facts.existing {
            Existing::Unknown => return Ok(Decision::Lookup(Lookup::Existing)),
            Existing::Uncached => return Ok(Decision::Lookup(Lookup::Server)),
            Existing::Server(None) => return Ok(Decision::Absent),
            Existing::Cached(v) | Existing::Server(Some(v)) => v,
        };
        if !granted && !control::reconciled(self.grants.for_filter(), existing) {
            return Err("it is not an object this plugin reconciles (its for kind's selector leaves it out)".into());
        }
        let body = match req.body {
            Body::Object(object) => StatusBody::Object(object),
            Body::Patch(patch) => StatusBody::Patch(patch),
            Body::None => return Ok(Decision::Allow { mark: false }),
        };
        match body::status_write_effect(&body, existing) {
            StatusEffect::OnlyStatus => Ok(Decision::Allow { mark: false }),
            StatusEffect::Changes(path) => {
                Err(format!("a status write changes only status, and this one changes {path}"))
            }
            // The cache's copy may lag the server's: judged again on the server's.
            StatusEffect::DoesNotApply(_) if matches!(facts.existing, Existing::Cached(_)) => {
                Ok(Decision::Lookup(Lookup::Server))
            }
            StatusEffect::DoesNotApply(why) => Err(format!("the patch does not apply to the object: {why}")),
        }
    }

    /// A write under a `write` grant: any object in scope but one another plugin made (that
    /// one is handed over by an operator, as an owned kind's is); what the write creates is
    /// marked, and what the plugin made keeps its mark.
    fn anywhere_write(&self, req: &Request<'_>, facts: &Facts) -> Decision {
        if req.verb == Verb::Create {
            // A create never changes an existing object: the API server refuses it if one exists.
            return Decision::Allow { mark: true };
        }
        let existing = match &facts.existing {
            Existing::Unknown => return Decision::Lookup(Lookup::Existing),
            // Not in the cache, so most likely absent: an apply is sent only if absent (marked,
            // and judged again on the server's copy if it exists after all); a patch or delete is
            // sent as it is, since one of an object made a moment ago by another plugin (marked)
            // is what the mark policy refuses on its own.
            Existing::Uncached => {
                return match (req.verb, req.body) {
                    (Verb::Apply, Body::Object(object)) if object.pointer("/metadata/resourceVersion").is_none() => {
                        Decision::AllowIfAbsent
                    }
                    (Verb::Apply, _) => Decision::Lookup(Lookup::Server),
                    _ => Decision::Allow { mark: false },
                };
            }
            // The cache may lag a handover: the server's copy decides a refusal.
            Existing::Cached(v) if body::mark(v).is_some_and(|m| m != self.plugin) => {
                return Decision::Lookup(Lookup::Server);
            }
            Existing::Server(None) if req.verb == Verb::Apply => return Decision::Allow { mark: true },
            Existing::Server(None) => return Decision::Absent,
            Existing::Cached(v) | Existing::Server(Some(v)) => v,
        };
        match body::mark(existing) {
            Some(maker) if maker != self.plugin => {
                self.held(req, maker, "a `write` approval covers every object of the kind but another plugin's")
            }
            mark => Decision::Allow { mark: mark.is_some() && req.verb == Verb::Apply },
        }
    }

    /// The refusal of `req` on an object plugin `maker` made, naming the handover; `hint` says
    /// what the plugin may write instead.
    fn held(&self, req: &Request<'_>, maker: &str, hint: &str) -> Decision {
        let why = format!(
            "the plugin did not make it: plugin `{maker}` did ({}: {maker}); if this plugin should own it, \
             an operator hands it over with `kubewasm handover --from {maker} --to {} --kind {}{}`; {hint}",
            crate::api::PLUGIN_LABEL,
            self.plugin,
            KindRef::of(&req.target.kind),
            req.target.namespace.as_deref().map(|ns| format!(" --namespace {ns}")).unwrap_or_default(),
        );
        Decision::Held { holder: maker.to_owned(), why }
    }

    /// A write of an owned kind without a `write` grant (see the module doc, rule 4).
    fn controlled_write(&self, req: &Request<'_>, facts: &Facts) -> Result<Decision, String> {
        let for_kind = self.grants.for_kind().ok_or("the plugin has no for kind")?;
        let kind = KindRef::of(&req.target.kind);
        let hint = || {
            format!(
                "a plugin writes objects of its owned kind {kind} only if it made them and one of its {} objects controls them",
                KindRef::of(for_kind)
            )
        };
        let ns = req.target.namespace.as_deref();
        let body_controlled = |object: &Value| {
            control::check(self.cache.as_ref(), for_kind, self.grants.for_filter(), object, ns)
                .map_err(|e| format!("the object written {e}; {}", hint()))
        };
        if let (Verb::Create, Body::Object(object)) = (req.verb, req.body) {
            // A create never changes an existing object: the API server refuses it if one exists.
            return body_controlled(object).map(|()| Decision::Allow { mark: true });
        }
        let existing = match &facts.existing {
            Existing::Unknown => return Ok(Decision::Lookup(Lookup::Existing)),
            Existing::Uncached => {
                return match (req.verb, req.body) {
                    // A body that names a resourceVersion already carries its own lock.
                    (Verb::Apply, Body::Object(object)) if object.pointer("/metadata/resourceVersion").is_none() => {
                        body_controlled(object).map(|()| Decision::AllowIfAbsent)
                    }
                    _ => Ok(Decision::Lookup(Lookup::Server)),
                };
            }
            Existing::Cached(v) if body::mark(v) != Some(&self.plugin) => return Ok(Decision::Lookup(Lookup::Server)),
            Existing::Server(None) => {
                return match (req.verb, req.body) {
                    (Verb::Apply, Body::Object(object)) => {
                        body_controlled(object).map(|()| Decision::Allow { mark: true })
                    }
                    _ => Ok(Decision::Absent),
                };
            }
            Existing::Cached(v) | Existing::Server(Some(v)) => v,
        };
        if !body::made_by(existing, &self.plugin, &self.manager) {
            let Some(maker) = body::mark(existing) else {
                return Err(format!(
                    "the plugin did not make it: no {} label naming it; {}",
                    crate::api::PLUGIN_LABEL,
                    hint()
                ));
            };
            return Ok(self.held(req, maker, &hint()));
        }
        control::controller_of_kind(existing, for_kind).map_err(|e| format!("the object {e}; {}", hint()))?;
        match (req.verb, req.body) {
            (Verb::Apply, Body::Object(object)) => body_controlled(object).map(|()| Decision::Allow { mark: true }),
            _ => Ok(Decision::Allow { mark: false }),
        }
    }

    /// The refusal message a plugin sees for `request` denied with `why`.
    pub fn message(&self, req: &Request<'_>, why: &str) -> String {
        let status = if req.status { "the status of " } else { "" };
        let key = kubewasm_informer::ObjectKey::new(req.target.namespace.as_deref(), &req.target.name);
        let kind = KindRef::of(&req.target.kind);
        if req.verb == Verb::Read {
            return self.read_message(&req.target.kind, why);
        }
        format!("plugin `{}` may not {} {status}{kind} {key}: {why}", self.plugin, req.verb.as_str())
    }
}

fn is_namespace(kind: &GroupVersionKind) -> bool {
    kind.group.is_empty() && kind.kind == "Namespace"
}
