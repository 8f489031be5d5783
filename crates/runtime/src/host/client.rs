//! `kubewasm:controller/client`: writes (and the uncached get) through the host's API writer,
//! written once for every contract version: each builds one [`ApiCall`] and hands it to
//! [`request`](PluginCtx::request), which judges and sends it.

use serde_json::Value;

use super::function::Outcome;
use crate::api::{ApiCall, ApiReply, CallError, DeleteOptions, ObjectRef, Patch, PatchOptions, TypedObject};
use crate::state::PluginCtx;

impl PluginCtx {
    /// `client.apply`, or (`status`) `client.apply-status`: the stored object.
    pub(crate) async fn client_apply<E: From<CallError>>(
        &mut self,
        object: &[u8],
        force: bool,
        status: bool,
    ) -> Outcome<Vec<u8>, E> {
        let call = TypedObject::from_json(object).map(|object| {
            if status { ApiCall::ApplyStatus { object, force } } else { ApiCall::Apply { object, force } }
        });
        let function = if status { "client.apply-status" } else { "client.apply" };
        self.request(function, call, ApiReply::into_object).await
    }

    /// `client.patch`, or (`options.status`) `client.patch-status`, the body parsed as the kind
    /// of patch it names: the stored object.
    pub(crate) async fn client_patch<E: From<CallError>>(
        &mut self,
        target: ObjectRef,
        body: &[u8],
        kind: fn(Value) -> Patch,
        options: PatchOptions,
    ) -> Outcome<Vec<u8>, E> {
        let function = if options.status { "client.patch-status" } else { "client.patch" };
        let call = crate::api::parse_body(body, "patch body").map(|body| ApiCall::Patch {
            target,
            patch: kind(body),
            options,
        });
        self.request(function, call, ApiReply::into_object).await
    }

    /// `client.create`: the stored object.
    pub(crate) async fn client_create<E: From<CallError>>(&mut self, object: &[u8]) -> Outcome<Vec<u8>, E> {
        let call = TypedObject::from_json(object).map(ApiCall::Create);
        self.request("client.create", call, ApiReply::into_object).await
    }

    /// `client.delete`.
    pub(crate) async fn client_delete<E: From<CallError>>(
        &mut self,
        target: ObjectRef,
        options: DeleteOptions,
    ) -> Outcome<(), E> {
        self.request("client.delete", Ok(ApiCall::Delete { target, options }), |_| Ok(())).await
    }

    /// `client.get` (contract 0.2 on): granted like a cache read; an API call, so rate-limited
    /// like a write and counted under its own function label.
    pub(crate) async fn client_get<E: From<CallError>>(&mut self, target: ObjectRef) -> Outcome<Option<Vec<u8>>, E> {
        self.request("client.get", Ok(ApiCall::Get(target)), ApiReply::into_found).await
    }
}
