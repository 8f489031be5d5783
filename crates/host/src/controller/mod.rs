//! Controllers: one per plugin — triggers (For/Owns/Watches) feed keys into its WorkQueue, and
//! workers hand them to the plugin once every cache it reads has synced.

pub mod cache;
mod filter;
pub mod indexes;
pub mod metrics;
mod policy;
mod reconcile;
mod triggers;
mod wiring;
pub mod worker;

pub use crate::informer::{InvalidKey, ObjectKey};
pub use cache::PluginCache;
pub use metrics::ControllerMetrics;
pub use policy::Outcome;
pub use reconcile::Reconcile;
pub use worker::{RECONCILE_TRACE_TARGET, Workers};

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::discovery::Scope;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;
use crate::breaker::Breaker;
use crate::informer::{HandlerRegistration, Informer, SharedInformerFactory};
use crate::leader::LeaderGate;
use crate::plugin::Plugin;
use crate::plugin::grants::KindRef;
use crate::queue::{self, QueueMetrics, WorkQueue};
use crate::shard::ShardGate;
pub(crate) use filter::add_filtered;
use triggers::for_trigger;
use wiring::{Owner, Watched, Wiring};
pub use wiring::{serve_reads, wanted_informers};

/// Why a controller could not be wired.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An informer could not be started.
    #[error("informer for {kind}: {source}")]
    Informer {
        /// The kind.
        kind: KindRef,
        /// Why.
        #[source]
        source: crate::informer::Error,
    },
    /// The API server serves no such group and version: a CRD not installed yet. Its answer is
    /// a 404 page, not a Status ("404 page not found: Failed to parse error data"), so it is not
    /// quoted.
    #[error(
        "cannot resolve {kind}: the API server does not serve its group and version: is its CustomResourceDefinition installed?"
    )]
    NotServed {
        /// The kind.
        kind: KindRef,
    },
    /// The for kind could not be resolved.
    #[error("cannot resolve {kind}: {source}")]
    Discovery {
        /// The kind.
        kind: KindRef,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// An index is declared on a kind the plugin does not read, or names an unknown function.
    #[error("index `{0}` cannot be built: its kind is not read by the plugin or its function is unknown")]
    Index(String),
    /// A new version's informer did not sync in time (often: no RBAC to list the kind).
    #[error("the cache of {kind} did not sync within {timeout:?}{}", last_error_suffix(.last_error))]
    NotSynced {
        /// The kind.
        kind: KindRef,
        /// How long we waited.
        timeout: Duration,
        /// The informer's last list or watch error, if it had one.
        last_error: Option<String>,
    },
    /// A new version reconciles another kind (or selector): it needs a new controller.
    #[error("the new version reconciles {new:?} instead of {old:?}")]
    ForChanged {
        /// The kind and selector served now.
        old: (KindRef, Option<String>),
        /// The new version's.
        new: (KindRef, Option<String>),
    },
}

fn last_error_suffix(last_error: &Option<String>) -> String {
    last_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
}

/// A cache a controller waits for: its kind and the informer's last list or watch error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsynced {
    /// The kind.
    pub kind: KindRef,
    /// Why it has not synced yet, if the informer knows (e.g. a 403 on list).
    pub last_error: Option<String>,
}

impl std::fmt::Display for Unsynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the cache of {} has not synced{}", self.kind, last_error_suffix(&self.last_error))
    }
}

/// What every controller shares.
#[derive(Clone)]
pub struct Context {
    /// The shared informer factory.
    pub factory: SharedInformerFactory,
    /// Client for discovery.
    pub client: Client,
    /// Controller metric families.
    pub metrics: ControllerMetrics,
    /// Work queue metric families.
    pub queue_metrics: QueueMetrics,
    /// Readiness checks.
    pub readiness: Readiness,
    /// Drop keys after this many failures in a row; `None` retries forever.
    pub max_retries: Option<u32>,
    /// Workers start only once this opens (leader election); caches sync regardless.
    pub leader: LeaderGate,
    /// Which keys this replica may reconcile (sharding); admits all by default.
    pub shard: ShardGate,
    /// The API-server breaker: workers pause while it is not closed.
    pub breaker: Breaker,
}

/// Queues every cached key of the for kind each time this replica starts serving a range: keys
/// its informers delivered while it served nothing were dropped.
async fn requeue_on_new_range(
    mut resyncs: tokio::sync::watch::Receiver<u64>,
    workers: Arc<Workers>,
    store: Arc<crate::informer::Store>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = resyncs.changed() => if changed.is_err() { return },
        }
        requeue_selected(&workers, &store);
    }
}

/// Queues again every object in `store` (the for kind's cache) that the serving version's
/// event filter selects: the for informer is shared, so it also holds objects outside a
/// plugin's label or namespace filter, which must never reach the plugin.
fn requeue_selected(workers: &Workers, store: &crate::informer::Store) {
    let filter = filter::Filter::new(&workers.plugin().registration().for_filter);
    for object in store.list() {
        if filter.as_ref().is_none_or(|f| f.selects(&object)) {
            workers.enqueue(ObjectKey::from(object.key()));
        }
    }
}

/// One plugin's controller: its for trigger, queue and workers, which live as long as the
/// plugin is loaded, and the current version's wiring (reads, indexes, Owns and Watches), which
/// a swap replaces.
pub struct Controller {
    name: String,
    workers: Arc<Workers>,
    for_watched: Watched,
    owner: Owner,
    for_informer: Informer,
    _for_registration: HandlerRegistration,
    wiring: Wiring,
    tasks: Vec<JoinHandle<()>>,
    leader: LeaderGate,
    shard: ShardGate,
    stop: CancellationToken,
}

/// What identifies the for trigger: the kind and its 0.1 selector, or its 0.2 event filter
/// (spelled out), since the trigger lives as long as the controller.
fn for_watched(plugin: &Plugin) -> Watched {
    let reg = plugin.registration();
    let filter = (!reg.for_filter.is_empty()).then(|| format!("{:?}", reg.for_filter));
    (KindRef::of(&reg.for_kind), reg.for_label_selector.clone().or(filter))
}

impl Controller {
    /// Wires `plugin`: an informer (from the shared factory) for every kind it reads, its
    /// custom indexes, and its triggers. `cache` must be the reader the plugin was loaded with.
    /// Workers start with [`Controller::start`].
    pub async fn build(ctx: &Context, plugin: Arc<Plugin>, cache: Arc<PluginCache>) -> Result<Self, Error> {
        let name = plugin.name().to_owned();
        let for_kind = plugin.registration().for_kind.clone();
        let resolved = ctx.factory.discovery().resolve(&for_kind).await.map_err(|source| match source {
            kube::Error::Api(status) if status.code == 404 => Error::NotServed { kind: KindRef::of(&for_kind) },
            source => Error::Discovery { kind: KindRef::of(&for_kind), source },
        })?;
        let owner = Owner { kind: KindRef::of(&for_kind), namespaced: resolved.scope == Scope::Namespaced };

        let queue = queue::Config::default().name(name.clone()).metrics(ctx.queue_metrics.clone());
        let queue = WorkQueue::new(queue.rate_limiter(plugin.rate_limiter().build()));
        let workers = Workers::new(plugin.clone(), queue.clone(), ctx.metrics.controller(&name), ctx.max_retries);
        let workers = Arc::new(workers.breaker(ctx.breaker.clone()).shard(ctx.shard.clone()));
        let wiring = Wiring::new(ctx, &plugin, cache, &workers, &owner, None).await?;
        let for_informer = wiring.informers().iter().find(|i| KindRef::of(i.gvk()) == owner.kind).cloned();
        let for_informer = for_informer.expect("the wiring reads the for kind");
        let for_filter = Some(&plugin.registration().for_filter);
        let for_registration = filter::add_filtered(&for_informer, for_filter, for_trigger(workers.clone()));
        let controller = Self {
            name,
            workers,
            for_watched: for_watched(&plugin),
            owner,
            for_informer,
            _for_registration: for_registration,
            wiring,
            tasks: Vec::new(),
            leader: ctx.leader.clone(),
            shard: ctx.shard.clone(),
            stop: CancellationToken::new(),
        };
        if let Some(split @ crate::shard::Split::OneReplica(_)) = controller.split() {
            tracing::info!(controller = %controller.name, "sharding: {}", split.condition().2);
        }
        Ok(controller)
    }

    /// How the sharded host splits this controller's keys; `None` when it does not shard.
    pub fn split(&self) -> Option<crate::shard::Split> {
        use crate::shard::Split;
        let split =
            if self.owner.namespaced { Split::ByNamespace } else { Split::OneReplica(self.owner.kind.to_string()) };
        self.shard.is_sharded().then_some(split)
    }

    /// Waits for every cache the plugin reads to sync and for the leader gate, then starts its
    /// workers. With `readiness`, the check `controller <name>` fails until the caches have
    /// synced: followers are ready too (controller-runtime).
    pub fn start(&mut self, readiness: Option<Readiness>) {
        if let Some(readiness) = &readiness {
            readiness.set(format!("controller {}", self.name), false);
        }
        let (workers, name) = (self.workers.clone(), self.name.clone());
        let informers = self.wiring.informers().to_vec();
        let (leader, stop) = (self.leader.clone(), self.stop.clone());
        self.tasks.push(tokio::spawn(async move {
            let synced = async {
                for informer in &informers {
                    if informer.wait_for_sync().await.is_err() {
                        tracing::error!(controller = %name, kind = ?informer.gvk(), "informer stopped before it synced");
                        return false;
                    }
                }
                true
            };
            // A cache that cannot sync (no RBAC to list its kind) must not hold up a shutdown.
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                synced = synced => if !synced { return },
            }
            drop(informers);
            if let Some(readiness) = readiness {
                readiness.set(format!("controller {name}"), true);
            }
            if !leader.is_leader() {
                tracing::info!(controller = %name, "caches synced; waiting to lead before starting workers");
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = leader.leading() => {}
            }
            tracing::info!(controller = %name, "caches synced; starting workers");
            workers.run().await;
        }));
        if let Some(resyncs) = self.shard.resyncs() {
            let (workers, store, stop) = (self.workers.clone(), self.for_informer.store().clone(), self.stop.clone());
            self.tasks.push(tokio::spawn(requeue_on_new_range(resyncs, workers, store, stop)));
        }
    }

    /// Serves a new version of the plugin: wires what it reads beside the current version,
    /// waits (at most `sync_timeout`) for new caches, then swaps. Reconciles in flight finish on
    /// the old version; the queue, its rate-limiter state and the informers both versions read
    /// are kept. With `requeue_all`, every cached object of the for kind is queued again.
    /// On error nothing changed. Returns the previous version.
    pub async fn swap(
        &mut self,
        ctx: &Context,
        plugin: Arc<Plugin>,
        cache: Arc<PluginCache>,
        sync_timeout: Duration,
        requeue_all: bool,
    ) -> Result<Arc<Plugin>, Error> {
        let new = for_watched(&plugin);
        if new != self.for_watched {
            return Err(Error::ForChanged { old: self.for_watched.clone(), new });
        }
        let wiring = Wiring::new(ctx, &plugin, cache, &self.workers, &self.owner, Some(&self.wiring)).await?;
        wiring.wait_for_sync(sync_timeout).await?;
        // A new namespace scope changes which keys exist for the plugin: offer it all again.
        let rescoped = plugin.grants().namespaces() != self.workers.plugin().grants().namespaces();
        let old = self.workers.swap(plugin);
        self.wiring = wiring;
        if requeue_all || rescoped {
            self.requeue_all();
        }
        Ok(old)
    }

    /// Queues every cached object of the for kind that its event filter selects again (e.g. so
    /// a new canary sees them all).
    pub fn requeue_all(&self) {
        requeue_selected(&self.workers, self.for_informer.store());
    }

    /// The caches the current version reads that have not synced yet.
    pub fn unsynced(&self) -> Vec<Unsynced> {
        let informers = self.wiring.informers().iter().filter(|i| !i.has_synced());
        informers.map(|i| Unsynced { kind: KindRef::of(i.gvk()), last_error: i.last_error() }).collect()
    }

    /// The controller's name (its plugin's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The serving half: queue, current plugin, swap.
    pub fn workers(&self) -> &Arc<Workers> {
        &self.workers
    }

    /// The current version's cache view.
    pub fn cache(&self) -> &Arc<PluginCache> {
        &self.wiring.cache
    }

    /// The queue of keys.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        self.workers.queue()
    }

    /// Stops handing out keys at once (queued keys are dropped: a replica that stops does not
    /// work through a backlog), lets the reconciles in flight finish within `grace`, then stops
    /// the workers and releases the informers. Returns whether everything finished in time.
    pub async fn shut_down(self, grace: Duration) -> bool {
        self.stop.cancel();
        self.wiring.shut_down_watches();
        let deadline = tokio::time::Instant::now() + grace;
        let drained = tokio::time::timeout_at(deadline, self.workers.queue().shut_down_now()).await.is_ok();
        let aborts: Vec<_> = self.tasks.iter().map(JoinHandle::abort_handle).collect();
        if !drained {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        // With nothing processing the workers end at once; bounded all the same.
        let stopped = tokio::time::timeout_at(deadline, futures::future::join_all(self.tasks)).await.is_ok();
        if !stopped {
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        drained && stopped
    }
}
