//! `kubewasm:controller/client`: writes through the host's API writer, checked against the
//! protected host objects, the grants and control of owned objects.

use serde_json::Value;

use super::{CallError, ObjectRef, Patch, TypedObject};
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
                        if let Err(e) = control::check(cache, for_kind, current, ns) {
                            return Some(format!("the object it would change {e}; {}", hint()));
                        }
                    }
                    (None, Some(_)) => {}
                }
                let body = body?;
                control::check(cache, for_kind, body, ns).err().map(|e| format!("the object written {e}; {}", hint()))
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

impl client::Host for PluginCtx {
    async fn apply(&mut self, object: Vec<u8>, force: bool) -> CallResult<Vec<u8>> {
        self.charge()?;
        if let Err(e) = self.throttle_write().await {
            return Ok(self.finish("client.apply", Err(e)));
        }
        let result = match self.writable_object(&object, false) {
            Ok(o) => self.shared.writer.apply(&self.shared.manager, &o, force).await,
            Err(e) => Err(e),
        };
        Ok(self.finish("client.apply", result))
    }

    async fn apply_status(&mut self, object: Vec<u8>) -> CallResult<Vec<u8>> {
        self.charge()?;
        if let Err(e) = self.throttle_write().await {
            return Ok(self.finish("client.apply-status", Err(e)));
        }
        let result = match self.writable_object(&object, true) {
            Ok(o) => self.shared.writer.apply_status(&self.shared.manager, &o).await,
            Err(e) => Err(e),
        };
        Ok(self.finish("client.apply-status", result))
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
        if let Err(e) = self.throttle_write().await {
            return Ok(self.finish("client.patch", Err(e)));
        }
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let parsed = serde_json::from_slice(&body)
            .map_err(|e| CallError::Invalid(format!("patch body is not valid JSON: {e}")))
            .map(|v| match patch_kind {
                client::PatchType::Merge => Patch::Merge(v),
                client::PatchType::Json => Patch::Json(v),
                client::PatchType::Strategic => Patch::Strategic(v),
            });
        let result = match self.check_write(&target, None, false).and(parsed) {
            Ok(patch) => self.shared.writer.patch(&self.shared.manager, &target, &patch).await,
            Err(e) => Err(e),
        };
        Ok(self.finish("client.patch", result))
    }

    async fn create(&mut self, object: Vec<u8>) -> CallResult<Vec<u8>> {
        self.charge()?;
        if let Err(e) = self.throttle_write().await {
            return Ok(self.finish("client.create", Err(e)));
        }
        let result = match self.writable_object(&object, false) {
            Ok(o) => self.shared.writer.create(&self.shared.manager, &o).await,
            Err(e) => Err(e),
        };
        Ok(self.finish("client.create", result))
    }

    async fn delete(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> CallResult<()> {
        self.charge()?;
        if let Err(e) = self.throttle_write().await {
            return Ok(self.finish("client.delete", Err(e)));
        }
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let result = match self.check_write(&target, None, false) {
            Ok(()) => self.shared.writer.delete(&target).await,
            Err(e) => Err(e),
        };
        Ok(self.finish("client.delete", result))
    }
}
