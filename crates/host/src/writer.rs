//! `KubeWriter`: plugins' calls (server-side apply, patch, create, delete, get, Events) over a
//! `kube::Client`, with API errors mapped to the WIT error variants; the plugin runtime's
//! [`RecordingWriter`](crate::plugin::api::RecordingWriter) is its recording mode.

use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch as KubePatch, PatchParams, PostParams, Preconditions as KubePreconditions,
};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use serde::Serialize;

pub mod elide;
pub mod fair;
#[cfg(test)]
mod sent_path;
pub mod unchanged;

use self::fair::{Answer, Scheduler};
use crate::event_sink::EventSink;
use crate::identity::Identities;
use crate::informer::Discovery;
use serde_json::Value;

use crate::plugin::api::{
    ApiCall, ApiReply, ApiWriter, CallError, Caller, DeleteOptions, NO_OBJECT_HAS_THIS_VERSION, ObjectRef, Patch,
    PatchOptions, Preconditions, Propagation, TypedObject, address,
};

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

/// The plugins' [`ApiWriter`] over a kube client, each request sent as its caller's identity.
/// Resolves each kind once through discovery (and again on a miss, so CRDs installed after
/// start work).
pub struct KubeWriter {
    identities: Identities,
    discovery: Discovery,
    events: EventSink,
    scheduler: Scheduler,
    dry_run: bool,
}

impl KubeWriter {
    /// A writer sending every request as `client`'s identity.
    pub fn new(client: Client) -> Self {
        Self::with_identities(Identities::host(client))
    }

    /// A writer sending each plugin's requests as `identities` says, with a discovery cache of
    /// its own until [`KubeWriter::discovery`] shares the host's.
    pub fn with_identities(identities: Identities) -> Self {
        let events = EventSink::new(identities.clone());
        let discovery = Discovery::new(identities.host_client().clone());
        Self { identities, discovery, events, scheduler: Scheduler::default(), dry_run: false }
    }

    /// Resolves kinds through `discovery`, the process's one discovery cache.
    #[must_use]
    pub fn discovery(self, discovery: Discovery) -> Self {
        Self { discovery, ..self }
    }

    /// Sends every request but Events through `scheduler`'s seats (default: a scheduler of its
    /// own at the defaults).
    #[must_use]
    pub fn scheduler(self, scheduler: Scheduler) -> Self {
        Self { scheduler, ..self }
    }

    async fn resource(&self, kind: &GroupVersionKind) -> Result<(ApiResource, Scope), CallError> {
        let found = self.discovery.resolve(kind).await.map_err(|e| match call_error(e) {
            CallError::NotFound => CallError::Invalid(format!("the API server does not serve {kind:?}")),
            other => other,
        })?;
        Ok((found.resource, found.scope))
    }

    /// The API of `target`'s kind, sending as `caller`.
    async fn api(&self, caller: &Caller, target: &ObjectRef) -> Result<Api<DynamicObject>, CallError> {
        let (resource, scope) = self.resource(&target.kind).await?;
        let client = self.identities.client(&caller.plugin);
        match (scope, target.namespace.as_deref()) {
            (Scope::Cluster, _) => Ok(Api::all_with(client, &resource)),
            (Scope::Namespaced, Some(ns)) => Ok(Api::namespaced_with(client, ns, &resource)),
            (Scope::Namespaced, None) => Err(CallError::Invalid(format!(
                "{} {} is namespaced: set metadata.namespace",
                target.kind.kind, target.name
            ))),
        }
    }

    /// Sends every write as a server-side dry run (`dryRun=All`): the API server validates and
    /// admits it, and answers as it would have stored it, but stores nothing; Events are not
    /// sent (`kubewasm test --server-dry-run`).
    #[must_use]
    pub fn dry_run(self, dry_run: bool) -> Self {
        Self { dry_run, ..self }
    }

    /// Events dropped because their plugin's event queue was full, by plugin
    /// (`kubewasm_events_dropped_total`).
    pub fn events_dropped(&self) -> prometheus::IntCounterVec {
        self.events.dropped()
    }
}

impl KubeWriter {
    /// `patch` with `pre` made part of it, so the API server checks them atomically with the
    /// write (a PATCH request has no preconditions parameter, unlike DELETE): the
    /// resourceVersion goes into the patched object, which the API server compares with the
    /// stored one (409 on a mismatch, controller-runtime's `MergeFromWithOptimisticLock`). A
    /// uid alone is checked on a fresh read whose resourceVersion then guards the patch; with a
    /// resourceVersion the uid needs no check of its own, since a resourceVersion names one
    /// write of one object.
    async fn with_preconditions(
        &self,
        heard: &Heard,
        api: &Api<DynamicObject>,
        target: &ObjectRef,
        patch: &Patch,
        pre: &Preconditions,
    ) -> Result<Patch, CallError> {
        let rv = match (&pre.resource_version, &pre.uid) {
            (Some(rv), _) => rv.clone(),
            (None, None) => return Ok(patch.clone()),
            (None, Some(uid)) => {
                let current =
                    api.get_opt(&target.name).await.map_err(|e| heard.error(e))?.ok_or(CallError::NotFound)?;
                let found = current.metadata.uid.unwrap_or_default();
                if &found != uid {
                    return Err(CallError::Conflict(format!(
                        "precondition failed: uid in precondition: {uid}, uid in object meta: {found}"
                    )));
                }
                current.metadata.resource_version.unwrap_or_default()
            }
        };
        set_in_metadata(patch, "resourceVersion", &rv)
    }
}

/// `patch` setting the object's `metadata.<field>` to `value` as part of the write, so the API
/// server checks it atomically with the patch: a resourceVersion is compared with the stored one
/// (409 on a mismatch), a uid cannot change (`metadata.uid: field is immutable`). `Invalid` for a
/// patch with no metadata object to set it in.
fn set_in_metadata(patch: &Patch, field: &str, value: &str) -> Result<Patch, CallError> {
    let value = Value::String(value.to_owned());
    let merged = |v: &Value| -> Result<Value, CallError> {
        let mut v = v.clone();
        let object = v
            .as_object_mut()
            .ok_or_else(|| CallError::Invalid("a patch with preconditions must be a JSON object".into()))?;
        let meta = object.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
        let meta = meta.as_object_mut().ok_or_else(|| CallError::Invalid("patch metadata is not an object".into()))?;
        meta.insert(field.into(), value.clone());
        Ok(v)
    };
    Ok(match patch {
        Patch::Merge(v) => Patch::Merge(merged(v)?),
        Patch::Strategic(v) => Patch::Strategic(merged(v)?),
        Patch::Json(v) => {
            let mut ops = v.as_array().cloned().ok_or_else(|| CallError::Invalid("a JSON patch is a list".into()))?;
            ops.push(serde_json::json!({"op": "replace", "path": format!("/metadata/{field}"), "value": value}));
            Patch::Json(Value::Array(ops))
        }
    })
}

fn to_json<T: Serialize>(object: T) -> Result<Vec<u8>, CallError> {
    serde_json::to_vec(&object).map_err(|e| CallError::Other(e.to_string()))
}

/// One method per call, each mapping it onto kube's typed API.
impl KubeWriter {
    /// A server-side apply of the object, or of its status (`status`: the status subresource,
    /// with the body as the plugin sent it; the host's mark goes on the object only).
    async fn apply_object(
        &self,
        heard: &Heard,
        caller: &Caller,
        object: &TypedObject,
        force: bool,
        status: bool,
    ) -> Result<Vec<u8>, CallError> {
        let api = self.api(caller, &object.target).await?;
        let mut params = PatchParams::apply(&caller.manager);
        params.force = force;
        params.dry_run = self.dry_run;
        let name = &object.target.name;
        let stored = if status {
            api.patch_status(name, &params, &KubePatch::Apply(&object.body)).await
        } else {
            let mut body = object.sent_body();
            if object.only_if_absent {
                body.to_mut()["metadata"]["resourceVersion"] = NO_OBJECT_HAS_THIS_VERSION.into();
            }
            api.patch(name, &params, &KubePatch::Apply(&*body)).await
        };
        to_json(stored.map_err(|e| heard.error(e))?)
    }

    async fn patch_object(
        &self,
        heard: &Heard,
        caller: &Caller,
        target: &ObjectRef,
        patch: &Patch,
        options: &PatchOptions,
    ) -> Result<Vec<u8>, CallError> {
        let api = self.api(caller, target).await?;
        // The plugin's own preconditions name the object already; else the judged copy's uid. A
        // patch with nowhere to put it is sent as it is: the API server refuses it anyway.
        let judged = options.judged_uid.as_deref().filter(|_| options.preconditions.is_empty());
        let patch = match judged {
            Some(uid) => set_in_metadata(patch, "uid", uid).unwrap_or_else(|_| patch.clone()),
            None => self.with_preconditions(heard, &api, target, patch, &options.preconditions).await?,
        };
        let params =
            PatchParams { field_manager: Some(caller.manager.clone()), dry_run: self.dry_run, ..Default::default() };
        let name = &target.name;
        let stored = match (&patch, options.status) {
            (Patch::Merge(v), false) => api.patch(name, &params, &KubePatch::Merge(v)).await,
            (Patch::Merge(v), true) => api.patch_status(name, &params, &KubePatch::Merge(v)).await,
            (Patch::Strategic(v), false) => api.patch(name, &params, &KubePatch::Strategic(v)).await,
            (Patch::Strategic(v), true) => api.patch_status(name, &params, &KubePatch::Strategic(v)).await,
            (Patch::Json(v), status) => {
                let ops: json_patch::Patch = serde_json::from_value(v.clone())
                    .map_err(|e| CallError::Invalid(format!("not a JSON patch: {e}")))?;
                let ops = KubePatch::<()>::Json(ops);
                if status { api.patch_status(name, &params, &ops).await } else { api.patch(name, &params, &ops).await }
            }
        };
        match (stored.map_err(|e| heard.error(e)), judged) {
            (Ok(stored), _) => to_json(stored),
            // The API server refuses to change an object's uid: the patch met another object.
            (Err(CallError::Invalid(message)), Some(uid)) if message.contains("metadata.uid") => {
                Err(CallError::Conflict(format!(
                    "{} {name} is not the object the host judged this patch on (uid {uid}): it was replaced since",
                    target.kind.kind
                )))
            }
            (Err(e), _) => Err(e),
        }
    }

    async fn create_object(&self, heard: &Heard, caller: &Caller, object: &TypedObject) -> Result<Vec<u8>, CallError> {
        let api = self.api(caller, &object.target).await?;
        let body: DynamicObject = serde_json::from_value(object.sent_body().into_owned())
            .map_err(|e| CallError::Invalid(format!("not a Kubernetes object: {e}")))?;
        let params = PostParams { field_manager: Some(caller.manager.clone()), dry_run: self.dry_run };
        to_json(api.create(&params, &body).await.map_err(|e| heard.error(e))?)
    }

    async fn delete_object(
        &self,
        heard: &Heard,
        caller: &Caller,
        target: &ObjectRef,
        options: &DeleteOptions,
    ) -> Result<(), CallError> {
        let api = self.api(caller, target).await?;
        let mut params = match options.propagation {
            Propagation::Background => DeleteParams::background(),
            Propagation::Foreground => DeleteParams::foreground(),
            Propagation::Orphan => DeleteParams::orphan(),
        };
        params.dry_run = self.dry_run;
        let pre = &options.preconditions;
        if !pre.is_empty() {
            params.preconditions =
                Some(KubePreconditions { resource_version: pre.resource_version.clone(), uid: pre.uid.clone() });
        } else if let Some(uid) = &options.judged_uid {
            params.preconditions = Some(KubePreconditions { resource_version: None, uid: Some(uid.clone()) });
        }
        api.delete(&target.name, &params).await.map(|_| ()).map_err(|e| heard.error(e))
    }

    async fn get_object(
        &self,
        heard: &Heard,
        caller: &Caller,
        target: &ObjectRef,
    ) -> Result<Option<Vec<u8>>, CallError> {
        let api = self.api(caller, target).await?;
        match api.get_opt(&target.name).await.map_err(|e| heard.error(e))? {
            Some(object) => to_json(object).map(Some),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl ApiWriter for KubeWriter {
    async fn send(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        // The authorizer judged this address; checked again where it becomes a URL, so no
        // caller's unchecked string can address another object than the one it names.
        address::check(call.target())?;
        let result = if let ApiCall::Event(_) = call {
            self.send_call(&Heard::default(), caller, call).await
        } else {
            self.send_seated(caller, call).await
        };
        // Apply and create answer "not found" only when the resource (or the namespace) is not
        // served: the kept discovery answer may be stale (a CRD removed or changed).
        if let (Err(CallError::NotFound), ApiCall::Apply { .. } | ApiCall::ApplyStatus { .. } | ApiCall::Create(_)) =
            (&result, call)
        {
            self.discovery.forget(&call.target().kind);
        }
        result
    }

    async fn scope(&self, kind: &GroupVersionKind) -> Result<Scope, CallError> {
        self.resource(kind).await.map(|(_, scope)| scope)
    }
}

impl KubeWriter {
    /// Sends `call` in a seat of the write scheduler, and again after the Retry-After of each
    /// 429 (the API server did not run the request), up to [`MAX_PUSHBACK_RETRIES`] times; the
    /// write timeout bounds it all.
    async fn send_seated(&self, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        let mut retries = 0;
        loop {
            let seat = self.scheduler.seat(&caller.plugin).await;
            let heard = Heard::default();
            let result = self.send_call(&heard, caller, call).await;
            let answer = heard.answer(result.is_ok());
            seat.done(answer);
            match answer {
                Answer::TooManyRequests(_) if retries < MAX_PUSHBACK_RETRIES => retries += 1,
                _ => return result,
            }
        }
    }

    async fn send_call(&self, heard: &Heard, caller: &Caller, call: &ApiCall) -> Result<ApiReply, CallError> {
        match call {
            ApiCall::Apply { object, force } => {
                self.apply_object(heard, caller, object, *force, false).await.map(ApiReply::Object)
            }
            ApiCall::ApplyStatus { object, force } => {
                self.apply_object(heard, caller, object, *force, true).await.map(ApiReply::Object)
            }
            ApiCall::Patch { target, patch, options } => {
                self.patch_object(heard, caller, target, patch, options).await.map(ApiReply::Object)
            }
            ApiCall::Create(object) => self.create_object(heard, caller, object).await.map(ApiReply::Object),
            ApiCall::Delete { target, options } => {
                self.delete_object(heard, caller, target, options).await.map(|()| ApiReply::Done)
            }
            ApiCall::Get(target) => self.get_object(heard, caller, target).await.map(ApiReply::Found),
            ApiCall::Event(_) if self.dry_run => Ok(ApiReply::Done),
            // Enqueued for the background sender: never waits on the API server.
            ApiCall::Event(event) => {
                self.events.publish(caller, event);
                Ok(ApiReply::Done)
            }
        }
    }
}

/// What the API server said to one request, for the scheduler: kept from the kube error before
/// it becomes the plugin's [`CallError`].
#[derive(Default)]
struct Heard(parking_lot::Mutex<Option<Answer>>);

/// Times one request is sent again after a 429: 10, client-go's rest client's `maxRetries`.
const MAX_PUSHBACK_RETRIES: u32 = 10;

/// Retry-After of a 429 whose answer names none: one second, the least the header can say.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

impl Heard {
    /// Notes what `err` says of the API server and maps it as [`call_error`] does.
    fn error(&self, err: kube::Error) -> CallError {
        *self.0.lock() = Some(answer_of(&err));
        call_error(err)
    }

    /// The answer to hand the seat back with: a success was answered; an error the API server
    /// did not send (a bad patch found before sending) teaches nothing.
    fn answer(&self, ok: bool) -> Answer {
        match *self.0.lock() {
            Some(answer) => answer,
            None if ok => Answer::Answered,
            None => Answer::Failed,
        }
    }
}

/// A kube error as the scheduler reads it: a 429 is pushback, with the Status's
/// `retryAfterSeconds`; another 5xx or no answer teaches nothing (kube's client already retried
/// 503 and 504); any other status was an answer in its usual time.
fn answer_of(err: &kube::Error) -> Answer {
    match err {
        kube::Error::Api(status) if status.code == 429 => {
            let seconds = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
            Answer::TooManyRequests(if seconds == 0 {
                DEFAULT_RETRY_AFTER
            } else {
                Duration::from_secs(seconds.into())
            })
        }
        kube::Error::Api(status) if status.code >= 500 => Answer::Failed,
        kube::Error::Api(_) => Answer::Answered,
        _ => Answer::Failed,
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

    #[test]
    fn a_429_is_pushback_for_its_retry_after_and_other_answers_teach_latency_or_nothing() {
        let details = kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 3,
        };
        let named = kube::Error::Api(Box::new(
            Status::failure("slow down", "TooManyRequests").with_code(429).with_details(details),
        ));
        assert_eq!(answer_of(&named), Answer::TooManyRequests(Duration::from_secs(3)));
        assert_eq!(answer_of(&api_error(429)), Answer::TooManyRequests(DEFAULT_RETRY_AFTER), "none named: one second");
        assert_eq!(answer_of(&api_error(409)), Answer::Answered, "a conflict came in the usual time");
        assert_eq!(answer_of(&api_error(503)), Answer::Failed);
        let heard = Heard::default();
        assert_eq!(heard.answer(false), Answer::Failed, "an error found before sending teaches nothing");
        assert_eq!(heard.answer(true), Answer::Answered);
    }
}
