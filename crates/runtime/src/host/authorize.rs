//! Asks the authorizer about a plugin's request, fetching the facts it needs first.

use serde_json::Value;

use super::{ApiWriterExt, CallError, ObjectRef};
use crate::authorizer::{Decision, Existing, Facts, Lookup, Request};
use crate::state::{PluginCtx, PluginShared};

/// How many facts a decision can need: the scope, the cached object, the server's copy.
const MAX_LOOKUPS: usize = 3;

impl PluginCtx {
    /// Whether the plugin may make `request`: `Ok(mark)` to send it (with `mark`, after labelling
    /// the body as made by the plugin), `NotFound` when the object it would change does not
    /// exist, `Forbidden` (remembered for the `AccessDenied` Event) when refused.
    pub(crate) async fn authorize(&mut self, request: &Request<'_>) -> Result<bool, CallError> {
        let shared = self.shared.clone();
        let mut facts = Facts::default();
        for _ in 0..=MAX_LOOKUPS {
            match shared.authorizer.decide(request, &facts) {
                Decision::Allow { mark } => return Ok(mark),
                Decision::Absent => return Err(CallError::NotFound),
                Decision::Deny(why) => {
                    let message = shared.authorizer.message(request, &why);
                    self.denied.push(message.clone());
                    return Err(CallError::Forbidden(message));
                }
                Decision::Lookup(Lookup::Scope) => facts.scope = Some(shared.writer.scope(&request.target.kind).await?),
                Decision::Lookup(Lookup::Existing) => {
                    facts.existing = match cached(&shared, request.target) {
                        Some(object) => Existing::Cached(object),
                        None => Existing::Server(server_copy(&shared, request.target).await?),
                    }
                }
                Decision::Lookup(Lookup::Server) => {
                    facts.existing = Existing::Server(server_copy(&shared, request.target).await?)
                }
            }
        }
        Err(CallError::Other("the authorizer asked for more facts than a decision needs".into()))
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
