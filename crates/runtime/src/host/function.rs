//! What every host function does around its own work, written once: each WIT function of every
//! contract version is one of three entries — [`local`](PluginCtx::local),
//! [`read`](PluginCtx::read), [`request`](PluginCtx::request) — called with its arguments
//! converted, so charging the call budget, the write rate, the authorizer, the refusals kept for
//! the plugin's Events and status, and the metric of its outcome cannot be left out of one. The
//! budget, the rate and the outcome are private to this file.

use std::sync::Arc;

use futures::StreamExt as _;
use kube::core::GroupVersionKind;

use crate::api::{ApiCall, ApiReply, CallError, MAX_REASON};
use crate::authorizer::Request;
use crate::limits::LimitHit;
use crate::refusals::Cause;
use crate::state::{PluginCtx, PluginShared};

/// Most of one call's independent requests in flight at once ([`PluginCtx::request_all`]).
pub(crate) const IN_FLIGHT: usize = 16;

/// What a host function returns to the guest: a trap (the call budget is spent), or the
/// function's result in its contract version's error type.
pub(super) type Outcome<T, E> = wasmtime::Result<Result<T, E>>;

impl PluginCtx {
    /// A function that answers from what the host holds (the settings, a log line): charged,
    /// and counted as `ok`.
    pub(super) fn local<T>(
        &mut self,
        function: &'static str,
        body: impl FnOnce(&mut Self) -> T,
    ) -> wasmtime::Result<T> {
        self.charge()?;
        let value = body(self);
        self.count(function, "ok");
        Ok(value)
    }

    /// A read of the informer cache of `kind`, or why the arguments make none: charged, refused
    /// unless the authorizer lets the plugin read `kind` (a refusal is kept for the
    /// `AccessDenied` Event), and counted by its outcome.
    pub(super) fn read<T, E: From<CallError>>(
        &mut self,
        function: &'static str,
        kind: Result<&GroupVersionKind, CallError>,
        body: impl FnOnce(&mut Self) -> Result<T, CallError>,
    ) -> Outcome<T, E> {
        self.charge()?;
        let result = kind.and_then(|kind| self.check_read(kind)).and_then(|()| body(self));
        Ok(self.finish(function, result))
    }

    /// A request to the API server (a write, an Event, an uncached get), or why the arguments
    /// make none: charged, sent by a [`Requester`], and counted by its outcome; `answer` reads
    /// the reply.
    pub(super) async fn request<T, E: From<CallError>>(
        &mut self,
        function: &'static str,
        call: Result<ApiCall, CallError>,
        answer: impl FnOnce(ApiReply) -> Result<T, CallError>,
    ) -> Outcome<T, E> {
        self.charge()?;
        let mut requester = self.requester();
        let result = requester.send(call).await;
        self.keep_notes(requester);
        Ok(self.finish(function, result.and_then(answer)))
    }

    /// Several independent requests at once (a desired state's applies, its prunes): each
    /// charged, then sent as [`request`](Self::request) sends one, at most [`IN_FLIGHT`] at a
    /// time (the host's fair write scheduler still shares the API server between plugins), and
    /// counted by its outcome. The replies come in the order of `calls`.
    pub(crate) async fn request_all(
        &mut self,
        function: &'static str,
        calls: Vec<Result<ApiCall, CallError>>,
    ) -> wasmtime::Result<Vec<Result<ApiReply, CallError>>> {
        for _ in &calls {
            self.charge()?;
        }
        // Made before the first send: a stream that made them as it went would hold `self`.
        let requesters: Vec<_> = calls.into_iter().map(|call| (self.requester(), call)).collect();
        let sends = requesters.into_iter().map(|(mut requester, call)| async move {
            let result = requester.send(call).await;
            (requester, result)
        });
        let sent: Vec<_> = futures::stream::iter(sends).buffered(IN_FLIGHT).collect().await;
        let mut results = Vec::with_capacity(sent.len());
        for (requester, result) in sent {
            self.keep_notes(requester);
            self.count(function, result.as_ref().map_or_else(CallError::metric_label, |_| "ok"));
            results.push(result);
        }
        Ok(results)
    }

    /// A [`Requester`] for one request of this call, with its deadline.
    fn requester(&self) -> Requester {
        Requester { shared: self.shared.clone(), until: self.until, denied: Vec::new(), rejected: Vec::new() }
    }

    /// Keeps what a request was refused or rejected for, for this call's Events.
    fn keep_notes(&mut self, requester: Requester) {
        self.denied.extend(requester.denied);
        self.rejected.extend(requester.rejected);
    }

    /// Charges one host call to the budget; past it, the call traps with [`LimitHit::HostCalls`].
    fn charge(&mut self) -> wasmtime::Result<()> {
        if self.calls_left == 0 {
            let hit = LimitHit::HostCalls(self.shared.limits.host_calls);
            self.limiter.hit.get_or_insert(hit.clone());
            return Err(wasmtime::Error::new(hit));
        }
        self.calls_left -= 1;
        Ok(())
    }

    /// Counts the call and converts its result to the WIT error of its contract version.
    fn finish<T, E: From<CallError>>(&self, function: &'static str, result: Result<T, CallError>) -> Result<T, E> {
        let label = result.as_ref().map_or_else(CallError::metric_label, |_| "ok");
        self.count(function, label);
        result.map_err(Into::into)
    }

    /// Counts a finished host call in the metrics.
    fn count(&self, function: &'static str, result: &'static str) {
        self.shared.metrics.host_call(&self.shared.name, function, result);
    }

    /// `Forbidden` unless the plugin may read `kind` (the cache shows a confined plugin only
    /// what it may see), as the authorizer decides a read.
    fn check_read(&mut self, kind: &GroupVersionKind) -> Result<(), CallError> {
        self.shared.authorizer.may_read(kind).map_err(|why| {
            let message = self.shared.authorizer.read_message(kind, &why);
            self.denied.push(message.clone());
            CallError::Forbidden(message)
        })
    }
}

/// Sends one request of a plugin's call the way every request goes: a write waits for the
/// plugin's write rate (an Event is dropped past its own bucket instead, after it is judged), is
/// judged by the authorizer and sent as its decision says, and what was refused or rejected is
/// noted for the plugin's Events and status. It holds what the plugin shares and its own notes,
/// not the call's store, so a call's independent requests can be in flight at once.
pub(crate) struct Requester {
    pub(super) shared: Arc<PluginShared>,
    /// When the call's deadline passes.
    until: tokio::time::Instant,
    /// Requests the authorizer refused, for the `AccessDenied` Event.
    pub(super) denied: Vec<String>,
    /// Writes the API server rejected as invalid, for the `WriteRejected` Event.
    rejected: Vec<String>,
}

impl Requester {
    /// Sends `call`; a request the host refuses to parse takes the write rate too, as any
    /// write does.
    async fn send(&mut self, call: Result<ApiCall, CallError>) -> Result<ApiReply, CallError> {
        match call {
            Ok(call @ ApiCall::Event(_)) => self.publish(call).await,
            Ok(call) => match self.throttle_write().await {
                Ok(()) => self.send_authorized(call).await,
                Err(e) => Err(e),
            },
            Err(e) => self.throttle_write().await.and(Err(e)),
        }
    }

    /// Waits for a token of the plugin's write rate limit; every write call takes one, refused
    /// or not (like the host-call budget). Fails with `unavailable` if no token comes before
    /// the call's deadline, so a plugin over its rate costs only its own reconciles.
    async fn throttle_write(&mut self) -> Result<(), CallError> {
        match self.shared.write_limiter.acquire(self.until).await {
            Ok(waited) => {
                if !waited.is_zero() {
                    self.shared.metrics.write_throttled(&self.shared.name, "delayed");
                }
                Ok(())
            }
            Err(throttled) => {
                self.shared.metrics.write_throttled(&self.shared.name, "refused");
                Err(CallError::Unavailable(throttled.to_string()))
            }
        }
    }

    /// An Event, judged like any request; Events are droppable (WIT) and have a bucket of their
    /// own: past it an Event is dropped and counted, so a reconcile never waits for an Event,
    /// nor its writes behind Events.
    async fn publish(&mut self, call: ApiCall) -> Result<ApiReply, CallError> {
        if let ApiCall::Event(event) = &call
            && (event.reason.is_empty() || event.reason.len() > MAX_REASON)
        {
            return Err(CallError::Invalid(format!("event reason must be 1..={MAX_REASON} characters")));
        }
        self.authorize(&Request::of(&call)).await?;
        if !self.shared.event_limiter.try_acquire() {
            self.shared.metrics.write_throttled(&self.shared.name, "event_dropped");
            return Ok(ApiReply::Done);
        }
        self.shared.writer.send(&self.shared.caller, &call).await
    }

    /// Authorizes `call`, marks an object the plugin makes (the authorizer says which), and
    /// sends it through the host's write path; a write the API server rejects as invalid is
    /// remembered for the `WriteRejected` Event.
    async fn send_authorized(&mut self, mut call: ApiCall) -> Result<ApiReply, CallError> {
        let permit = self.authorize(&Request::of(&call)).await?;
        let only_if_absent = permit.only_if_absent;
        let mut result = self.send_permitted(&mut call, permit).await;
        if only_if_absent && matches!(result, Err(CallError::Conflict(_))) {
            // The object exists after all (the cache had not seen it yet): judged again on the
            // API server's copy, and sent as that decision says.
            let permit = self.authorize_on_server(&Request::of(&call)).await?;
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
            self.shared.metrics.apiserver_forbidden(&self.shared.name);
            self.denied.push(refusal);
        }
        result
    }

    async fn send_permitted(
        &mut self,
        call: &mut ApiCall,
        permit: super::authorize::Permit,
    ) -> Result<ApiReply, CallError> {
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
}
