//! Calls into a plugin: a fresh instance per call (or, with `limits.reuseInstances`, an idle
//! instance that has served fewer calls and never failed), inside the plugin's limits.

use std::time::{Duration, Instant};

use kubewasm_informer::{InvalidKey, ObjectKey};
use tokio::sync::OwnedSemaphorePermit;
use wasmtime::{Store, Trap, UpdateDeadline};

use super::Plugin;
use super::api::{ApiWriterExt, EventRecord, MAX_NOTE, ObjectRef};
use super::bindings::{PluginInstance, PluginPre, engine_v0_1};
use super::limits::LimitHit;
use super::outcome::{Action, CallFailed, Desired};
use super::registration::Registration;
use super::snapshot::{self, Refused, Restore, Snapshot};
use super::source::SourceFile;
use super::state::PluginCtx;

/// Grace on top of the deadline before the host drops a call stuck in a host function.
const HOST_CALL_GRACE: Duration = Duration::from_secs(1);

/// An instance kept between calls (`limits.reuseInstances`), with the calls it has served and
/// the permit of the plugin's pool share it holds. Fields drop in order: the store gives its
/// pool slot back before the permit lets another call take one.
pub(crate) struct IdleInstance {
    store: Store<PluginCtx>,
    instance: PluginInstance,
    served: u32,
    _permit: OwnedSemaphorePermit,
}

impl Plugin {
    /// Reconciles one key of the plugin's for kind in a fresh (or reusable) instance. The
    /// world was picked at load: this matches the instance once, on an enum.
    pub async fn reconcile(&self, key: &ObjectKey, attempt: u32) -> Result<Action, CallFailed> {
        self.reconcile_with_desired(key, attempt).await.0
    }

    /// [`reconcile`](Self::reconcile), and the desired state the plugin returned (contract
    /// 0.3), whether or not it was made so: what `kubewasm test` shows beside the writes.
    pub async fn reconcile_with_desired(
        &self,
        key: &ObjectKey,
        attempt: u32,
    ) -> (Result<Action, CallFailed>, Option<Desired>) {
        let reconcile = async |inst: &PluginInstance, store: &mut Store<PluginCtx>| {
            let result = inst.reconcile(store, &self.registration, key.clone(), attempt).await?;
            Ok((result, store.data_mut().desired.take()))
        };
        // An instance whose reconcile returned an error is not reused: its state may be why.
        let reuse = Reuse::If(|r: &(Result<_, CallFailed>, _)| r.0.is_ok());
        match self.call(Some(key), reuse, reconcile).await {
            Ok(reconciled) => reconciled,
            Err(failed) => (Err(failed), None),
        }
    }

    /// The keys of the for kind that a change to `object` (JSON) of a watched `kind` maps to,
    /// each checked ([`ObjectKey::parse`]): a key that names no object is the plugin's error to
    /// report, not a reason to drop the others. A 0.2 plugin's error is [`CallFailed::Plugin`],
    /// retried like a trap by the mapper.
    pub async fn map(
        &self,
        kind: &kube::core::GroupVersionKind,
        object: &[u8],
    ) -> Result<Vec<Result<ObjectKey, InvalidKey>>, CallFailed> {
        let map = async |inst: &PluginInstance, store: &mut Store<PluginCtx>| inst.map(store, kind, object).await;
        self.call(None, Reuse::If(|r: &Result<Vec<_>, CallFailed>| r.is_ok()), map).await?
    }

    /// Runs `f` on an instance under the deadline, memory and host-call limits. Calls the
    /// grants refused are reported as one Warning event about `regarding`, an object of the for
    /// kind, and writes the API server rejected as invalid as another. The instance is fresh
    /// unless the plugin's `reuseInstances` allows an idle one; it goes back to the idle list
    /// only if `f` succeeded, `reuse` accepts the result and it has calls left.
    pub(crate) async fn call<R>(
        &self,
        regarding: Option<&ObjectKey>,
        reuse: Reuse<impl Fn(&R) -> bool>,
        f: impl AsyncFnOnce(&PluginInstance, &mut Store<PluginCtx>) -> wasmtime::Result<R>,
    ) -> Result<R, CallFailed> {
        let max_served = match reuse {
            Reuse::If(_) => self.shared.limits.reuse_instances,
            Reuse::Never => 0,
        };
        let deadline = self.shared.limits.deadline();
        let started = Instant::now();
        let idle = if max_served > 1 { self.idle.lock().pop() } else { None };
        let mut idle = match idle {
            Some(mut idle) => {
                idle.store.data_mut().begin_call();
                arm_deadline(&mut idle.store, deadline, started);
                idle
            }
            None => {
                // At its share, a plugin waits for one of its own instances (within the
                // deadline); it never takes a slot another plugin reserved.
                let permit = tokio::time::timeout(deadline, self.share.acquire())
                    .await
                    .map_err(|_| self.limit(LimitHit::Deadline(deadline)))?;
                let (store, instance) = instantiate(self, started).await?;
                IdleInstance { store, instance, served: 0, _permit: permit }
            }
        };
        let left = deadline.saturating_sub(started.elapsed());
        let outcome = tokio::time::timeout(left + HOST_CALL_GRACE, f(&idle.instance, &mut idle.store)).await;
        let denied = std::mem::take(&mut idle.store.data_mut().denied);
        let rejected = std::mem::take(&mut idle.store.data_mut().rejected);
        if let Some(regarding) = regarding {
            self.report(regarding, "AccessDenied", denied).await;
            self.report(regarding, "WriteRejected", rejected).await;
        }
        match outcome {
            Ok(Ok(r)) => {
                idle.served += 1;
                if idle.served < max_served && matches!(&reuse, Reuse::If(keep) if keep(&r)) {
                    self.idle.lock().push(idle);
                }
                Ok(r)
            }
            Ok(Err(err)) => Err(self.classify(&idle.store, err)),
            Err(_) => Err(self.limit(LimitHit::Deadline(deadline))),
        }
    }

    /// Best effort: an operator sees refused calls (`AccessDenied`) and writes the API server
    /// rejected (`WriteRejected`) on the object (`kubectl describe`); nothing when `notes` is empty.
    async fn report(&self, key: &ObjectKey, reason: &str, notes: Vec<String>) {
        if notes.is_empty() {
            return;
        }
        let mut note = notes.join("; ");
        note.truncate(note.floor_char_boundary(MAX_NOTE));
        let regarding = ObjectRef {
            kind: self.registration.for_kind.clone(),
            namespace: key.namespace().map(str::to_owned),
            name: key.name().to_owned(),
        };
        let event = EventRecord { regarding, warning: true, reason: reason.into(), note, by_host: true };
        if let Err(err) = self.shared.writer.publish_event(&self.shared.caller, event).await {
            tracing::warn!(plugin = %self.shared.name, error = %err, reason, "could not publish the event");
        }
    }

    fn classify(&self, store: &Store<PluginCtx>, err: wasmtime::Error) -> CallFailed {
        if let Some(hit) = &store.data().limiter.hit {
            return self.limit(hit.clone());
        }
        // What the guest printed (a panic's message and location) is what its author needs;
        // the wasm backtrace names only `<wasm function N>` frames of a stripped plugin. Without
        // that, the trap's Debug form with the backtrace is the best there is.
        if let (Some(trap), Some(failure)) = (err.downcast_ref::<Trap>(), store.data().guest_failure()) {
            tracing::debug!(plugin = %self.shared.name, backtrace = ?err, "plugin trapped");
            return CallFailed::Trap(format!("{failure} (wasm trap: {trap})"));
        }
        let what = if err.is::<Trap>() { "" } else { "host error: " };
        CallFailed::Trap(format!("{what}{err:?}"))
    }

    fn limit(&self, hit: LimitHit) -> CallFailed {
        let label = match &hit {
            LimitHit::Deadline(_) => "deadline",
            LimitHit::Memory { .. } => "memory",
            LimitHit::HostCalls(_) => "host_calls",
            LimitHit::Resource(_) => "resource",
        };
        self.runtime.metrics.limit_hit(&self.shared.name, label);
        CallFailed::Limit(hit)
    }
}

/// Whether a call may run on, and return its instance to, the plugin's idle instances.
pub(crate) enum Reuse<F> {
    /// Never: a fresh instance that is dropped afterwards (`describe`, whose instance holds the
    /// load-time state without grants).
    Never,
    /// When `limits.reuseInstances` allows it and the call's result passes this check.
    If(F),
}

/// Arms the call's deadline on `store`, counted from `started`.
fn arm_deadline(store: &mut Store<PluginCtx>, deadline: Duration, started: Instant) {
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

/// A fresh store and instance with the deadline of a call begun at `started` armed.
pub(crate) async fn instantiate(
    plugin: &Plugin,
    started: Instant,
) -> Result<(Store<PluginCtx>, PluginInstance), CallFailed> {
    let mut store = Store::new(&plugin.runtime.engine, PluginCtx::new(plugin.shared.clone()));
    store.limiter(|ctx| &mut ctx.limiter);
    arm_deadline(&mut store, plugin.shared.limits.deadline(), started);
    match plugin.pre.instantiate_async(&mut store).await {
        Ok(instance) => Ok((store, instance)),
        Err(err) => match store.data().limiter.hit.clone() {
            Some(hit) => Err(plugin.limit(hit)),
            None => Err(CallFailed::Instantiate(format!("{err:#}"))),
        },
    }
}

/// Calls `describe` on a fresh instance.
pub(crate) async fn describe(plugin: &Plugin) -> Result<Registration, CallFailed> {
    let describe = async |inst: &PluginInstance, store: &mut Store<PluginCtx>| inst.describe(store).await;
    plugin.call(None, Reuse::<fn(&_) -> bool>::Never, describe).await
}

/// Compiles a source plugin's `files` on its bare engine, imports `entry` and calls `describe`,
/// in one fresh instance under the plugin's limits: the bytecode kept for its instances and its
/// registration, or its source error.
pub(crate) async fn describe_source(
    plugin: &Plugin,
    files: &[SourceFile],
    entry: &str,
) -> Result<Result<(Vec<engine_v0_1::File>, Registration), engine_v0_1::SourceError>, CallFailed> {
    let describe = async |inst: &PluginInstance, store: &mut Store<PluginCtx>| match inst {
        PluginInstance::Source(engine) => engine_v0_1::compile_load_describe(engine, store, files, entry).await,
        _ => Err(wasmtime::Error::msg("a source plugin's pre-instance is not its bare engine")),
    };
    plugin.call(None, Reuse::<fn(&_) -> bool>::Never, describe).await
}

/// The state source plugin `plugin` (its pre-instance still the bare engine) leaves a fresh
/// instance in after importing `entry` from `code`, checked by writing it into another fresh
/// instance and reading it back; `None`, with why in the log, when the engine has no snapshot
/// exports or the state cannot be kept (`snapshot.rs`).
pub(crate) async fn snapshot(plugin: &Plugin, code: &[engine_v0_1::File], entry: &str) -> Option<Restore> {
    let PluginPre::Engine(_, Some(exports)) = &*plugin.pre else { return None };
    if !plugin.runtime.snapshots {
        return None;
    }
    let name = &*plugin.shared.name;
    match take_snapshot(plugin, exports, code, entry).await {
        Ok(Ok(snapshot)) => {
            let (bytes, runs) = snapshot.size();
            tracing::debug!(
                plugin = name,
                bytes,
                runs,
                "the plugin's state after import is restored into each instance"
            );
            Some(Restore { exports: exports.clone(), snapshot })
        }
        Ok(Err(refused)) => {
            tracing::info!(plugin = name, "each instance imports the plugin: {refused}");
            None
        }
        Err(e) => {
            tracing::warn!(plugin = name, "each instance imports the plugin: taking its snapshot failed: {e:#}");
            None
        }
    }
}

async fn take_snapshot(
    plugin: &Plugin,
    exports: &snapshot::Exports,
    code: &[engine_v0_1::File],
    entry: &str,
) -> wasmtime::Result<Result<Snapshot, Refused>> {
    let started = Instant::now();
    let deadline = plugin.shared.limits.deadline();
    let _permit = tokio::time::timeout(deadline, plugin.share.acquire()).await?;
    // Memories are compared where they are, in two instances at a time, never copied whole.
    let (mut fresh_store, instance) = bare(plugin, started).await?;
    let fresh = exports.read(&instance, &mut fresh_store).await?;
    let (mut store, instance) = bare(plugin, started).await?;
    let engine = engine_v0_1::Engine::new(&mut store, &instance)?;
    engine_v0_1::load(&engine, &mut store, code, entry).await?;
    if store.data().holds_resources() {
        return Ok(Err(Refused::Resources));
    }
    let loaded = exports.read(&instance, &mut store).await?;
    let loaded = snapshot::values(&loaded, &store);
    let snapshot = Snapshot::diff(&snapshot::values(&fresh, &fresh_store), &loaded, snapshot::MAX_BYTES);
    drop(fresh_store);
    let snapshot = match snapshot {
        Ok(snapshot) => snapshot,
        Err(refused) => return Ok(Err(refused)),
    };
    let (mut restored_store, instance) = bare(plugin, started).await?;
    snapshot.restore(exports, &instance, &mut restored_store).await?;
    let restored = exports.read(&instance, &mut restored_store).await?;
    if snapshot::values(&restored, &restored_store) != loaded {
        return Ok(Err(Refused::Differs));
    }
    Ok(Ok(snapshot))
}

/// A fresh instance of the plugin's component (for a source plugin, its engine) in a store of
/// its own, under the plugin's limits and the deadline of a call begun at `started`.
async fn bare(
    plugin: &Plugin,
    started: Instant,
) -> wasmtime::Result<(Store<PluginCtx>, wasmtime::component::Instance)> {
    let mut store = Store::new(&plugin.runtime.engine, PluginCtx::new(plugin.shared.clone()));
    store.limiter(|ctx| &mut ctx.limiter);
    arm_deadline(&mut store, plugin.shared.limits.deadline(), started);
    let instance = plugin.pre.instance_pre().instantiate_async(&mut store).await?;
    Ok((store, instance))
}
