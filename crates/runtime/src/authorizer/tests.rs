//! The authorizer's table: each row one request, the facts the host would find, and the decision.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use super::*;
use crate::api::testing::MemoryCache;
use crate::api::{CallError, ListOptions, ObjectList, builtin_scope};
use crate::grants::GrantConfig;
use crate::registration::{EventFilter, Registration, WatchSpec};

/// A cache confined to the namespace `in` (and the Namespace `in`).
struct Scoped(MemoryCache);

impl CacheReader for Scoped {
    fn get(&self, kind: &GroupVersionKind, ns: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, CallError> {
        self.0.get(kind, ns, name)
    }
    fn list(
        &self,
        kind: &GroupVersionKind,
        ns: Option<&str>,
        sel: Option<&str>,
        max: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        self.0.list(kind, ns, sel, max)
    }
    fn list_page(&self, kind: &GroupVersionKind, options: &ListOptions, max: usize) -> Result<ObjectList, CallError> {
        self.0.list_page(kind, options, max)
    }
    fn by_index(
        &self,
        kind: &GroupVersionKind,
        index: &str,
        value: &str,
        max: usize,
    ) -> Result<Vec<Vec<u8>>, CallError> {
        self.0.by_index(kind, index, value, max)
    }
    fn in_scope(&self, namespace: &str) -> bool {
        namespace == "in"
    }
    fn hide(&self, hidden: crate::api::Hidden) {
        self.0.hide(hidden);
    }
}

fn gvk(group: &str, version: &str, kind: &str) -> GroupVersionKind {
    GroupVersionKind::gvk(group, version, kind)
}

fn cm() -> GroupVersionKind {
    gvk("", "v1", "ConfigMap")
}

fn deployment() -> GroupVersionKind {
    gvk("apps", "v1", "Deployment")
}

fn namespace() -> GroupVersionKind {
    gvk("", "v1", "Namespace")
}

/// A controller ownerReference to the Deployment `web` (uid `u-web`) or another.
fn owner(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": format!("u-{name}"), "controller": true})
}

/// A ConfigMap in `ns` made by `maker` (`None`: nobody marked it) and controlled by `by`.
fn child(ns: &str, name: &str, maker: Option<&str>, by: &str) -> Value {
    let labels = maker.map_or(json!({}), |m| json!({PLUGIN_LABEL: m}));
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [owner(by)]}})
}

use crate::api::PLUGIN_LABEL;

/// `object` naming a resourceVersion.
fn with_version(mut object: Value) -> Value {
    object["metadata"]["resourceVersion"] = json!("7");
    object
}

/// The world every row is decided in: what the cache holds, and what the API server holds.
struct World {
    cache: Arc<Scoped>,
    server: BTreeMap<(String, Option<String>, String), Value>,
}

impl World {
    fn new() -> Self {
        let cached = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": "in", "uid": "u-web", "labels": {"app": "web"}}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "other", "namespace": "in", "uid": "u-other", "labels": {"app": "other"}}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "in", "uid": "u-in"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "out", "uid": "u-out"}}),
            child("in", "mine", Some("p"), "web"),
            child("in", "theirs", Some("q"), "web"),
            child("in", "nobodys", None, "web"),
            // Made by p for an owner that has since left its selection.
            child("in", "orphan", Some("p"), "other"),
            child("out", "mine", Some("p"), "web"),
        ];
        let cache = MemoryCache::default();
        let mut server = BTreeMap::new();
        for object in cached {
            cache.insert(&object);
            server.insert(key_of(&object), object);
        }
        // On the server only: made by q a moment ago, and made by p a moment ago (managedFields).
        let by_q = child("in", "uncached", Some("q"), "web");
        let mut by_p = child("in", "fresh", None, "web");
        by_p["metadata"]["managedFields"] = json!([{"manager": "kubewasm/p", "operation": "Apply"}]);
        for object in [by_q, by_p] {
            server.insert(key_of(&object), object);
        }
        // Made by p, then handed over to q (`kubewasm handover` moved the mark, and p's field
        // manager entry is still there).
        let mut handed = child("in", "handed", Some("q"), "web");
        handed["metadata"]["managedFields"] = json!([{"manager": "kubewasm/p", "operation": "Apply"}]);
        cache.insert(&handed);
        server.insert(key_of(&handed), handed);
        Self { cache: Arc::new(Scoped(cache)), server }
    }

    fn authorizer(&self, registration: Registration, grants: &str) -> Authorizer {
        let mut config: GrantConfig = serde_yaml::from_str(grants).unwrap();
        config.namespaces = Some(serde_yaml::from_str("names: [in]").unwrap());
        let grants = Grants::resolve(&registration, &config.with_requests_of(&registration)).unwrap();
        let protected = Protected::default();
        protected.namespace("kubewasm-system", "is the host's own namespace");
        Authorizer::new("p", grants, protected, self.cache.clone())
    }

    /// Decides `request` as `PluginCtx::authorize` does, answering each lookup from this world.
    fn decide(&self, authorizer: &Authorizer, request: &Request<'_>) -> Decision {
        let mut facts = Facts::default();
        loop {
            let t = request.target;
            let server = || self.server.get(&(t.kind.kind.clone(), t.namespace.clone(), t.name.clone())).cloned();
            match authorizer.decide(request, &facts) {
                Decision::Lookup(Lookup::Scope) => facts.scope = Some(builtin_scope(&t.kind)),
                Decision::Lookup(Lookup::Existing) => {
                    facts.existing = match self.cache.get(&t.kind, t.namespace.as_deref(), &t.name) {
                        Ok(Some(bytes)) => Existing::Cached(serde_json::from_slice(&bytes).unwrap()),
                        _ => Existing::Uncached,
                    }
                }
                Decision::Lookup(Lookup::Server) => facts.existing = Existing::Server(server()),
                // The API server refuses it (a conflict) if the object exists: asked again on its copy.
                Decision::AllowIfAbsent if server().is_some() => {
                    facts = Facts { existing: Existing::Server(server()), ..Facts::default() }
                }
                decision => return decision,
            }
        }
    }
}

fn key_of(object: &Value) -> (String, Option<String>, String) {
    let meta = &object["metadata"];
    let kind = object["kind"].as_str().unwrap().to_owned();
    (kind, meta["namespace"].as_str().map(str::to_owned), meta["name"].as_str().unwrap().to_owned())
}

/// `for: Deployment` selected by `app=web`, owning ConfigMaps.
fn owner_of_config_maps() -> Registration {
    Registration {
        owns: vec![cm()],
        for_filter: EventFilter { label_selector: Some("app=web".into()), ..EventFilter::default() },
        ..Registration::new(deployment())
    }
}

/// `for: Deployment`, watching ConfigMaps (read only).
fn reader_of_config_maps() -> Registration {
    let watch = WatchSpec { kind: cm(), label_selector: None, filter: EventFilter::default() };
    Registration { watches: vec![watch], ..Registration::new(deployment()) }
}

/// `for: Namespace`, owning ConfigMaps and registered to write Leases.
fn namespace_plugin() -> Registration {
    Registration {
        owns: vec![cm()],
        writes: vec![gvk("coordination.k8s.io", "v1", "Lease")],
        ..Registration::new(namespace())
    }
}

/// The decision a row expects.
#[derive(Debug)]
enum Want {
    Allow,
    Mark,
    /// Marked, and sent only if no such object exists.
    IfAbsent,
    Absent,
    /// Refused, the reason containing this.
    Deny(&'static str),
}

/// The plugin's grants in a row.
#[derive(Clone, Copy, Debug)]
enum Grant {
    /// Owns ConfigMaps, no `write` grant.
    Owns,
    /// Granted `write: [ConfigMap]`.
    Write,
    /// Reads ConfigMaps only.
    Reads,
    /// `for: Namespace`, owns ConfigMaps, granted `write: [Lease.coordination.k8s.io]` (approved as dangerous).
    ForNamespace,
}

struct Row {
    grant: Grant,
    verb: Verb,
    status: bool,
    kind: GroupVersionKind,
    namespace: Option<&'static str>,
    name: &'static str,
    body: Option<Value>,
    patch: Option<Patch>,
    want: Want,
}

fn row(grant: Grant, verb: Verb, kind: GroupVersionKind, at: (Option<&'static str>, &'static str), want: Want) -> Row {
    Row { grant, verb, status: false, kind, namespace: at.0, name: at.1, body: None, patch: None, want }
}

impl Row {
    fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }
    fn patch(mut self, patch: Patch) -> Self {
        self.patch = Some(patch);
        self
    }
    fn status(mut self) -> Self {
        self.status = true;
        self
    }
}

#[rustfmt::skip]
fn table() -> Vec<Row> {
    use Grant::*;
    use Verb::*;
    use Want::*;
    let (cm, dep, ns) = (cm(), deployment(), namespace());
    let lease = gvk("coordination.k8s.io", "v1", "Lease");
    let secret = gvk("", "v1", "Secret");
    let merge = |v: Value| super::Patch::Merge(v);
    let json_patch = |v: Value| super::Patch::Json(v);
    let strategic = |v: Value| super::Patch::Strategic(v);
    vec![
        // Reads: any readable kind; the cache itself hides what lies outside the scope.
        row(Owns, Read, cm.clone(), (Some("in"), ""), Allow),
        row(Reads, Read, cm.clone(), (None, ""), Allow),
        row(Owns, Read, secret.clone(), (None, ""), Deny("register the kind Secret")),
        row(Owns, Read, secret.clone(), (None, ""), Deny("`grants.read: [Secret]` in the plugin's config (p.yaml)")),
        // The uncached get: readable kinds, in scope, a Namespace judged by its name.
        row(Owns, Get, cm.clone(), (Some("in"), "anything"), Allow),
        row(Owns, Get, cm.clone(), (Some("out"), "anything"), Deny("namespace out is outside")),
        row(Owns, Get, secret.clone(), (Some("in"), "s"), Deny("register the kind Secret")),
        row(ForNamespace, Get, ns.clone(), (None, "out"), Deny("namespace out is outside")),
        row(ForNamespace, Get, ns.clone(), (Some("in"), "out"), Deny("cluster-scoped")),
        // Apply of an owned kind without a write grant: mine, another plugin's, nobody's, not
        // cached (another's), just created by me (managedFields), new; in and out of scope. Not
        // cached, it is sent only if absent, and judged on the server's copy if that refuses it.
        row(Owns, Apply, cm.clone(), (Some("in"), "mine"), Mark).body(child("in", "mine", None, "web")),
        row(Owns, Apply, cm.clone(), (Some("in"), "theirs"), Deny("did not make it")).body(child("in", "theirs", None, "web")),
        row(Owns, Apply, cm.clone(), (Some("in"), "nobodys"), Deny("did not make it")).body(child("in", "nobodys", None, "web")),
        row(Owns, Apply, cm.clone(), (Some("in"), "uncached"), Deny("did not make it")).body(child("in", "uncached", None, "web")),
        row(Owns, Apply, cm.clone(), (Some("in"), "fresh"), Mark).body(child("in", "fresh", None, "web")),
        row(Owns, Apply, cm.clone(), (Some("in"), "new"), IfAbsent).body(child("in", "new", None, "web")),
        // A body naming a resourceVersion has a lock of its own: the server's copy is read.
        row(Owns, Apply, cm.clone(), (Some("in"), "new"), Mark).body(with_version(child("in", "new", None, "web"))),
        row(Owns, Apply, cm.clone(), (Some("in"), "uncached"), Deny("did not make it")).body(with_version(child("in", "uncached", None, "web"))),
        row(Owns, Apply, cm.clone(), (Some("in"), "new"), Deny("is controlled by Deployment.apps other")).body(child("in", "new", None, "other")),
        row(Owns, Apply, cm.clone(), (Some("in"), "new"), Deny("no controller ownerReference"))
            .body(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new", "namespace": "in"}})),
        row(Owns, Apply, cm.clone(), (Some("in"), "new"), Deny("is not this plugin")).body(child("in", "new", Some("q"), "web")),
        row(Owns, Apply, cm.clone(), (Some("out"), "mine"), Deny("namespace out is outside")).body(child("out", "mine", None, "web")),
        row(Owns, Apply, cm.clone(), (Some("kubewasm-system"), "x"), Deny("namespace kubewasm-system is outside")).body(child("kubewasm-system", "x", None, "web")),
        // Patch: only what it made and controls, never its ownerReferences or the mark.
        row(Owns, Patch, cm.clone(), (Some("in"), "mine"), Allow).patch(merge(json!({"data": {"a": "b"}}))),
        row(Owns, Patch, cm.clone(), (Some("in"), "theirs"), Deny("did not make it")).patch(merge(json!({"data": {"a": "b"}}))),
        // The refusal names who holds it, and how an operator hands it over.
        row(Owns, Patch, cm.clone(), (Some("in"), "theirs"), Deny("plugin `q` did (kubewasm.dev/plugin: q); if this plugin should own it, an operator hands it over with `kubewasm handover --from q --to p --kind ConfigMap --namespace in`")).patch(merge(json!({"data": {"a": "b"}}))),
        // The mark decides over a field manager entry, as for the admission policy.
        row(Owns, Patch, cm.clone(), (Some("in"), "handed"), Deny("plugin `q` did")).patch(merge(json!({"data": {"a": "b"}}))),
        row(Owns, Delete, cm.clone(), (Some("in"), "handed"), Deny("plugin `q` did")),
        row(Owns, Patch, cm.clone(), (Some("in"), "uncached"), Deny("did not make it")).patch(merge(json!({"data": {}}))),
        row(Owns, Patch, cm.clone(), (Some("in"), "new"), Absent).patch(merge(json!({"data": {}}))),
        row(Owns, Patch, cm.clone(), (Some("in"), "mine"), Deny("ownerReferences")).patch(merge(json!({"metadata": {"ownerReferences": []}}))),
        row(Owns, Patch, cm.clone(), (Some("in"), "mine"), Deny("host's mark")).patch(merge(json!({"metadata": {"labels": {PLUGIN_LABEL: "q"}}}))),
        row(Owns, Patch, cm.clone(), (Some("in"), "mine"), Deny("host's mark")).patch(json_patch(json!([{"op": "remove", "path": "/metadata/labels"}]))),
        row(Owns, Patch, cm.clone(), (Some("in"), "mine"), Deny("managedFields")).patch(json_patch(json!([{"op": "add", "path": "/metadata/managedFields", "value": []}]))),
        // Delete: what it made, including after the owner left its selection.
        row(Owns, Delete, cm.clone(), (Some("in"), "mine"), Allow),
        row(Owns, Delete, cm.clone(), (Some("in"), "orphan"), Allow),
        row(Owns, Delete, cm.clone(), (Some("in"), "theirs"), Deny("did not make it")),
        row(Owns, Delete, cm.clone(), (Some("in"), "nobodys"), Deny("did not make it")),
        row(Owns, Delete, cm.clone(), (Some("in"), "fresh"), Allow),
        row(Owns, Delete, cm.clone(), (Some("in"), "new"), Absent),
        row(Owns, Delete, cm.clone(), (Some("out"), "mine"), Deny("namespace out is outside")),
        // Create: a controlled body, marked; the API server refuses it if the object exists.
        row(Owns, Create, cm.clone(), (Some("in"), "new"), Mark).body(child("in", "new", None, "web")),
        row(Owns, Create, cm.clone(), (Some("in"), "new"), Deny("is controlled by")).body(child("in", "new", None, "other")),
        // Status of an owned kind needs a write grant.
        row(Owns, Apply, cm.clone(), (Some("in"), "mine"), Deny("status of its for kind only")).status().body(child("in", "mine", None, "web")),
        // A write grant: anywhere in scope, whoever made it but another plugin (held-out round
        // of issue 49: unmarked, what one write-granted plugin applied was another's to
        // change, and the mark policy let it), never the mark of another.
        row(Write, Apply, cm.clone(), (Some("in"), "theirs"), Deny("plugin `q` did")).body(child("in", "theirs", None, "web")),
        row(Write, Apply, cm.clone(), (Some("in"), "theirs"), Deny("is not this plugin")).body(child("in", "theirs", Some("q"), "web")),
        row(Write, Patch, cm.clone(), (Some("in"), "theirs"), Deny("plugin `q` did")).patch(merge(json!({"metadata": {"ownerReferences": []}}))),
        row(Write, Patch, cm.clone(), (Some("in"), "theirs"), Deny("host's mark")).patch(merge(json!({"metadata": {"labels": {PLUGIN_LABEL: null}}}))),
        row(Write, Delete, cm.clone(), (Some("in"), "theirs"), Deny("kubewasm handover --from q --to p")),
        row(Write, Delete, cm.clone(), (Some("in"), "nobodys"), Allow),
        row(Write, Patch, cm.clone(), (Some("in"), "nobodys"), Allow).patch(merge(json!({"data": {}}))),
        row(Write, Apply, cm.clone(), (Some("in"), "nobodys"), Allow).body(child("in", "nobodys", None, "web")),
        row(Write, Apply, cm.clone(), (Some("in"), "mine"), Mark).body(child("in", "mine", None, "web")),
        row(Write, Apply, cm.clone(), (Some("in"), "new"), IfAbsent).body(child("in", "new", None, "web")),
        row(Write, Delete, cm.clone(), (Some("in"), "new"), Allow),
        row(Write, Create, cm.clone(), (Some("in"), "new"), Mark).body(child("in", "new", None, "other")),
        row(Write, Delete, cm.clone(), (Some("out"), "mine"), Deny("namespace out is outside")),
        row(Write, Apply, cm.clone(), (Some("in"), "mine"), Allow).status().body(child("in", "mine", None, "web")),
        // Read only: no writes.
        row(Reads, Apply, cm.clone(), (Some("in"), "mine"), Deny("own the kind ConfigMap")).body(child("in", "mine", None, "web")),
        row(Reads, Delete, cm.clone(), (Some("in"), "mine"), Deny("own the kind ConfigMap")),
        row(Reads, Delete, cm.clone(), (Some("in"), "mine"), Deny("`grants.write: [ConfigMap]` in the plugin's config (p.yaml)")),
        row(Reads, Get, cm.clone(), (Some("in"), "mine"), Allow),
        // Status of the for kind: only objects it reconciles, only `status`.
        row(Owns, Apply, dep.clone(), (Some("in"), "web"), Allow).status()
            .body(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "in"}, "status": {"replicas": 1}})),
        row(Owns, Apply, dep.clone(), (Some("in"), "web"), Allow).status()
            .body(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "in", "labels": {"app": "web"}}, "status": {}})),
        row(Owns, Apply, dep.clone(), (Some("in"), "web"), Deny("changes /metadata/labels/extra")).status()
            .body(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "in", "labels": {"extra": "x"}}, "status": {}})),
        row(Owns, Apply, dep.clone(), (Some("in"), "other"), Deny("not an object this plugin reconciles")).status()
            .body(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "other", "namespace": "in"}, "status": {}})),
        row(Owns, Apply, dep.clone(), (Some("in"), "gone"), Absent).status()
            .body(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gone", "namespace": "in"}, "status": {}})),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Allow).status().patch(merge(json!({"status": {"replicas": 2}}))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("changes /spec")).status().patch(json_patch(json!([{"op": "add", "path": "/spec", "value": {"replicas": 3}}]))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("changes /metadata/finalizers")).status().patch(merge(json!({"metadata": {"finalizers": ["x"]}}))),
        // Judged by what it does, not by its paths: a `move` into status removes its `from`.
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("host's mark")).status()
            .patch(json_patch(json!([{"op": "move", "from": "/metadata/labels", "path": "/status/labels"}]))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Allow).status()
            .patch(json_patch(json!([{"op": "add", "path": "/status", "value": {}},
                                     {"op": "copy", "from": "/metadata/name", "path": "/status/name"}]))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Allow).status().patch(json_patch(json!([
            {"op": "test", "path": "/metadata/labels/app", "value": "web"},
            {"op": "add", "path": "/status", "value": {"replicas": 1}}]))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("changes /metadata/labels/app")).status()
            .patch(json_patch(json!([{"op": "add", "path": "/status", "value": {}},
                                     {"op": "move", "from": "/metadata/labels/app", "path": "/status/app"}]))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("does not apply")).status()
            .patch(json_patch(json!([{"op": "remove", "path": "/metadata/finalizers"}]))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("changes /spec/$patch")).status()
            .patch(strategic(json!({"spec": {"$patch": "delete"}}))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Deny("changes /metadata/labels/app")).status()
            .patch(merge(json!({"metadata": {"labels": {"app": null}}}))),
        row(Owns, Patch, dep.clone(), (Some("in"), "web"), Allow).status()
            .patch(strategic(json!({"metadata": {"labels": {"app": "web"}}, "status": {"$patch": "replace", "replicas": 1}}))),
        row(Owns, Apply, dep.clone(), (Some("in"), "web"), Deny("own the kind Deployment")).body(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "in"}})),
        // A cluster-scoped for kind: no namespace argument, scope judged on the Namespace's name.
        row(ForNamespace, Patch, ns.clone(), (Some("in"), "out"), Deny("cluster-scoped")).status().patch(merge(json!({"status": {}}))),
        row(ForNamespace, Patch, ns.clone(), (None, "out"), Deny("namespace out is outside")).status().patch(merge(json!({"status": {}}))),
        row(ForNamespace, Patch, ns.clone(), (None, "in"), Allow).status().patch(merge(json!({"status": {"phase": "Active"}}))),
        row(ForNamespace, Patch, ns.clone(), (None, "in"), Deny("changes /metadata/labels")).status().patch(merge(json!({"metadata": {"labels": {"a": "b"}}}))),
        row(ForNamespace, Patch, ns.clone(), (None, "in"), Deny("changes /metadata/ownerReferences")).status().patch(merge(json!({"metadata": {"ownerReferences": [owner("web")]}}))),
        // Host objects: protected whatever the grants.
        row(ForNamespace, Apply, lease.clone(), (Some("kubewasm-system"), "kubewasm-shard-01"), Deny("outside"))
            .body(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kubewasm-shard-01", "namespace": "kubewasm-system"}})),
        // Events: about readable kinds, in scope, never in the host's namespace.
        row(Owns, Event, cm.clone(), (Some("in"), "mine"), Allow),
        row(Owns, Event, cm.clone(), (Some("out"), "mine"), Deny("namespace out is outside")),
        row(Owns, Event, secret, (Some("in"), "s"), Deny("register the kind Secret")),
        row(ForNamespace, Event, ns.clone(), (None, "in"), Allow),
        row(ForNamespace, Event, ns, (None, "out"), Deny("namespace out is outside")),
    ]
}

#[test]
fn every_cell_of_the_authorizer_table_gets_its_decision() {
    let world = World::new();
    let authorizers = [
        (Grant::Owns, world.authorizer(owner_of_config_maps(), "{}")),
        (Grant::Write, world.authorizer(owner_of_config_maps(), "write: [ConfigMap]")),
        (Grant::Reads, world.authorizer(reader_of_config_maps(), "{}")),
        (
            Grant::ForNamespace,
            world.authorizer(
                namespace_plugin(),
                "{write: [Lease.coordination.k8s.io], dangerous: [Lease.coordination.k8s.io]}",
            ),
        ),
    ];
    let mut failures = Vec::new();
    for (i, row) in table().into_iter().enumerate() {
        let authorizer = &authorizers
            .iter()
            .find(|(g, _)| std::mem::discriminant(g) == std::mem::discriminant(&row.grant))
            .unwrap()
            .1;
        let target =
            ObjectRef { kind: row.kind.clone(), namespace: row.namespace.map(Into::into), name: row.name.into() };
        let body = match (&row.body, &row.patch) {
            (Some(object), _) => Body::Object(object),
            (None, Some(patch)) => Body::Patch(patch),
            (None, None) => Body::None,
        };
        let request = Request { verb: row.verb, target: &target, status: row.status, body };
        let got = world.decide(authorizer, &request);
        let ok = match (&row.want, &got) {
            (Want::Allow, Decision::Allow { mark: false }) => true,
            (Want::Mark, Decision::Allow { mark: true }) => true,
            (Want::IfAbsent, Decision::AllowIfAbsent) => true,
            (Want::Absent, Decision::Absent) => true,
            (Want::Deny(part), Decision::Deny(why)) => why.contains(part),
            (Want::Deny(part), Decision::Held { holder, why }) => {
                why.contains(part) && why.contains(&format!("`{holder}`"))
            }
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "row {i}: {:?} {:?}{} {:?} {:?}/{}: wanted {:?}, got {got:?}",
                row.grant,
                row.verb,
                if row.status { " status" } else { "" },
                row.kind.kind,
                row.namespace,
                row.name,
                row.want
            ));
        }
    }
    assert!(failures.is_empty(), "{} cells decided wrongly:\n{}", failures.len(), failures.join("\n"));
}

/// Bug 1 of issue 32: a refusal of an owned kind's write pointed at `write: [ConfigMap]`, a
/// grant that opens every ConfigMap in the cluster, as if it were the fix.
#[test]
fn no_refusal_of_an_owned_kind_suggests_a_grant_that_opens_every_object_of_the_kind() {
    let world = World::new();
    let authorizer = world.authorizer(owner_of_config_maps(), "{}");
    let mut refusals = 0;
    for row in table().into_iter().filter(|r| matches!(r.grant, Grant::Owns) && r.kind == cm()) {
        let target =
            ObjectRef { kind: row.kind.clone(), namespace: row.namespace.map(Into::into), name: row.name.into() };
        let body = match (&row.body, &row.patch) {
            (Some(object), _) => Body::Object(object),
            (None, Some(patch)) => Body::Patch(patch),
            (None, None) => Body::None,
        };
        let request = Request { verb: row.verb, target: &target, status: row.status, body };
        if let Decision::Deny(why) | Decision::Held { why, .. } = world.decide(&authorizer, &request) {
            refusals += 1;
            let message = authorizer.message(&request, &why);
            assert!(!message.contains("write: [ConfigMap]") && !message.contains("granted `write"), "{message}");
        }
    }
    assert!(refusals > 5, "the table refuses owned-kind writes ({refusals})");
}

#[test]
fn the_host_namespace_is_protected_from_events_and_writes_of_an_unconfined_plugin() {
    let world = World::new();
    let config: GrantConfig =
        serde_yaml::from_str("{write: [Lease.coordination.k8s.io], dangerous: [Lease.coordination.k8s.io]}").unwrap();
    let grants = Grants::resolve(&namespace_plugin(), &config.with_requests_of(&namespace_plugin())).unwrap();
    let protected = Protected::default();
    protected.namespace("kubewasm-system", "is the host's own namespace");
    protected.leases("elect", "kubewasm");
    let authorizer = Authorizer::new("p", grants, protected, Arc::new(MemoryCache::default()));
    let lease = |ns: &str, name: &str| ObjectRef {
        kind: gvk("coordination.k8s.io", "v1", "Lease"),
        namespace: Some(ns.into()),
        name: name.into(),
    };
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}});
    for (target, protected) in [
        (lease("kubewasm-system", "anything"), true),
        (lease("elect", "kubewasm"), true),
        (lease("elect", "kubewasm-shard-00ff"), true),
        (lease("elect", "mine"), false),
    ] {
        let request = Request { verb: Verb::Apply, target: &target, status: false, body: Body::Object(&body) };
        let decision = world.decide(&authorizer, &request);
        assert_eq!(
            matches!(decision, Decision::Deny(ref why) if why.contains("protected")),
            protected,
            "{target:?}: {decision:?}"
        );
    }
    let regarding = ObjectRef { kind: namespace(), namespace: None, name: "kubewasm-system".into() };
    let event = Request { verb: Verb::Event, target: &regarding, status: false, body: Body::None };
    assert!(matches!(world.decide(&authorizer, &event), Decision::Allow { .. }), "events about it go to default");
    let regarding = ObjectRef { kind: cm(), namespace: Some("kubewasm-system".into()), name: "kubewasm".into() };
    let event = Request { verb: Verb::Event, target: &regarding, status: false, body: Body::None };
    assert!(
        matches!(world.decide(&authorizer, &event), Decision::Deny(ref why) if why.contains("kubewasm-system is protected")),
        "nothing there is the plugin's to see, nor to report on"
    );
}

#[test]
fn a_plugin_touches_secrets_only_in_the_namespaces_named_for_them_and_the_cache_hides_the_rest() {
    let world = World::new();
    let registration = Registration { reads: vec![gvk("", "v1", "Secret")], ..reader_of_config_maps() };
    let config: GrantConfig = serde_yaml::from_str("{read: [Secret], sensitive: {namespaces: [vault]}}").unwrap();
    let grants = Grants::resolve(&registration, &config.with_requests_of(&registration)).unwrap();
    let cache = Arc::new(MemoryCache::default());
    let authorizer = Authorizer::new("p", grants, Protected::default(), cache.clone());
    let secret = |ns: &str| ObjectRef { kind: gvk("", "v1", "Secret"), namespace: Some(ns.into()), name: "s".into() };
    for (ns, allowed) in [("vault", true), ("other", false)] {
        for verb in [Verb::Read, Verb::Get] {
            let target = secret(ns);
            let request = Request { verb, target: &target, status: false, body: Body::None };
            let decision = world.decide(&authorizer, &request);
            assert_eq!(matches!(decision, Decision::Allow { .. }), allowed, "{verb:?} {ns}: {decision:?}");
            if !allowed {
                assert!(matches!(decision, Decision::Deny(ref why) if why.contains("sensitive")), "{decision:?}");
            }
        }
        assert_eq!(authorizer.sees(&gvk("", "v1", "Secret"), Some(ns), "s"), allowed, "{ns}");
    }
    assert!(authorizer.sees(&cm(), Some("other"), "c"), "other kinds are not confined");
    let hidden = cache.hidden().expect("the authorizer installs its read rule in the cache");
    assert!(
        hidden.hides(&gvk("", "v1", "Secret"), Some("other")) && !hidden.hides(&gvk("", "v1", "Secret"), Some("vault"))
    );
}

#[test]
fn a_write_approval_of_services_does_not_let_a_load_balancer_address_into_their_status() {
    let world = World::new();
    // A status write of `kind` by a plugin approved to write it anywhere.
    let decide = |kind: GroupVersionKind, api_version: &str, config: &str| {
        let registration = Registration { writes: vec![kind.clone()], ..reader_of_config_maps() };
        let config: GrantConfig = serde_yaml::from_str(config).unwrap();
        let grants = Grants::resolve(&registration, &config.with_requests_of(&registration)).unwrap();
        let authorizer = Authorizer::new("p", grants, Protected::default(), Arc::new(MemoryCache::default()));
        let target = ObjectRef { kind: kind.clone(), namespace: Some("in".into()), name: "web".into() };
        let body = json!({"apiVersion": api_version, "kind": kind.kind, "metadata": {"name": "web", "namespace": "in"},
                          "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.53"}]}}});
        let request = Request { verb: Verb::Apply, target: &target, status: true, body: Body::Object(&body) };
        world.decide(&authorizer, &request)
    };
    let decision = decide(gvk("", "v1", "Service"), "v1", "write: [Service]");
    assert!(matches!(decision, Decision::Deny(ref why) if why.contains("status")), "{decision:?}");
    let decision = decide(deployment(), "apps/v1", "write: [Deployment.apps]");
    assert!(matches!(decision, Decision::Allow { .. }), "other kinds' status comes with write: {decision:?}");
}

#[test]
fn no_plugin_sets_a_services_external_ips_however_the_write_is_spelled() {
    let world = World::new();
    let service = gvk("", "v1", "Service");
    let registration = Registration { writes: vec![service.clone()], ..reader_of_config_maps() };
    let config: GrantConfig = serde_yaml::from_str("write: [Service]").unwrap();
    let grants = Grants::resolve(&registration, &config.with_requests_of(&registration)).unwrap();
    let authorizer = Authorizer::new("p", grants, Protected::default(), Arc::new(MemoryCache::default()));
    let target = ObjectRef { kind: service, namespace: Some("in".into()), name: "web".into() };
    let ips = json!(["10.0.0.53"]);
    let object =
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"externalIPs": ips}});
    let patches = [
        Patch::Merge(json!({"spec": {"externalIPs": ips}})),
        Patch::Strategic(json!({"spec": {"externalIPs": ips}})),
        Patch::Json(json!([{"op": "add", "path": "/spec/externalIPs", "value": ips}])),
        Patch::Json(json!([{"op": "add", "path": "/spec/externalIPs/-", "value": "10.0.0.53"}])),
        Patch::Json(json!([{"op": "replace", "path": "/spec", "value": {"externalIPs": ips}}])),
        Patch::Json(json!([{"op": "copy", "from": "/metadata/annotations/x", "path": "/spec/externalIPs"}])),
    ];
    let refused = |request: Request<'_>| matches!(world.decide(&authorizer, &request), Decision::Deny(ref why) if why.contains("externalIPs"));
    assert!(refused(Request { verb: Verb::Apply, target: &target, status: false, body: Body::Object(&object) }));
    for patch in &patches {
        assert!(
            refused(Request { verb: Verb::Patch, target: &target, status: false, body: Body::Patch(patch) }),
            "{patch:?}"
        );
    }
    let ports = Patch::Merge(json!({"spec": {"ports": [{"port": 80}]}}));
    let request = Request { verb: Verb::Patch, target: &target, status: false, body: Body::Patch(&ports) };
    assert!(matches!(world.decide(&authorizer, &request), Decision::Allow { .. }), "other Service writes pass");
}

#[test]
fn a_status_patch_is_judged_as_a_status_write_of_its_target() {
    use crate::api::PatchOptions;
    let target =
        ObjectRef { kind: GroupVersionKind::gvk("", "v1", "ConfigMap"), namespace: Some("a".into()), name: "c".into() };
    let options = PatchOptions { status: true, ..Default::default() };
    let call = ApiCall::Patch { target: target.clone(), patch: Patch::Merge(json!({})), options };
    let request = Request::of(&call);
    assert_eq!((request.verb, request.status, request.target), (Verb::Patch, true, &target));
    assert!(call.is_write());
    assert!(!ApiCall::Get(target).is_write());
}
