//! Asks the authorizer about a plugin's request, fetching the facts it needs first.

use serde_json::Value;

use super::function::Requester;
use crate::api::{ApiWriterExt, CallError, ObjectRef, address};
use crate::authorizer::{Decision, Existing, Facts, Lookup, Request};
use crate::grants::KindRef;
use crate::refusals::Cause;
use crate::state::PluginShared;

/// How many facts a decision can need: the scope, the cached object, the server's copy.
const MAX_LOOKUPS: usize = 3;

/// A request the authorizer lets through, and how the host must send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Permit {
    /// Label the body as made by the plugin.
    pub mark: bool,
    /// Send it so that the API server takes it only if the object does not exist
    /// ([`Decision::AllowIfAbsent`]); refused as a conflict, the request is judged again by
    /// [`Requester::authorize_on_server`].
    pub only_if_absent: bool,
    /// The uid of the object it was judged on, if it was judged on one: a patch or delete is
    /// sent so that the API server refuses it for any other object of that name.
    pub judged_uid: Option<String>,
}

impl Requester {
    /// Whether the plugin may make `request`: a [`Permit`] to send it, `Invalid` when it names no
    /// address an object could have ([`address::check`]), `NotFound` when the object it would
    /// change does not exist, `Forbidden` (remembered for the `AccessDenied` Event) when refused.
    pub(super) async fn authorize(&mut self, request: &Request<'_>) -> Result<Permit, CallError> {
        self.decide(request, Facts::default()).await
    }

    /// [`authorize`](Self::authorize) on the API server's copy of the object, read now: for a
    /// write sent only-if-absent that found the object there (the cache had not seen it yet).
    pub(super) async fn authorize_on_server(&mut self, request: &Request<'_>) -> Result<Permit, CallError> {
        let existing = Existing::Server(server_copy(&self.shared, request.target).await?);
        self.decide(request, Facts { existing, ..Facts::default() }).await
    }

    async fn decide(&mut self, request: &Request<'_>, mut facts: Facts) -> Result<Permit, CallError> {
        // What is judged is what is sent: an address a URL would read as another is refused
        // before anything is looked up for it.
        address::check(request.target)?;
        let shared = self.shared.clone();
        for _ in 0..=MAX_LOOKUPS {
            match shared.authorizer.decide(request, &facts) {
                Decision::Allow { mark } => {
                    let judged_uid = match &facts.existing {
                        Existing::Cached(v) | Existing::Server(Some(v)) => {
                            v.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned)
                        }
                        _ => None,
                    };
                    return Ok(Permit { mark, only_if_absent: false, judged_uid });
                }
                Decision::AllowIfAbsent => return Ok(Permit { mark: true, only_if_absent: true, judged_uid: None }),
                Decision::Absent => return Err(CallError::NotFound),
                Decision::Deny(why) => return Err(CallError::Forbidden(self.denied(request, &why))),
                Decision::Held { holder, why } => {
                    // Also kept for the plugin's status: only an operator can end this refusal.
                    let message = self.denied(request, &why);
                    let held = format!("{holder} {}", KindRef::of(&request.target.kind));
                    shared.refusals.record(&shared.caller.plugin, Cause::Held, &held, &message);
                    return Err(CallError::Forbidden(message));
                }
                Decision::Lookup(Lookup::Scope) => facts.scope = Some(shared.writer.scope(&request.target.kind).await?),
                Decision::Lookup(Lookup::Existing) => {
                    facts.existing = cached(&shared, request.target).map_or(Existing::Uncached, Existing::Cached)
                }
                Decision::Lookup(Lookup::Server) => {
                    facts.existing = Existing::Server(server_copy(&shared, request.target).await?)
                }
            }
        }
        Err(CallError::Other("the authorizer asked for more facts than a decision needs".into()))
    }

    /// The refusal message of `request` refused with `why`, remembered for the `AccessDenied`
    /// Event.
    fn denied(&mut self, request: &Request<'_>, why: &str) -> String {
        let message = self.shared.authorizer.message(request, why);
        self.denied.push(message.clone());
        message
    }
}

/// The cache's copy of `target`, if the plugin's cache holds it.
fn cached(shared: &PluginShared, target: &ObjectRef) -> Option<Value> {
    let bytes = shared.cache.get(&target.kind, target.namespace.as_deref(), &target.name).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// The API server's copy of `target` (`None`: it does not exist).
async fn server_copy(shared: &PluginShared, target: &ObjectRef) -> Result<Option<Value>, CallError> {
    let bytes = shared.writer.get(&shared.caller, target.clone()).await?;
    bytes
        .map(|b| serde_json::from_slice(&b).map_err(|e| CallError::Other(format!("the API server's copy: {e}"))))
        .transpose()
}
