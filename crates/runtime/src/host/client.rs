//! `kubewasm:controller/client`: writes (and the uncached get) through the host's API writer,
//! each decided by the plugin's authorizer first.

use serde_json::Value;

use super::authorize::Permit;
use super::{
    ApiCall, ApiReply, CallError, DeleteOptions, ObjectRef, Patch, PatchOptions, Preconditions, Propagation,
    TypedObject,
};
use crate::bindings::v0_2::{client as c2, types as t2};
use crate::bindings::{client, types};
use crate::refusals::Cause;
use crate::state::PluginCtx;

type CallResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl PluginCtx {
    /// Authorizes `call`, marks an object the plugin makes (the authorizer says which), and
    /// sends it through the host's write path; a write the API server rejects as invalid is
    /// remembered for the `WriteRejected` Event.
    async fn send_authorized(&mut self, mut call: ApiCall) -> Result<ApiReply, CallError> {
        let permit = self.authorize(&call.access()).await?;
        let only_if_absent = permit.only_if_absent;
        let mut result = self.send_permitted(&mut call, permit).await;
        if only_if_absent && matches!(result, Err(CallError::Conflict(_))) {
            // The object exists after all (the cache had not seen it yet): judged again on the
            // API server's copy, and sent as that decision says.
            let permit = self.authorize_on_server(&call.access()).await?;
            result = self.send_permitted(&mut call, permit).await;
        }
        // Kept for the `WriteRejected` Event: a plugin may swallow the error, and an operator
        // otherwise finds the rejection only in the host's log.
        if let (Err(CallError::Invalid(message)), true) = (&result, call.is_write()) {
            self.rejected.push(format!("{}: {message}", call.summary()));
        }
        // The host allowed it and the API server did not (the plugin's identity lacks a right,
        // or an admission policy refused it): an `AccessDenied` Event too, or the operator would
        // see a plugin that fails every reconcile and a status that says all is well.
        if let Err(CallError::Forbidden(message)) = &result {
            let summary = call.summary();
            let refusal = format!("{summary}: the API server refused it: {message}");
            // The verb and kind: the summary without its object.
            let request = summary.rsplit_once(' ').map_or(summary.as_str(), |(request, _)| request);
            self.shared.refusals.record(&self.shared.caller.plugin, Cause::Forbidden, request, &refusal);
            self.denied.push(refusal);
        }
        result
    }

    async fn send_permitted(&mut self, call: &mut ApiCall, permit: Permit) -> Result<ApiReply, CallError> {
        match call {
            ApiCall::Apply { object, .. } | ApiCall::ApplyStatus { object, .. } | ApiCall::Create(object) => {
                object.mark = permit.mark.then(|| self.shared.authorizer.plugin().to_owned());
                object.only_if_absent = permit.only_if_absent;
            }
            // What is judged is what is written: the object the authorizer looked at, not one
            // that took its name since.
            ApiCall::Patch { options, .. } => options.judged_uid = permit.judged_uid,
            ApiCall::Delete { options, .. } => options.judged_uid = permit.judged_uid,
            _ => {}
        }
        self.shared.writer.send(&self.shared.caller, call).await
    }

    async fn apply_authorized(&mut self, object: &[u8], force: bool, status: bool) -> Result<Vec<u8>, CallError> {
        let object = TypedObject::from_json(object)?;
        let call = if status { ApiCall::ApplyStatus { object, force } } else { ApiCall::Apply { object, force } };
        self.send_authorized(call).await?.into_object()
    }

    async fn create_authorized(&mut self, object: &[u8]) -> Result<Vec<u8>, CallError> {
        let object = TypedObject::from_json(object)?;
        self.send_authorized(ApiCall::Create(object)).await?.into_object()
    }

    async fn patch_authorized(
        &mut self,
        target: ObjectRef,
        patch: Patch,
        options: PatchOptions,
    ) -> Result<Vec<u8>, CallError> {
        self.send_authorized(ApiCall::Patch { target, patch, options }).await?.into_object()
    }

    async fn delete_authorized(&mut self, target: ObjectRef, options: DeleteOptions) -> Result<(), CallError> {
        self.send_authorized(ApiCall::Delete { target, options }).await.map(drop)
    }

    async fn get_authorized(&mut self, target: ObjectRef) -> Result<Option<Vec<u8>>, CallError> {
        self.send_authorized(ApiCall::Get(target)).await?.into_found()
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
        let result = self.apply_authorized(object, force, status).await;
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
        let options = PatchOptions { status, preconditions: preconditions(pre), judged_uid: None };
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
        let result = match patch {
            Ok(patch) => self.patch_authorized(target, patch, options).await,
            Err(e) => Err(e),
        };
        self.finish(function, result)
    }

    async fn create_as(&mut self, function: &'static str, object: &[u8]) -> Result<Vec<u8>, types::Error> {
        if let Err(e) = self.throttle_write().await {
            return self.finish(function, Err(e));
        }
        let result = self.create_authorized(object).await;
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
        let result = self.delete_authorized(target, options).await;
        self.finish(function, result)
    }
}

/// Parses a plugin's patch body as the kind of patch it names.
fn patch_body(body: &[u8], kind: fn(Value) -> Patch) -> Result<Patch, CallError> {
    super::parse_body(body, "patch body").map(kind)
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
        let options =
            DeleteOptions { preconditions: preconditions(options.preconditions), propagation, judged_uid: None };
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
        let result = self.get_authorized(target).await;
        Ok(v2(self.finish("client.get", result)))
    }
}
