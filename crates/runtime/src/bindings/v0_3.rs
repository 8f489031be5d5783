//! The 0.3.0 world: a reconcile may return the key's desired state, which the host makes so
//! (`crate::host::desired`); owned kinds say how what is no longer desired is pruned. Its
//! imports are 0.2's; everything else is written once in `v0_2`'s `since_0_2!` macro.

use kubewasm_informer::ObjectKey;
use wasmtime::Store;

use crate::api::Propagation;
use crate::outcome::Desired;
use crate::outcome::{Action, CallFailed};
use crate::registration;
use crate::state::PluginCtx;

// As for 0.1: the WIT file is the reference for the docs bindgen does not copy.
#[allow(missing_docs)]
mod generated {
    wasmtime::component::bindgen!({
        world: "controller",
        path: "../../wit/controller@0.3.0",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

pub use generated::kubewasm::controller::{cache, client, config, events, log, types};
pub use generated::{
    Controller, ControllerPre, DesiredState, EventFilter, Index, IndexSource, Owned, Predicates, Prune, ReconcileError,
    Reconciled, Registration, Request, Requeue, Watch,
};

/// Calls a 0.3 instance's `reconcile`, then makes the desired state it returned so, as the
/// plugin, within the same call's limits.
pub(super) async fn reconcile(
    inst: &Controller,
    store: &mut Store<PluginCtx>,
    registration: &registration::Registration,
    key: ObjectKey,
    attempt: u32,
) -> wasmtime::Result<Result<Action, CallFailed>> {
    let request = request(&registration.for_kind, &key, attempt);
    let reconciled = match inst.call_reconcile(&mut *store, &request).await? {
        Ok(reconciled) => reconciled,
        Err(e) => return Ok(Err(reconcile_error(e))),
    };
    if let Some(desired) = reconciled.desired {
        let desired = Desired { children: desired.children, status: desired.status };
        if let Err(failed) = store.data_mut().make_desired(registration, &key, desired).await? {
            return Ok(Err(failed));
        }
    }
    Ok(Ok(action(reconciled.action)))
}

/// An owned kind's prune policy as the propagation of its prunes (`None`: never pruned).
fn prune(owned: &Owned) -> Option<Propagation> {
    match owned.prune {
        Prune::Background => Some(Propagation::Background),
        Prune::Foreground => Some(Propagation::Foreground),
        Prune::Never => None,
    }
}

// map, describe, cache and client as 0.2 made them; events, config, log and types, and the kind
// and error conversions, as every version has them.
super::v0_2::since_0_2!(prune: prune);
super::same_in_every_version!();
