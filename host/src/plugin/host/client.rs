//! `kubewasm:controller/client`: writes through the host's API writer, checked against grants.

use kube::core::GroupVersionKind;

use super::{CallError, ObjectRef, Patch, TypedObject};
use crate::plugin::bindings::{client, types};
use crate::plugin::grants::KindRef;
use crate::plugin::state::PluginCtx;

type CallResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginCtx {
    fn check_write(&mut self, kind: &GroupVersionKind, status: bool) -> Result<(), CallError> {
        let grants = &self.shared.grants;
        if (status && grants.can_write_status(kind)) || grants.can_write(kind) {
            return Ok(());
        }
        let what = if status { "the status of " } else { "" };
        let message = format!(
            "plugin `{}` may not write {what}{}: own the kind or register it under writes and have it granted",
            self.shared.name,
            KindRef::of(kind)
        );
        self.denied.push(message.clone());
        Err(CallError::Forbidden(message))
    }

    fn writable_object(&mut self, bytes: &[u8], status: bool) -> Result<TypedObject, CallError> {
        let object = TypedObject::from_json(bytes)?;
        self.check_write(&object.target.kind, status)?;
        Ok(object)
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
        let result = match self.check_write(&target.kind, false).and(parsed) {
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
        let result = match self.check_write(&target.kind, false) {
            Ok(()) => self.shared.writer.delete(&target).await,
            Err(e) => Err(e),
        };
        Ok(self.finish("client.delete", result))
    }
}
