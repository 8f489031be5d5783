//! `kubewasm:controller/client`: writes (and the uncached get) through the host's API writer;
//! each function builds one [`ApiCall`] from its arguments and hands it to
//! [`request`](PluginCtx::request), which judges and sends it.

use serde_json::Value;

use super::function::Outcome;
use crate::api::{
    ApiCall, ApiReply, CallError, DeleteOptions, ObjectRef, Patch, PatchOptions, Preconditions, Propagation,
    TypedObject,
};
use crate::bindings::v0_2::{client as c2, types as t2};
use crate::bindings::{client, types};
use crate::state::PluginCtx;

/// An apply of the object or (`status`) of its status subresource.
fn apply(object: &[u8], force: bool, status: bool) -> Result<ApiCall, CallError> {
    let object = TypedObject::from_json(object)?;
    Ok(if status { ApiCall::ApplyStatus { object, force } } else { ApiCall::Apply { object, force } })
}

/// A patch of `target`, its body parsed as the kind of patch it names.
fn patch(
    target: ObjectRef,
    body: &[u8],
    kind: fn(Value) -> Patch,
    options: PatchOptions,
) -> Result<ApiCall, CallError> {
    let patch = crate::api::parse_body(body, "patch body").map(kind)?;
    Ok(ApiCall::Patch { target, patch, options })
}

fn create(object: &[u8]) -> Result<ApiCall, CallError> {
    TypedObject::from_json(object).map(ApiCall::Create)
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

fn patch_options_0_2(status: bool, p: c2::Preconditions) -> PatchOptions {
    let preconditions = Preconditions { resource_version: p.resource_version, uid: p.uid };
    PatchOptions { status, preconditions, judged_uid: None }
}

/// Contract 0.1: apply-status always forces, patch has no preconditions, delete is background.
impl client::Host for PluginCtx {
    async fn apply(&mut self, object: Vec<u8>, force: bool) -> Outcome<Vec<u8>, types::Error> {
        self.request("client.apply", apply(&object, force, false), ApiReply::into_object).await
    }

    async fn apply_status(&mut self, object: Vec<u8>) -> Outcome<Vec<u8>, types::Error> {
        self.request("client.apply-status", apply(&object, true, true), ApiReply::into_object).await
    }

    async fn patch(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: client::PatchType,
        body: Vec<u8>,
    ) -> Outcome<Vec<u8>, types::Error> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let call = patch(target, &body, patch_kind_0_1(patch_kind), PatchOptions::default());
        self.request("client.patch", call, ApiReply::into_object).await
    }

    async fn create(&mut self, object: Vec<u8>) -> Outcome<Vec<u8>, types::Error> {
        self.request("client.create", create(&object), ApiReply::into_object).await
    }

    async fn delete(&mut self, kind: types::Gvk, namespace: Option<String>, name: String) -> Outcome<(), types::Error> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let call = ApiCall::Delete { target, options: DeleteOptions::default() };
        self.request("client.delete", Ok(call), drop_reply).await
    }
}

/// Contract 0.2: the same writes with force, preconditions and propagation passed through,
/// plus status patches and the uncached `get`.
impl c2::Host for PluginCtx {
    async fn apply(&mut self, object: Vec<u8>, force: bool) -> Outcome<Vec<u8>, t2::Error> {
        self.request("client.apply", apply(&object, force, false), ApiReply::into_object).await
    }

    async fn apply_status(&mut self, object: Vec<u8>, force: bool) -> Outcome<Vec<u8>, t2::Error> {
        self.request("client.apply-status", apply(&object, force, true), ApiReply::into_object).await
    }

    async fn patch(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: c2::PatchType,
        body: Vec<u8>,
        pre: c2::Preconditions,
    ) -> Outcome<Vec<u8>, t2::Error> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let call = patch(target, &body, patch_kind_0_2(patch_kind), patch_options_0_2(false, pre));
        self.request("client.patch", call, ApiReply::into_object).await
    }

    async fn patch_status(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
        patch_kind: c2::PatchType,
        body: Vec<u8>,
        pre: c2::Preconditions,
    ) -> Outcome<Vec<u8>, t2::Error> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let call = patch(target, &body, patch_kind_0_2(patch_kind), patch_options_0_2(true, pre));
        self.request("client.patch-status", call, ApiReply::into_object).await
    }

    async fn create(&mut self, object: Vec<u8>) -> Outcome<Vec<u8>, t2::Error> {
        self.request("client.create", create(&object), ApiReply::into_object).await
    }

    async fn delete(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
        options: c2::DeleteOptions,
    ) -> Outcome<(), t2::Error> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        let propagation = match options.propagation_policy {
            None | Some(c2::PropagationPolicy::Background) => Propagation::Background,
            Some(c2::PropagationPolicy::Foreground) => Propagation::Foreground,
            Some(c2::PropagationPolicy::Orphan) => Propagation::Orphan,
        };
        let pre = options.preconditions;
        let preconditions = Preconditions { resource_version: pre.resource_version, uid: pre.uid };
        let options = DeleteOptions { preconditions, propagation, judged_uid: None };
        self.request("client.delete", Ok(ApiCall::Delete { target, options }), drop_reply).await
    }

    /// Granted like a cache read; an API call, so rate-limited like a write and counted under
    /// its own function label.
    async fn get(
        &mut self,
        kind: t2::Gvk,
        namespace: Option<String>,
        name: String,
    ) -> Outcome<Option<Vec<u8>>, t2::Error> {
        let target = ObjectRef { kind: kind.into(), namespace, name };
        self.request("client.get", Ok(ApiCall::Get(target)), ApiReply::into_found).await
    }
}

/// The answer of a call that returns nothing (a delete).
fn drop_reply(_: ApiReply) -> Result<(), CallError> {
    Ok(())
}
