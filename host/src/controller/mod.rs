//! Controllers: one per plugin — triggers (For/Owns/Watches) feed keys into its WorkQueue, and
//! workers hand them to the plugin once every cache it reads has synced.

pub mod cache;
pub mod indexes;
pub mod metrics;
mod triggers;
pub mod worker;

pub use cache::PluginCache;
pub use metrics::ControllerMetrics;
pub use worker::{Outcome, Reconciler};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;
use crate::informer::{HandlerRegistration, Informer, InformerParams, SharedInformerFactory};
use crate::leader::LeaderGate;
use crate::plugin::grants::KindRef;
use crate::plugin::{ObjectKey, Plugin};
use crate::queue::{self, QueueMetrics, WorkQueue};
use triggers::{ForTrigger, Mapper, OwnsTrigger};

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
}

/// One plugin's controller: informers, triggers, queue and workers.
pub struct Controller {
    name: String,
    reconciler: Arc<Reconciler>,
    cache: Arc<PluginCache>,
    informers: Vec<Informer>,
    registrations: Vec<HandlerRegistration>,
    mapper: Option<Arc<Mapper>>,
    tasks: Vec<JoinHandle<()>>,
    leader: LeaderGate,
    stop: CancellationToken,
}

fn params(selector: Option<&str>) -> InformerParams {
    selector.map_or_else(InformerParams::default, |s| InformerParams::default().labels(s))
}

impl Controller {
    /// Wires `plugin`: an informer (from the shared factory) for every kind it reads, its
    /// custom indexes, and its triggers. `cache` must be the reader the plugin was loaded with.
    /// Workers start with [`Controller::start`].
    pub async fn build(ctx: &Context, plugin: Arc<Plugin>, cache: Arc<PluginCache>) -> Result<Self, Error> {
        let name = plugin.name().to_owned();
        let reg = plugin.registration().clone();
        let informer_err = |kind: &GroupVersionKind| {
            let kind = KindRef::of(kind);
            move |source| Error::Informer { kind, source }
        };
        // One informer per readable kind; the for kind and watches keep their selectors.
        let mut wanted: BTreeMap<KindRef, (GroupVersionKind, Option<String>)> = BTreeMap::new();
        wanted.insert(KindRef::of(&reg.for_kind), (reg.for_kind.clone(), reg.for_label_selector.clone()));
        for w in &reg.watches {
            wanted.entry(KindRef::of(&w.kind)).or_insert((w.kind.clone(), w.label_selector.clone()));
        }
        for kind in reg.owns.iter().chain(&reg.reads) {
            wanted.entry(KindRef::of(kind)).or_insert((kind.clone(), None));
        }
        let mut informers: BTreeMap<KindRef, Informer> = BTreeMap::new();
        for (key, (gvk, selector)) in &wanted {
            let informer = ctx.factory.informer(gvk, params(selector.as_deref())).await.map_err(informer_err(gvk))?;
            informers.insert(key.clone(), informer);
        }
        for index in &reg.indexes {
            let informer = informers.get(&KindRef::of(&index.kind)).ok_or_else(|| Error::Index(index.name.clone()))?;
            let func = indexes::index_func(&index.source).ok_or_else(|| Error::Index(index.name.clone()))?;
            let indexers = [(cache::index_name(&name, &index.name), func)].into_iter().collect();
            informer.add_indexers(indexers).map_err(informer_err(&index.kind))?;
        }
        cache.replace(informers.values().cloned());

        let queue = WorkQueue::new(queue::Config::default().name(name.clone()).metrics(ctx.queue_metrics.clone()));
        let reconciler =
            Arc::new(Reconciler::new(plugin, queue.clone(), ctx.metrics.controller(&name), ctx.max_retries));

        let (_, caps) = kube::discovery::pinned_kind(&ctx.client, &reg.for_kind)
            .await
            .map_err(|source| Error::Discovery { kind: KindRef::of(&reg.for_kind), source })?;
        let for_ref = KindRef::of(&reg.for_kind);
        let mut registrations = vec![informers[&for_ref].add_event_handler(ForTrigger(queue.clone()))];
        for kind in &reg.owns {
            let trigger = OwnsTrigger {
                queue: queue.clone(),
                owner: for_ref.clone(),
                owner_namespaced: caps.scope == Scope::Namespaced,
            };
            registrations.push(informers[&KindRef::of(kind)].add_event_handler(trigger));
        }
        let mut mapper = None;
        if !reg.watches.is_empty() {
            let watched: Vec<Informer> = reg.watches.iter().map(|w| informers[&KindRef::of(&w.kind)].clone()).collect();
            let m = Mapper::new(&name, watched);
            for i in 0..reg.watches.len() {
                registrations.push(m.watched_informer(i).add_event_handler(m.trigger(i)));
            }
            mapper = Some(m);
        }
        ctx.readiness.set(format!("controller {name}"), false);
        Ok(Self {
            name,
            reconciler,
            cache,
            informers: informers.into_values().collect(),
            registrations,
            mapper,
            tasks: Vec::new(),
            leader: ctx.leader.clone(),
            stop: CancellationToken::new(),
        })
    }

    /// Waits for every cache the plugin reads to sync and for the leader gate, then starts its
    /// workers (and mapper). Ready once synced: followers are ready too (controller-runtime).
    pub fn start(&mut self, readiness: Readiness) {
        let (reconciler, informers, name) = (self.reconciler.clone(), self.informers.clone(), self.name.clone());
        let (mapper, leader, stop) = (self.mapper.clone(), self.leader.clone(), self.stop.clone());
        self.tasks.push(tokio::spawn(async move {
            for informer in &informers {
                if informer.wait_for_sync().await.is_err() {
                    tracing::error!(controller = %name, kind = ?informer.gvk(), "informer stopped before it synced");
                    return;
                }
            }
            readiness.set(format!("controller {name}"), true);
            if !leader.is_leader() {
                tracing::info!(controller = %name, "caches synced; waiting to lead before starting workers");
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = leader.leading() => {}
            }
            tracing::info!(controller = %name, "caches synced; starting workers");
            if let Some(mapper) = mapper {
                tokio::spawn(mapper.run(reconciler.clone()));
            }
            let workers = reconciler.plugin().max_concurrent();
            reconciler.run(workers).await;
        }));
    }

    /// The controller's name (its plugin's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The serving half: queue, current plugin, swap.
    pub fn reconciler(&self) -> &Arc<Reconciler> {
        &self.reconciler
    }

    /// The plugin's cache view.
    pub fn cache(&self) -> &Arc<PluginCache> {
        &self.cache
    }

    /// The queue of keys.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        self.reconciler.queue()
    }

    /// Stops taking keys, lets in-flight reconciles finish within `grace`, then stops the
    /// workers and releases the informers. Returns whether everything finished in time.
    pub async fn shut_down(self, grace: Duration) -> bool {
        self.stop.cancel();
        if let Some(mapper) = &self.mapper {
            mapper.shut_down();
        }
        let drained = tokio::time::timeout(grace, self.reconciler.queue().shut_down_with_drain()).await.is_ok();
        for task in &self.tasks {
            if !drained {
                task.abort();
            }
        }
        for task in self.tasks {
            let _ = task.await;
        }
        drop(self.registrations);
        drained
    }
}
