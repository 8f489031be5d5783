//! The set of loaded plugins: load, swap or unload one while the host runs, keeping its queue,
//! its rate-limiter state and the shared informers.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wasmplugin::Condition;
use tokio::sync::Mutex;

mod canary;
mod rbac;

use super::metrics::HotloadMetrics;
use super::module::Module;
use crate::canary::{Canary, TapWriter};
use crate::controller::{self, Controller, PluginCache};
use crate::plugin::api::{ApiWriter, CacheReader};
use crate::plugin::grants::KindRef;
use crate::plugin::{LoadError, Plugin, PluginConfig, Runtime};
use crate::writer::elide::Elision;

/// Where a plugin came from. A name belongs to one source at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A `*.wasm` file in the plugin directory.
    Directory,
    /// A `WasmPlugin` object.
    WasmPlugin,
}

impl Origin {
    /// What to edit so that a version of `name` rejected with `err` loads: its config file or
    /// its component in the plugin directory, or its WasmPlugin's spec.
    pub fn to_fix(&self, name: &str, err: &ApplyError) -> String {
        match (self, err.blames_config()) {
            (Origin::Directory, true) => format!("{name}.yaml"),
            (Origin::Directory, false) => format!("{name}.wasm"),
            (Origin::WasmPlugin, true) => format!("WasmPlugin {name}: spec"),
            (Origin::WasmPlugin, false) => format!("WasmPlugin {name}: spec.module"),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Directory => "the plugin directory",
            Origin::WasmPlugin => "a WasmPlugin object",
        })
    }
}

/// Why a version was not applied. The version serving before, if any, keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The component was rejected (garbage, wrong world, describe() failed, grants).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Its informers, indexes or triggers could not be wired.
    #[error(transparent)]
    Wiring(#[from] controller::Error),
    /// A canary candidate reconciles another kind than the serving version.
    #[error("the candidate reconciles {candidate} but the serving version reconciles {serving}: nothing to compare")]
    CanaryKind {
        /// The serving version's for kind.
        serving: KindRef,
        /// The candidate's.
        candidate: KindRef,
    },
    /// This candidate (same component and config) was rejected before; not loaded again.
    #[error("{message}")]
    CanaryRejected {
        /// The first rejection's reason.
        reason: &'static str,
        /// Its message.
        message: String,
    },
    /// No version serves, so a canary has nothing to be compared with.
    #[error("no version of `{0}` serves: a canary needs one to compare with")]
    NothingServes(String),
    /// Another source already serves a plugin with this name.
    #[error("a plugin named `{name}` is already loaded from {owner}")]
    NameTaken {
        /// The name.
        name: String,
        /// Who has it.
        owner: Origin,
    },
}

impl ApplyError {
    /// Whether the same version may load later without any change to it (the API server was
    /// away, a cache did not sync in time), as opposed to a version that can never load.
    pub fn is_transient(&self) -> bool {
        matches!(self, ApplyError::Wiring(_))
    }

    /// Whether the operator's config is what to fix, rather than the component.
    pub fn blames_config(&self) -> bool {
        matches!(self, ApplyError::Load(e) if e.blames_config())
    }

    /// Bounded label for metrics and condition reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Load(LoadError::InvalidSettings(_)) => "InvalidSettings",
            ApplyError::Load(_) => "LoadFailed",
            ApplyError::Wiring(_) => "WiringFailed",
            ApplyError::NameTaken { .. } => "NameTaken",
            ApplyError::CanaryKind { .. } => "CanaryKindChanged",
            ApplyError::NothingServes(_) => "NothingServes",
            ApplyError::CanaryRejected { reason, .. } => reason,
        }
    }
}

/// What [`LoadedPlugins::apply`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The same component and config already serve.
    Unchanged,
    /// First version of this plugin.
    Loaded,
    /// Swapped in place: queue, backoff and shared caches kept.
    Swapped,
    /// The new version reconciles another kind: a new controller replaced the old one.
    Replaced,
}

/// A plugin version to serve.
pub struct Desired {
    /// Plugin name.
    pub name: String,
    /// Its source.
    pub origin: Origin,
    /// The component.
    pub wasm: Module,
    /// Operator configuration.
    pub config: PluginConfig,
}

/// A candidate version to run as a dry-run canary beside the serving one.
#[derive(Clone)]
pub struct Candidate {
    /// The component.
    pub wasm: Module,
    /// Its configuration (grants and limits usually the serving version's).
    pub config: PluginConfig,
}

/// A running canary and what it was made from.
struct CanarySlot {
    sha256: String,
    config: PluginConfig,
    canary: Arc<Canary>,
    /// What the plugin's identity lacks for the candidate's grants.
    rbac_missing: Vec<String>,
}

/// Hot-load behaviour.
#[derive(Clone, Debug)]
pub struct Options {
    /// After a swap, queue every cached object of the for kind again (default on).
    pub requeue_on_swap: bool,
    /// How long a new version may wait for caches it adds to sync.
    pub sync_timeout: Duration,
    /// Grace for in-flight reconciles when a controller is replaced or unloaded.
    pub grace: Duration,
    /// Where plugins' own identities live, when their requests are sent as them: each version
    /// loaded is reviewed for the rights its grants need (`Serving::rbac_missing`).
    pub identity: Option<crate::rbac::Identity>,
    /// Make each plugin's RBAC with the host's own rights before reviewing it (`kubewasm dev`
    /// and tests, whose host is a cluster admin).
    pub provision_rbac: bool,
    /// Answer plugins' applies that would change nothing from the cache (`--elide-unchanged-writes`,
    /// default on); a plugin's config can turn it off for that plugin.
    pub elide_unchanged_writes: bool,
    /// Most plugin requests in flight at the API server at once, shared fairly by the plugins
    /// with requests waiting (`--write-seats`, default
    /// [`DEFAULT_MAX_SEATS`](crate::writer::fair::DEFAULT_MAX_SEATS)).
    pub write_seats: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            requeue_on_swap: true,
            sync_timeout: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            identity: None,
            provision_rbac: false,
            elide_unchanged_writes: true,
            write_seats: crate::writer::fair::DEFAULT_MAX_SEATS,
        }
    }
}

struct Slot {
    origin: Origin,
    sha256: String,
    config: PluginConfig,
    revision: u64,
    controller: Controller,
    /// A dry-run candidate compared with this version, if any.
    canary: Option<CanarySlot>,
    /// The last candidate that did not load (sha256, config) and why, so it is not tried again.
    canary_rejected: Option<(String, PluginConfig, &'static str, String)>,
    /// What its identity lacks for its grants; `None` when plugins are not impersonated.
    rbac_missing: Option<Vec<String>>,
}

impl Slot {
    /// A new version's slot, with no canary.
    fn new(
        origin: Origin,
        sha256: String,
        config: PluginConfig,
        revision: u64,
        controller: Controller,
        rbac_missing: Option<Vec<String>>,
    ) -> Self {
        Self { origin, sha256, config, revision, controller, canary: None, canary_rejected: None, rbac_missing }
    }
}

/// What is serving for one plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    /// sha256 of the component.
    pub sha256: String,
    /// Its revision.
    pub revision: u64,
    /// How a sharded host splits its keys; `None` when the host does not shard.
    pub split: Option<crate::shard::Split>,
    /// The rights its identity lacks for its grants; `None` when plugins are not impersonated.
    pub rbac_missing: Option<Vec<String>>,
}

type Slots = BTreeMap<String, Arc<Mutex<Option<Slot>>>>;

/// Every loaded plugin. Applies for one plugin are serialized; different plugins load in
/// parallel.
#[derive(Clone)]
pub struct LoadedPlugins {
    ctx: controller::Context,
    runtime: Runtime,
    /// What every plugin writes through, below its own elision and the canary tap.
    writer: Arc<dyn ApiWriter>,
    elision: Elision,
    options: Options,
    metrics: HotloadMetrics,
    slots: Arc<parking_lot::Mutex<Slots>>,
}

impl LoadedPlugins {
    /// A plugins wiring controllers from `ctx`, loading with `runtime`, writing with `writer`.
    pub fn new(
        ctx: controller::Context,
        runtime: Runtime,
        writer: Arc<dyn ApiWriter>,
        options: Options,
        metrics: HotloadMetrics,
    ) -> Self {
        let elision = Elision::new(options.elide_unchanged_writes, runtime.metrics().clone());
        Self { ctx, runtime, writer, elision, options, metrics, slots: Arc::default() }
    }

    /// The writer of one plugin version reading `cache`: every serving write passes the tap,
    /// which copies it for a canary when one watches, then elision of applies that would change
    /// nothing.
    fn version_writer(&self, cache: &Arc<PluginCache>, config: &PluginConfig) -> Arc<dyn ApiWriter> {
        let enabled = config.elide_unchanged_writes.unwrap_or(true);
        let elide = self.elision.writer(self.writer.clone(), cache.clone() as Arc<dyn CacheReader>, enabled);
        Arc::new(TapWriter(Arc::new(elide)))
    }

    fn slot(&self, name: &str) -> Arc<Mutex<Option<Slot>>> {
        self.slots.lock().entry(name.to_owned()).or_default().clone()
    }

    /// Serves `desired`: loads it if new, swaps it in if it differs from what serves, and does
    /// nothing if it is the same. A rejected version leaves the serving one in place.
    pub async fn apply(&self, desired: Desired) -> Result<Applied, ApplyError> {
        let started = Instant::now();
        let name = desired.name.clone();
        let origin = desired.origin.clone();
        let slot = self.slot(&name);
        let mut slot = slot.lock().await;
        let result = self.apply_locked(&mut slot, desired).await;
        match &result {
            Ok(Applied::Unchanged) => {}
            Ok(applied) => {
                let serving = slot.as_ref().expect("applied versions serve");
                self.metrics.applied(&name, applied, started.elapsed());
                tracing::info!(plugin = %name, revision = serving.revision, sha256 = %serving.sha256, ?applied, elapsed = ?started.elapsed(), "plugin version serving");
            }
            Err(err) => {
                // A rejected version holds no readiness check: readiness says the host has
                // decided about every plugin it started with, and a rejection is a decision
                // (reported by this log line, the metric and a WasmPlugin's status). Holding it
                // down would take every replica out of its Service for one bad file, and a
                // never-loaded name would have nothing to clear its check.
                self.metrics.rejected(&name, err.reason());
                // The one line per rejection (sources do not log it again); the revision still
                // serving, if any, as a number.
                let keeps = slot.as_ref().map(|s| s.revision);
                let fix = origin.to_fix(&name, err);
                tracing::error!(plugin = %name, %origin, %fix, error = format!("{err:#}"), serving_revision = keeps, "plugin version rejected");
            }
        }
        result
    }

    /// Counts a version of `name` rejected before it reached [`apply`](Self::apply) (e.g. its
    /// config file did not parse), under `reason`.
    pub fn rejected(&self, name: &str, reason: &'static str) {
        self.metrics.rejected(name, reason);
    }

    /// Shows WasmPlugin `name`'s status conditions in the metrics; `None`: it is gone.
    pub(crate) fn conditions(&self, name: &str, conditions: Option<&[Condition]>) {
        match conditions {
            Some(conditions) => self.metrics.conditions(name, conditions),
            None => self.metrics.forget_conditions(name),
        }
    }

    async fn apply_locked(&self, slot: &mut Option<Slot>, desired: Desired) -> Result<Applied, ApplyError> {
        let Desired { name, origin, wasm, config } = desired;
        if let Some(current) = slot.as_ref()
            && current.origin != origin
        {
            return Err(ApplyError::NameTaken { name, owner: current.origin.clone() });
        }
        let sha256 = wasm.sha256().to_owned();
        if slot.as_ref().is_some_and(|s| s.sha256 == sha256 && s.config == config) {
            return Ok(Applied::Unchanged);
        }
        let revision = slot.as_ref().map_or(1, |s| s.revision + 1);
        let cache = Arc::new(PluginCache::new(&name));
        let writer = self.version_writer(&cache, &config);
        let plugin = self
            .runtime
            .load_digested(&name, wasm.bytes().clone(), sha256.clone(), config.clone(), cache.clone(), writer)
            .await?;
        let plugin = Arc::new(plugin.with_revision(revision));
        let rbac_missing = self.review_rbac(&name, &plugin).await;
        // Only plugin files gate readiness on their caches: the operator deployed them with the
        // host. A WasmPlugin reports waiting caches in its status instead (one object without
        // RBAC must not take every replica out of its Service).
        let gate = (origin == Origin::Directory).then(|| self.ctx.readiness.clone());
        // The slot keeps what serves across every await below, so a caller that is dropped
        // (shutdown aborts the sources) leaves nothing running outside the plugins.
        let applied = match slot.as_mut() {
            None => {
                let mut controller = Controller::build(&self.ctx, plugin, cache).await?;
                controller.start(gate);
                *slot = Some(Slot::new(origin, sha256, config, revision, controller, rbac_missing));
                Applied::Loaded
            }
            Some(current) => {
                let (sync, requeue) = (self.options.sync_timeout, self.options.requeue_on_swap);
                match current.controller.swap(&self.ctx, plugin.clone(), cache.clone(), sync, requeue).await {
                    Ok(_old) => {
                        (current.sha256, current.config, current.revision) = (sha256, config, revision);
                        current.rbac_missing = rbac_missing;
                        Applied::Swapped
                    }
                    Err(controller::Error::ForChanged { .. }) => {
                        // Another kind: a new controller; the old one drains, then goes.
                        let controller = Controller::build(&self.ctx, plugin, cache).await?;
                        let new = Slot::new(origin, sha256, config, revision, controller, rbac_missing);
                        let old = slot.replace(new).expect("matched Some");
                        old.controller.shut_down(self.options.grace).await;
                        slot.as_mut().expect("just set").controller.start(gate);
                        Applied::Replaced
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(applied)
    }

    /// Stops and forgets the plugin `name` if `origin` serves it: in-flight reconciles finish
    /// (within the grace period), informers no other plugin uses stop. Returns whether it was
    /// loaded.
    pub async fn remove(&self, name: &str, origin: &Origin) -> bool {
        let slot = self.slot(name);
        let mut slot = slot.lock().await;
        if slot.as_ref().is_none_or(|s| &s.origin != origin) {
            return false;
        }
        let current = slot.take().expect("checked above");
        // Its candidate stops now, not when the last reconcile that saw it lets go.
        current.controller.workers().set_canary(None);
        self.ctx.readiness.remove(&format!("controller {name}"));
        current.controller.shut_down(self.options.grace).await;
        self.metrics.unloaded(name);
        tracing::info!(plugin = %name, revision = current.revision, "plugin unloaded");
        true
    }

    /// The version serving for `name`, if any.
    pub async fn serving(&self, name: &str) -> Option<Serving> {
        let slot = self.slots.lock().get(name).cloned()?;
        let slot = slot.lock().await;
        slot.as_ref().map(|s| Serving {
            sha256: s.sha256.clone(),
            revision: s.revision,
            split: s.controller.split(),
            rbac_missing: s.rbac_missing.clone(),
        })
    }

    /// Whether `name` serves exactly this component (by sha256) and config.
    pub async fn serves(&self, name: &str, sha256: &str, config: &PluginConfig) -> bool {
        let Some(slot) = self.slots.lock().get(name).cloned() else { return false };
        let slot = slot.lock().await;
        slot.as_ref().is_some_and(|s| s.sha256 == sha256 && &s.config == config)
    }

    /// The caches the version serving for `name` waits for (empty once all synced); `None`
    /// if nothing serves.
    pub async fn unsynced(&self, name: &str) -> Option<Vec<controller::Unsynced>> {
        let slot = self.slots.lock().get(name).cloned()?;
        let slot = slot.lock().await;
        slot.as_ref().map(|s| s.controller.unsynced())
    }

    /// The hot-load options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The current plugin version of `name`, with its controller's workers.
    pub async fn workers(&self, name: &str) -> Option<Arc<controller::Workers>> {
        let slot = self.slots.lock().get(name).cloned()?;
        let slot = slot.lock().await;
        slot.as_ref().map(|s| s.controller.workers().clone())
    }

    /// The serving plugin of `name`.
    pub async fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        Some(self.workers(name).await?.plugin())
    }

    /// Names of the loaded plugins loaded from `origin`.
    pub async fn names(&self, origin: &Origin) -> Vec<String> {
        let slots: Vec<_> = self.slots.lock().iter().map(|(n, s)| (n.clone(), s.clone())).collect();
        let mut names = Vec::new();
        for (name, slot) in slots {
            if slot.lock().await.as_ref().is_some_and(|s| &s.origin == origin) {
                names.push(name);
            }
        }
        names
    }

    /// The shared informer factory (tests count its running informers).
    pub fn context(&self) -> &controller::Context {
        &self.ctx
    }

    /// The runtime the plugins are loaded with (what the API server refused them, among others).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Gates the workers of controllers wired from now on (leader election).
    pub fn set_leader_gate(&mut self, gate: crate::leader::LeaderGate) {
        self.ctx.leader = gate;
    }

    /// Shards controllers started from now on by `gate`'s range: their for (and owned) kinds'
    /// informers follow it and their workers reconcile only keys in it.
    pub fn set_shard_gate(&mut self, gate: crate::shard::ShardGate) {
        self.ctx.factory = self.ctx.factory.clone().shard_gate(gate.clone());
        self.ctx.shard = gate;
    }

    /// Stops every controller, letting in-flight reconciles finish within `grace`.
    pub async fn shut_down(&self, grace: Duration) -> bool {
        let slots: Vec<_> = std::mem::take(&mut *self.slots.lock()).into_values().collect();
        let stops = slots.into_iter().map(|slot| async move {
            match slot.lock().await.take() {
                Some(s) => s.controller.shut_down(grace).await,
                None => true,
            }
        });
        futures::future::join_all(stops).await.into_iter().all(|ok| ok)
    }
}
