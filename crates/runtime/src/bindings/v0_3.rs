//! The 0.3.0 world: a reconcile may return the key's desired state, which the host makes so
//! (`crate::host::desired`); owned kinds say how what is no longer desired is pruned. Its
//! imports are 0.2's; everything else is written once in `v0_2`'s `since_0_2_*!` macros.

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

/// What 0.3 brought to the exports: `reconcile` returns a desired state, owned kinds a prune
/// policy; with `since_0_2_exports!`, every call and conversion of the world's own types. Invoked
/// inside a module whose `generated` bindings are of a world that includes
/// `kubewasm:controller/controller@0.3.0` (this one, the engine world), with `Controller` its
/// instance type.
macro_rules! since_0_3_exports {
    () => {
        /// Calls a 0.3 instance's `reconcile`, then makes the desired state it returned so, as the
        /// plugin, within the same call's limits.
        pub(super) async fn reconcile(
            inst: &Controller,
            store: &mut wasmtime::Store<crate::state::PluginCtx>,
            registration: &crate::registration::Registration,
            key: kubewasm_informer::ObjectKey,
            attempt: u32,
        ) -> wasmtime::Result<Result<crate::outcome::Action, crate::outcome::CallFailed>> {
            let request = request(&registration.for_kind, &key, attempt);
            let reconciled = match inst.call_reconcile(&mut *store, &request).await? {
                Ok(reconciled) => reconciled,
                Err(e) => return Ok(Err(reconcile_error(e))),
            };
            if let Some(desired) = reconciled.desired {
                let desired = crate::outcome::Desired { children: desired.children, status: desired.status };
                if let Err(failed) = store.data_mut().make_desired(registration, &key, desired).await? {
                    return Ok(Err(failed));
                }
            }
            Ok(Ok(action(reconciled.action)))
        }

        /// An owned kind's prune policy as the propagation of its prunes (`None`: never pruned).
        fn prune(owned: &Owned) -> Option<crate::api::Propagation> {
            match owned.prune {
                Prune::Background => Some(crate::api::Propagation::Background),
                Prune::Foreground => Some(crate::api::Propagation::Foreground),
                Prune::Never => None,
            }
        }

        crate::bindings::v0_2::since_0_2_exports!(prune: prune);
    };
}
pub(crate) use since_0_3_exports;

// reconcile, map and describe as 0.3 has them; cache and client as 0.2 made them; events,
// config, log and types, and the kind and error conversions, as every version has them.
since_0_3_exports!();
super::v0_2::since_0_2_imports!();
super::same_in_every_version!();
