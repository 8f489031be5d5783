//! Instances ready for a call: a fresh store with its limits armed, the instances kept between
//! calls (`limits.reuseInstances`), and a source plugin's spare, loaded while the plugin waits.

mod spare;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::{Engine, Store, UpdateDeadline};

use crate::bindings::{PluginInstance, PluginPre};
use crate::limits::LimitHit;
use crate::pool::Share;
use crate::state::{PluginCtx, PluginShared};

pub(crate) use spare::{Ready, Spare};

/// An instance kept between calls (`limits.reuseInstances`), or a spare (`served` 0), with the
/// permit of the plugin's pool share it holds. Fields drop in order: the store gives its pool
/// slot back before the permit lets another call take one.
pub(crate) struct IdleInstance {
    pub(crate) store: Store<PluginCtx>,
    pub(crate) instance: PluginInstance,
    pub(crate) served: u32,
    pub(crate) _permit: OwnedSemaphorePermit,
}

impl IdleInstance {
    /// Readies an instance made before this call (kept, or a spare) for a call begun at
    /// `started`: its budgets are full again and the deadline counts from the call's start.
    pub(crate) fn begin(mut self, deadline: Duration, started: Instant) -> Self {
        self.store.data_mut().begin_call();
        arm_deadline(&mut self.store, deadline, started);
        self
    }
}

/// Arms the call's deadline on `store`, counted from `started`.
pub(crate) fn arm_deadline(store: &mut Store<PluginCtx>, deadline: Duration, started: Instant) {
    let until = started + deadline;
    store.data_mut().until = tokio::time::Instant::now() + deadline.saturating_sub(started.elapsed());
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut ctx| {
        if Instant::now() >= until {
            let hit = LimitHit::Deadline(deadline);
            ctx.data_mut().limiter.hit.get_or_insert(hit.clone());
            return Err(wasmtime::Error::new(hit));
        }
        Ok(UpdateDeadline::Yield(1))
    });
}

/// A fresh store with its memory limiter and the deadline of a call begun at `started`, and
/// an instance of `pre` in it (a source plugin's with its code loaded). On an error, the limit
/// the instance hit, if any, beside the error.
pub(crate) async fn instantiate(
    engine: &Engine,
    shared: &Arc<PluginShared>,
    pre: &PluginPre,
    started: Instant,
) -> Result<(Store<PluginCtx>, PluginInstance), (wasmtime::Error, Option<LimitHit>)> {
    let mut store = Store::new(engine, PluginCtx::new(shared.clone()));
    store.limiter(|ctx| &mut ctx.limiter);
    arm_deadline(&mut store, shared.limits.deadline(), started);
    match pre.instantiate_async(&mut store).await {
        Ok(instance) => Ok((store, instance)),
        Err(err) => Err((err, store.data().limiter.hit.clone())),
    }
}

/// A source plugin version's spare: a fresh instance with its code loaded, made with a permit of
/// the version's share.
pub(crate) fn spare(
    engine: Engine,
    pre: Arc<PluginPre>,
    shared: Arc<PluginShared>,
    share: Arc<Share>,
) -> Spare<IdleInstance> {
    Spare::new(share, move |permit| {
        let (engine, pre, shared) = (engine.clone(), pre.clone(), shared.clone());
        Box::pin(async move {
            match instantiate(&engine, &shared, &pre, Instant::now()).await {
                Ok((store, instance)) => Some(IdleInstance { store, instance, served: 0, _permit: permit }),
                Err((err, _)) => {
                    // The next call makes its own instance and reports what went wrong with it.
                    tracing::debug!(plugin = %shared.name, error = %format!("{err:#}"), "no spare instance");
                    None
                }
            }
        })
    })
}
