//! `KubeWriter`: plugins' writes (server-side apply, patch, create, delete, events) over a
//! `kube::Client`, with API errors mapped to the WIT error variants.

use std::collections::HashMap;

use async_trait::async_trait;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch as KubePatch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiResource, Scope};
use parking_lot::RwLock;
use serde::Serialize;

use crate::event_sink::EventSink;
use crate::plugin::host::{ApiWriter, CallError, EventRecord, ObjectRef, Patch, TypedObject};

/// Maps a kube error to the WIT error a plugin sees: 404 not-found, 409 conflict, 400/422
/// invalid, 403 forbidden, 429/5xx and transport failures unavailable.
pub fn call_error(err: kube::Error) -> CallError {
    match err {
        kube::Error::Api(status) => {
            let msg = if status.message.is_empty() { status.reason.clone() } else { status.message.clone() };
            match status.code {
                404 => CallError::NotFound,
                409 => CallError::Conflict(msg),
                400 | 422 => CallError::Invalid(msg),
                401 | 403 => CallError::Forbidden(msg),
                429 | 500..=599 => CallError::Unavailable(msg),
                code => CallError::Other(format!("HTTP {code}: {msg}")),
            }
        }
        kube::Error::HyperError(e) => CallError::Unavailable(e.to_string()),
        kube::Error::Service(e) => CallError::Unavailable(e.to_string()),
        kube::Error::SerdeError(e) => CallError::Invalid(e.to_string()),
        other => CallError::Other(other.to_string()),
    }
}

/// The plugins' [`ApiWriter`] over a kube client. Resolves each kind once through discovery
/// (and again on a miss, so CRDs installed after start work).
pub struct KubeWriter {
    client: Client,
    resources: RwLock<HashMap<GroupVersionKind, (ApiResource, Scope)>>,
    events: EventSink,
}

impl KubeWriter {
    /// A writer using `client`.
    pub fn new(client: Client) -> Self {
        let events = EventSink::new(client.clone());
        Self { client, resources: RwLock::default(), events }
    }

    async fn resource(&self, kind: &GroupVersionKind) -> Result<(ApiResource, Scope), CallError> {
        if let Some(found) = self.resources.read().get(kind) {
            return Ok(found.clone());
        }
        let (resource, caps) = discovery::pinned_kind(&self.client, kind).await.map_err(|e| match call_error(e) {
            CallError::NotFound => CallError::Invalid(format!("the API server does not serve {kind:?}")),
            other => other,
        })?;
        let found = (resource, caps.scope);
        self.resources.write().insert(kind.clone(), found.clone());
        Ok(found)
    }

    async fn api(&self, target: &ObjectRef) -> Result<Api<DynamicObject>, CallError> {
        let (resource, scope) = self.resource(&target.kind).await?;
        match (scope, target.namespace.as_deref()) {
            (Scope::Cluster, _) => Ok(Api::all_with(self.client.clone(), &resource)),
            (Scope::Namespaced, Some(ns)) => Ok(Api::namespaced_with(self.client.clone(), ns, &resource)),
            (Scope::Namespaced, None) => Err(CallError::Invalid(format!(
                "{} {} is namespaced: set metadata.namespace",
                target.kind.kind, target.name
            ))),
        }
    }

    /// Events dropped because the event queue was full (`kubewasm_events_dropped_total`).
    pub fn events_dropped(&self) -> prometheus::IntCounter {
        self.events.dropped()
    }
}

fn to_json<T: Serialize>(object: T) -> Result<Vec<u8>, CallError> {
    serde_json::to_vec(&object).map_err(|e| CallError::Other(e.to_string()))
}

#[async_trait]
impl ApiWriter for KubeWriter {
    async fn apply(&self, manager: &str, object: &TypedObject, force: bool) -> Result<Vec<u8>, CallError> {
        let api = self.api(&object.target).await?;
        let mut params = PatchParams::apply(manager);
        params.force = force;
        let stored =
            api.patch(&object.target.name, &params, &KubePatch::Apply(&object.body)).await.map_err(call_error)?;
        to_json(stored)
    }

    async fn apply_status(&self, manager: &str, object: &TypedObject) -> Result<Vec<u8>, CallError> {
        let api = self.api(&object.target).await?;
        let params = PatchParams::apply(manager).force();
        let stored = api
            .patch_status(&object.target.name, &params, &KubePatch::Apply(&object.body))
            .await
            .map_err(call_error)?;
        to_json(stored)
    }

    async fn patch(&self, manager: &str, target: &ObjectRef, patch: &Patch) -> Result<Vec<u8>, CallError> {
        let api = self.api(target).await?;
        let params = PatchParams { field_manager: Some(manager.to_owned()), ..Default::default() };
        let stored = match patch {
            Patch::Merge(v) => api.patch(&target.name, &params, &KubePatch::Merge(v)).await,
            Patch::Strategic(v) => api.patch(&target.name, &params, &KubePatch::Strategic(v)).await,
            Patch::Json(v) => {
                let ops: json_patch::Patch = serde_json::from_value(v.clone())
                    .map_err(|e| CallError::Invalid(format!("not a JSON patch: {e}")))?;
                api.patch(&target.name, &params, &KubePatch::<()>::Json(ops)).await
            }
        }
        .map_err(call_error)?;
        to_json(stored)
    }

    async fn create(&self, manager: &str, object: &TypedObject) -> Result<Vec<u8>, CallError> {
        let api = self.api(&object.target).await?;
        let body: DynamicObject = serde_json::from_value(object.body.clone())
            .map_err(|e| CallError::Invalid(format!("not a Kubernetes object: {e}")))?;
        let params = PostParams { field_manager: Some(manager.to_owned()), ..Default::default() };
        to_json(api.create(&params, &body).await.map_err(call_error)?)
    }

    async fn delete(&self, target: &ObjectRef) -> Result<(), CallError> {
        let api = self.api(target).await?;
        api.delete(&target.name, &DeleteParams::background()).await.map(|_| ()).map_err(call_error)
    }

    /// Enqueues the event for the background sender (never waits on the API server).
    async fn publish_event(&self, manager: &str, event: &EventRecord) -> Result<(), CallError> {
        self.events.publish(manager, event);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure(&format!("code {code}"), "Reason").with_code(code)))
    }

    #[test]
    fn api_status_codes_map_to_the_wit_error_variants() {
        assert_eq!(call_error(api_error(404)), CallError::NotFound);
        assert_eq!(call_error(api_error(409)), CallError::Conflict("code 409".into()));
        assert_eq!(call_error(api_error(422)), CallError::Invalid("code 422".into()));
        assert_eq!(call_error(api_error(400)), CallError::Invalid("code 400".into()));
        assert_eq!(call_error(api_error(403)), CallError::Forbidden("code 403".into()));
        assert_eq!(call_error(api_error(429)), CallError::Unavailable("code 429".into()));
        assert_eq!(call_error(api_error(503)), CallError::Unavailable("code 503".into()));
        assert_eq!(call_error(api_error(418)), CallError::Other("HTTP 418: code 418".into()));
    }
}
