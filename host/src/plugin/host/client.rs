//! `kubewasm:controller/client`: writes through the host's API writer, checked against the
//! protected host objects, the grants and control of owned objects.

use serde_json::Value;

use super::{CallError, DeleteOptions, ObjectRef, Patch, PatchOptions, Preconditions, Propagation, TypedObject};
use crate::plugin::bindings::v0_2::{client as c2, types as t2};
use crate::plugin::bindings::{client, types};
use crate::plugin::control;
use crate::plugin::grants::{KindRef, WriteScope};
use crate::plugin::state::PluginCtx;

type CallResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginCtx {
    /// `Forbidden` unless the plugin may write `target` (`body`: what apply/create would write;
    /// `status`: the status subresource). One place for every write rule: protected host
    /// objects first, then the grants, then control of owned objects.
    fn check_write(&mut self, target: &ObjectRef, body: Option<&Value>, status: bool) -> Result<(), CallError> {
        let Some(why) = self.write_refusal(target, body, status) else { return Ok(()) };
        let what = if status { "the status of " } else { "" };
        let message = format!(
            "plugin `{}` may not write {what}{} {}: {why}",
            self.shared.name,
            KindRef::of(&target.kind),
            key(target)
        );
        self.denied.push(message.clone());
        Err(CallError::Forbidden(message))
    }

    fn write_refusal(&self, target: &ObjectRef, body: Option<&Value>, status: bool) -> Option<String> {
        if let Some(why) = self.shared.protected.refuses(target) {
            return Some(why);
        }
        let is_namespace = target.kind.group.is_empty() && target.kind.kind == "Namespace";
        let namespace = target.namespace.as_deref().or(is_namespace.then_some(target.name.as_str()));
        if let Some(ns) = namespace.filter(|ns| !self.shared.cache.in_scope(ns)) {
            return Some(format!(
                "namespace {ns} is outside the namespaces the plugin is confined to (grants.namespaces)"
            ));
        }
        let grants = &self.shared.grants;
        if status && grants.can_write_status(&target.kind) {
            return None;
        }
        let kind = KindRef::of(&target.kind);
        match (grants.write_scope(&target.kind), grants.for_kind()) {
            (Some(WriteScope::Anywhere), _) => None,
            (Some(WriteScope::Controlled), Some(for_kind)) => {
                let cache = self.shared.cache.as_ref();
                let ns = target.namespace.as_deref();
                let hint = || {
                    format!(
                        "a plugin writes objects of its owned kind {kind} only with a controller ownerReference to one of its {} objects, unless granted `write: [{kind}]`",
                        KindRef::of(for_kind)
                    )
                };
                let current = cache.get(&target.kind, ns, &target.name).ok().flatten();
                let current = current.and_then(|b| serde_json::from_slice::<Value>(&b).ok());
                match (&current, body) {
                    (None, None) => {
                        return Some(format!(
                            "it is not in the host's cache, so the host cannot tell that the plugin controls it; {}",
                            hint()
                        ));
                    }
                    (Some(current), _) => {
                        if let Err(e) = control::check(cache, for_kind, grants.for_filter(), current, ns) {
                            return Some(format!("the object it would change {e}; {}", hint()));
                        }
                    }
                    (None, Some(_)) => {}
                }
                let body = body?;
                control::check(cache, for_kind, grants.for_filter(), body, ns)
                    .err()
                    .map(|e| format!("the object written {e}; {}", hint()))
            }
            _ => Some("own the kind or register it under writes and have it granted".into()),
        }
    }

    fn writable_object(&mut self, bytes: &[u8], status: bool) -> Result<TypedObject, CallError> {
        let object = TypedObject::from_json(bytes)?;
        let body = (!status).then_some(&object.body);
        self.check_write(&object.target, body, status)?;
        Ok(object)
    }
}

fn key(target: &ObjectRef) -> String {
    match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    }
}

/// One write rule for every contract version: each WIT function of either world is one of these
/// with its arguments converted.
impl PluginCtx {
    async fn apply_as(
        &mut self,
        function: &'static str,
        object: &[u8],
        force: bool,
        status: bool,
    ) -> Result<Vec<u8>, types::Error> {
        if let Err(e) = self.throttle_write().await {
            return self.finish(function, Err(e));
        }
        let result = match self.writable_object(object, status) {
            Ok(o) if status => self.shared.writer.apply_status(&self.shared.manager, &o, force).await,
            Ok(o) => self.shared.writer.apply(&self.shared.manager, &o, force).await,
            Err(e) => Err(e),
        };
        self.finish(function, result)
    }

    /// A contract-0.2 patch of the object or (`status`) its status subresource.
    async fn patch_0_2(
        &mut self,
        function: &'static str,
        status: bool,
        target: ObjectRef,
        body: &[u8],
        patch_kind: c2::PatchType,
        pre: c2::Preconditions,
    ) -> Result<Vec<u8>, types::Error> {
        let patch = patch_body(body, patch_kind_0_2(patch_kind));
        let options = PatchOptions { status, preconditions: preconditions(pre) };
        self.patch_as(function, target, patch, options).await
    }

    async fn patch_as(
        &mut self,
        function: &'static str,
        target: ObjectRef,
        patch: Result<Patch, CallError>,
        options: PatchOptions,
    ) -> Result<Vec<u8>, types::Error> {
        if let Err(e) = self.throttle_write().await {
            return self.finish(function, Err(e));
        }
        let result = match self.check_write(&target, None, options.status).and(patch) {
            Ok(patch) => self.shared.writer.patch(&self.shared.manager, &target, &patch, &options).await,
            Err(e) => Err(e),
        };
        self.finish(function, result)
    }

    async fn create_as(&mut self, function: &'static str, object: &[u8]) -> Result<Vec<u8>, types::Error> {
        if let Err(e) = self.throttle_write().await {
            return self.finish(function, Err(e));
        }
        let result = match self.writable_object(object, false) {
            Ok(o) => self.shared.writer.create(&self.shared.manager, &o).await,
            Err(e) => Err(e),
        };
        self.finish(function, result)
    }

    async fn delete_as(
        &mut self,
        function: &'static str,
        target: ObjectRef,
        options: DeleteOptions,
    ) -> Result<(), types::Error> {
        if let Err(e) = self.throttle_write().await {
            return self.finish(function, Err(e));
        }
        let result = match self.check_write(&target, None, false) {
            Ok(()) => self.shared.writer.delete(&target, &options).await,
            Err(e) => Err(e),
        };
        self.finish(function, result)
    }
}

/// Parses a plugin's patch body as the kind of patch it names.
fn patch_body(body: &[u8], kind: fn(Value) -> Patch) -> Result<Patch, CallError> {
    serde_json::from_slice(body).map_err(|e| CallError::Invalid(format!("patch body is not valid JSON: {e}"))).map(kind)
}

fn patch_kind_0_1(kind: client::PatchType) -> fn(Value) -> Patch {
    match kind {
        client::PatchType::Merge => Patch::Merge,
        client::PatchType::Json => Patch::Json,
        client::PatchType::Strategic => Patch::Strategic,
    }
}

fn patch_kind_0_2(kind: c2::PatchType) -> fn(Value) -> Patch {
    match kind {
        c2::PatchType::Merge => Patch::Merge,
        c2::PatchType::Json => Patch::Json,
        c2::PatchType::Strategic => Patch::Strategic,
    }
}

fn preconditions(p: c2::Preconditions) -> Preconditions {
    Preconditions { resource_version: p.resource_version, uid: p.uid }
}

/// Contract 0.1: apply-status always forces, patch has no preconditions, delete is background.
impl client::Host for PluginCtx {
    async fn apply(&mut self, object: Vec<u8>, force: bool) -> CallResult<Vec<u8>> {
        self.charge()?;
        Ok(self.apply_as("client.apply", &object, force, false).await)
    }

    async fn apply_status(&mut self, object: Vec<u8>) -> CallResult<Vec<u8>> {
        self.charge()?;
        Ok(self.apply_as("client.apply-status", &object, true, true).await)
    }

    async fn patch(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: client::PatchType,
        body: Vec<u8>,
    ) -> CallResult<Vec<u8>> {
        self.charge()?;
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let patch = patch_body(&body, patch_kind_0_1(patch_kind));
        Ok(self.patch_as("client.patch", target, patch, PatchOptions::default()).await)
    }

    async fn create(&mut self, object: Vec<u8>) -> CallResult<Vec<u8>> {
        self.charge()?;
        Ok(self.create_as("client.create", &object).await)
    }

    async fn delete(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> CallResult<()> {
        self.charge()?;
        let target = ObjectRef { kind: kind.into(), namespace, name };
        Ok(self.delete_as("client.delete", target, DeleteOptions::default()).await)
    }
}

type CallResult2<T> = wasmtime::Result<Result<T, t2::Error>>;

/// 0.1's errors as 0.2's: the variant is the same, only the generated types differ.
fn v2<T>(r: Result<T, types::Error>) -> Result<T, t2::Error> {
    r.map_err(|e| match e {
        types::Error::NotFound => t2::Error::NotFound,
        types::Error::Forbidden(m) => t2::Error::Forbidden(m),
        types::Error::Conflict(m) => t2::Error::Conflict(m),
        types::Error::Invalid(m) => t2::Error::Invalid(m),
        types::Error::Unavailable(m) => t2::Error::Unavailable(m),
        types::Error::Other(m) => t2::Error::Other(m),
    })
}

/// Contract 0.2: the same writes with force, preconditions and propagation passed through,
/// plus status patches and the uncached `get`.
impl c2::Host for PluginCtx {
    async fn apply(&mut self, object: Vec<u8>, force: bool) -> CallResult2<Vec<u8>> {
        self.charge()?;
        Ok(v2(self.apply_as("client.apply", &object, force, false).await))
    }

    async fn apply_status(&mut self, object: Vec<u8>, force: bool) -> CallResult2<Vec<u8>> {
        self.charge()?;
        Ok(v2(self.apply_as("client.apply-status", &object, force, true).await))
    }

    async fn patch(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: c2::PatchType,
        body: Vec<u8>,
        pre: c2::Preconditions,
    ) -> CallResult2<Vec<u8>> {
        self.charge()?;
        let target = ObjectRef { kind: kind.into(), namespace, name };
        Ok(v2(self.patch_0_2("client.patch", false, target, &body, patch_kind, pre).await))
    }

    async fn patch_status(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: c2::PatchType,
        body: Vec<u8>,
        pre: c2::Preconditions,
    ) -> CallResult2<Vec<u8>> {
        self.charge()?;
        let target = ObjectRef { kind: kind.into(), namespace, name };
        Ok(v2(self.patch_0_2("client.patch-status", true, target, &body, patch_kind, pre).await))
    }

    async fn create(&mut self, object: Vec<u8>) -> CallResult2<Vec<u8>> {
        self.charge()?;
        Ok(v2(self.create_as("client.create", &object).await))
    }

    async fn delete(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
        options: c2::DeleteOptions,
    ) -> CallResult2<()> {
        self.charge()?;
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let propagation = match options.propagation_policy {
            None | Some(c2::PropagationPolicy::Background) => Propagation::Background,
            Some(c2::PropagationPolicy::Foreground) => Propagation::Foreground,
            Some(c2::PropagationPolicy::Orphan) => Propagation::Orphan,
        };
        let options = DeleteOptions { preconditions: preconditions(options.preconditions), propagation };
        Ok(v2(self.delete_as("client.delete", target, options).await))
    }

    /// Granted like a cache read; an API call, so rate-limited like a write and counted under
    /// its own function label.
    async fn get(&mut self, kind: t2::Gvk, namespace: Option<String>, name: String) -> CallResult2<Option<Vec<u8>>> {
        self.charge()?;
        if let Err(e) = self.throttle_write().await {
            return Ok(v2(self.finish("client.get", Err(e))));
        }
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let allowed = self.check_read(&target.kind).and_then(|()| match target.namespace.as_deref() {
            Some(ns) if !self.shared.cache.in_scope(ns) => Err(CallError::Forbidden(format!(
                "namespace {ns} is outside the namespaces the plugin is confined to (grants.namespaces)"
            ))),
            _ => Ok(()),
        });
        let result = match allowed {
            Ok(()) => self.shared.writer.get(&target).await,
            Err(e) => Err(e),
        };
        Ok(v2(self.finish("client.get", result)))
    }
}
