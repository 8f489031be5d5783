//! `WasmPlugin` objects as a source: the host's own informers on WasmPlugins and on the module
//! ConfigMaps of its namespace feed a work queue of plugin names; each name is applied like a
//! plugin file and its status says what serves and why a version was rejected.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, Resource as _};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod canary;
mod oci;
mod refusals;

use canary::canary_status;
pub use canary::{CANARY_DIFFERS, CANARY_FAILED, CANARY_REPORT_INTERVAL};
pub use oci::DEFAULT_REFRESH as DEFAULT_OCI_REFRESH;

use super::loaded::{Desired, LoadedPlugins, Origin};
use super::module::Module;
use super::wasmplugin::{Condition, ConfigMapModule, ModuleSource, WasmPlugin, WasmPluginStatus};
use crate::informer::{CachedObject, Enqueue, HandlerRegistration, Informer, InformerParams};
use crate::plugin::registration::{EventFilter, Predicates};
use crate::queue::{Config as QueueConfig, WorkQueue};

/// How long a module download may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);

/// Name of this source's readiness check.
pub const READINESS_CHECK: &str = "wasmplugins";

/// Field manager of the host's status writes.
pub const STATUS_MANAGER: &str = "kubewasm";

/// WasmPlugins applied at once. A swap may wait up to the sync timeout for its new caches;
/// with several workers that holds up only its own object. 4.
const WORKERS: usize = 4;

/// How often a loaded WasmPlugin whose caches have not synced is looked at again, to report
/// when they have (or why they still have not). 2 s.
const CACHE_POLL: Duration = Duration::from_secs(2);

/// How often a serving WasmPlugin whose identity lacks rights is reviewed again, to clear its
/// `RBACMissing` condition once they are granted.
const RBAC_RECHECK: Duration = Duration::from_secs(30);

/// What a WasmPlugin's reconcile leaves to do; [`Followup::next`] settles its name on the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Followup {
    /// Nothing until it changes.
    Done,
    /// Again, with backoff (the problem may go away by itself).
    Retry,
    /// It serves, but waits for caches: look again after [`CACHE_POLL`].
    WaitForCaches,
    /// A canary runs: report its findings again after [`CANARY_REPORT_INTERVAL`].
    Canary,
    /// It serves, but its identity lacks rights or it was refused since the last report: review
    /// and report again after [`RBAC_RECHECK`].
    RecheckRbac,
    /// Its module is an unpinned OCI tag: resolve it again after this long.
    Refresh(Duration),
}

impl Followup {
    fn next(self) -> crate::queue::Next {
        use crate::queue::Next;
        match self {
            Followup::Done => Next::Forget,
            Followup::Retry => Next::Backoff,
            Followup::WaitForCaches => Next::after(CACHE_POLL),
            Followup::Canary => Next::after(CANARY_REPORT_INTERVAL),
            Followup::RecheckRbac => Next::after(RBAC_RECHECK),
            Followup::Refresh(every) => Next::after(every),
        }
    }
}

/// Watches WasmPlugins and applies them through a [`LoadedPlugins`].
pub struct WasmPluginSource {
    plugins: LoadedPlugins,
    client: Client,
    module_namespace: String,
    selector: Option<String>,
    /// Events about WasmPlugins (canary differences).
    events: crate::event_sink::EventSink,
    /// Per WasmPlugin, the candidate and the last difference an Event was sent for.
    evented: parking_lot::Mutex<std::collections::HashMap<String, (String, u64)>>,
    /// Pulls OCI modules (one client, its per-registry limits and disk cache for all plugins),
    /// their Secrets read from `module_namespace`.
    registries: crate::hotload::oci::Registries,
    /// Per WasmPlugin with an OCI module, what it last resolved to.
    resolved: parking_lot::Mutex<std::collections::HashMap<String, oci::Resolved>>,
    /// How often unpinned OCI tags are resolved again by default.
    oci_refresh: Duration,
}

fn gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("kubewasm.dev", "v1alpha1", "WasmPlugin")
}

/// Queues the name of every WasmPlugin that changed. Only a change of spec (generation) or
/// labels (the source's selector) is news, and deletion: the status this source writes itself
/// would otherwise apply a rejected version again, and count it again (controller-runtime's
/// `GenerationChangedPredicate`, plus labels). The start of a deletion is a generation change
/// too: the API server bumps it when it sets `deletionTimestamp`.
fn plugin_trigger(plugins: &Informer, queue: WorkQueue<String>) -> HandlerRegistration {
    let predicates = Predicates { generation_changed: true, labels_changed: true, annotations_changed: false };
    let news = EventFilter { predicates, ..EventFilter::default() };
    let enqueue = Enqueue::new(|obj: &CachedObject| Some(obj.name().to_owned()), move |name| queue.add(name));
    crate::controller::add_filtered(plugins, Some(&news), enqueue)
}

/// Queues the WasmPlugins whose module or canary's module lives in a ConfigMap that changed.
fn module_trigger(modules: &Informer, plugins: Informer, queue: WorkQueue<String>) -> HandlerRegistration {
    let users = move |config_map: &CachedObject| {
        let users = plugins.store().list().into_iter().filter(|obj| {
            let Ok(plugin) = serde_json::from_slice::<WasmPlugin>(obj.json()) else { return false };
            plugin.spec.reads_config_map(config_map.name())
        });
        users.map(|obj| obj.name().to_owned()).collect::<Vec<_>>()
    };
    modules.add_event_handler(Enqueue::new(users, move |name| queue.add(name)))
}

/// The names of the WasmPlugins present when the source's caches synced that have not been
/// settled (applied, rejected, or given up on waiting for their caches) yet; the readiness
/// check passes once it is empty.
struct InitialPass {
    pending: parking_lot::Mutex<std::collections::HashSet<String>>,
    started: tokio::time::Instant,
    readiness: crate::admin::Readiness,
}

impl InitialPass {
    fn settle(&self, name: &str, next: Followup, sync_timeout: Duration) {
        if next == Followup::WaitForCaches && self.started.elapsed() < sync_timeout {
            return;
        }
        let mut pending = self.pending.lock();
        if pending.remove(name) && pending.is_empty() {
            self.readiness.set(READINESS_CHECK, true);
            tracing::info!("every WasmPlugin present at start has been applied or rejected");
        }
    }
}

/// Why a WasmPlugin's spec is not serving; `retry` when waiting may fix it by itself.
struct NotServing {
    reason: &'static str,
    message: String,
    retry: bool,
}

impl WasmPluginSource {
    /// A source applying WasmPlugins through `plugins`; module ConfigMaps are read from
    /// `module_namespace` only.
    /// The readiness check `wasmplugins` fails from here until [`run`](Self::run) has either
    /// synced its caches or found that the CRD is not installed.
    pub fn new(plugins: LoadedPlugins, client: Client, module_namespace: impl Into<String>) -> Self {
        plugins.context().readiness.set(READINESS_CHECK, false);
        let events = crate::event_sink::EventSink::new(crate::identity::Identities::host(client.clone()));
        let (module_namespace, selector, evented) = (module_namespace.into(), None, Default::default());
        let puller = crate::hotload::oci::Puller::new(&Default::default());
        let registries = crate::hotload::oci::Registries::new(puller, client.clone(), module_namespace.clone());
        let (resolved, oci_refresh) = (Default::default(), oci::DEFAULT_REFRESH);
        Self { plugins, client, module_namespace, selector, events, evented, registries, resolved, oci_refresh }
    }

    /// Pull OCI modules with these options (disk cache, CA bundle, plain-HTTP registries).
    #[must_use]
    pub fn oci(self, options: &crate::hotload::oci::Options) -> Self {
        self.puller(crate::hotload::oci::Puller::new(options))
    }

    /// Pull OCI modules with `puller` (shared with the directory source: one per-registry limit
    /// and one disk cache for the host).
    #[must_use]
    pub fn puller(mut self, puller: crate::hotload::oci::Puller) -> Self {
        self.registries =
            crate::hotload::oci::Registries::new(puller, self.client.clone(), self.module_namespace.clone());
        self
    }

    /// Resolve unpinned OCI tags again this often unless a WasmPlugin says otherwise.
    #[must_use]
    pub fn oci_refresh(mut self, every: Duration) -> Self {
        self.oci_refresh = every;
        self
    }

    /// Serve only the WasmPlugins matching this label selector (several hosts can split them).
    pub fn selector(mut self, selector: &str) -> Self {
        self.selector = Some(selector.to_owned());
        self
    }

    /// Runs until `shutdown`. Waits for the WasmPlugin CRD if it is not installed yet: meanwhile
    /// there is nothing to serve, so its readiness check passes; it fails while the API server
    /// cannot be asked, and once the CRD is found, until the caches have synced and every
    /// WasmPlugin present then has been applied or rejected, and those that loaded have synced
    /// their caches (or have waited for them for the sync timeout; their status says why).
    pub async fn run(self, shutdown: CancellationToken) {
        let readiness = self.plugins.context().readiness.clone();
        let factory = self.plugins.context().factory.clone();
        let mut notice = CrdNotice::default();
        let plugins = loop {
            let params = InformerParams::default().labels(self.selector.as_deref().unwrap_or_default());
            match factory.informer(&gvk(), params).await {
                Ok(informer) => {
                    readiness.set(READINESS_CHECK, false);
                    if notice.said_anything() {
                        tracing::info!("WasmPlugin CRD is served now; watching WasmPlugin objects");
                    }
                    break informer;
                }
                Err(err) => {
                    let absent = crd_absent(&err);
                    readiness.set(READINESS_CHECK, absent);
                    if notice.is_news(absent) {
                        if absent {
                            tracing::info!(
                                "WasmPlugin CRD is not installed: serving the plugin directory only; \
                                 WasmPlugin objects are watched once the CRD appears \
                                 (--wasm-plugins=false turns this off)"
                            );
                        } else {
                            tracing::warn!(error = %err, "cannot ask for the WasmPlugin CRD; retrying every 10s");
                        }
                    } else {
                        tracing::debug!(error = %err, "WasmPlugin CRD still not served; retrying in 10s");
                    }
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    }
                }
            }
        };
        let params = InformerParams::default().namespace(&self.module_namespace);
        let modules = match factory.informer(&GroupVersionKind::gvk("", "v1", "ConfigMap"), params).await {
            Ok(informer) => informer,
            Err(err) => {
                tracing::error!(error = %err, namespace = %self.module_namespace, "cannot watch module ConfigMaps");
                return;
            }
        };
        let queue: WorkQueue<String> = WorkQueue::new(QueueConfig::default().name("wasmplugins"));
        let _registrations =
            [plugin_trigger(&plugins, queue.clone()), module_trigger(&modules, plugins.clone(), queue.clone())];
        let refusals = self.plugins.runtime().refusals();
        refusals::refusal_trigger(refusals, plugins.clone(), queue.clone(), RBAC_RECHECK, shutdown.clone());
        for informer in [&plugins, &modules] {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = informer.wait_for_sync() => {}
            }
        }
        let initial = Arc::new(InitialPass {
            pending: parking_lot::Mutex::new(plugins.store().list().iter().map(|o| o.name().to_owned()).collect()),
            started: tokio::time::Instant::now(),
            readiness: readiness.clone(),
        });
        if initial.pending.lock().is_empty() {
            readiness.set(READINESS_CHECK, true);
        }
        tracing::info!(namespace = %self.module_namespace, "applying WasmPlugin objects");
        let stop = queue.clone();
        let this = Arc::new(self);
        tokio::spawn(async move {
            shutdown.cancelled().await;
            stop.shut_down();
        });
        // Only the leader writes status (followers load the same versions, but their revision
        // counters are their own); a new leader reports every object afresh.
        let (leader, requeue, all) = (this.plugins.context().leader.clone(), queue.clone(), plugins.clone());
        if !leader.is_leader() {
            tokio::spawn(async move {
                leader.leading().await;
                for key in all.store().list_keys() {
                    requeue.add(key);
                }
            });
        }
        let sync_timeout = this.plugins.options().sync_timeout;
        let worker = |_| {
            let (this, queue, plugins, modules, initial) =
                (this.clone(), queue.clone(), plugins.clone(), modules.clone(), initial.clone());
            async move {
                let (this, plugins, modules, initial) = (&this, &plugins, &modules, &initial);
                crate::queue::run(&queue, move |name| async move {
                    let followup = this.reconcile(&name, plugins, modules).await;
                    initial.settle(&name, followup, sync_timeout);
                    followup.next()
                })
                .await;
            }
        };
        futures::future::join_all((0..WORKERS).map(worker)).await;
    }

    /// Applies one WasmPlugin; says what to do with its name next.
    async fn reconcile(&self, name: &str, plugins: &Informer, modules: &Informer) -> Followup {
        let Some(obj) = plugins.store().get(None, name) else {
            self.forget_oci(name);
            self.plugins.conditions(name, None);
            self.plugins.remove(name, &Origin::WasmPlugin).await;
            return Followup::Done;
        };
        let plugin = match serde_json::from_slice::<WasmPlugin>(obj.json()) {
            Ok(p) => p,
            Err(e) => {
                let problem = NotServing { reason: "InvalidSpec", message: e.to_string(), retry: false };
                return self.report(name, None, Err(problem), None).await;
            }
        };
        if plugin.spec.paused {
            self.plugins.remove(name, &Origin::WasmPlugin).await;
            let problem = NotServing { reason: "Paused", message: "spec.paused is true".into(), retry: false };
            return self.report(name, Some(&plugin), Err(problem), None).await;
        }
        let result = match self.module(name, &plugin, modules).await {
            Err(problem) => Err(problem),
            Ok(None) => Ok(()),
            Ok(Some(wasm)) => {
                let desired = Desired {
                    name: name.to_owned(),
                    origin: Origin::WasmPlugin,
                    wasm,
                    config: plugin.spec.plugin_config(),
                };
                self.plugins.apply(desired).await.map(|_| ()).map_err(|e| NotServing {
                    reason: e.reason(),
                    message: format!("{e:#}"),
                    retry: e.is_transient(),
                })
            }
        };
        if result.is_ok() {
            // Rights the identity lacked may have been granted since the version loaded.
            self.plugins.review_again(name).await;
        }
        let canary = self.canary(name, &plugin, modules).await;
        self.report(name, Some(&plugin), result, canary).await
    }

    /// What the version serving for `name` waits for, as a status message; `None` once its
    /// caches have synced (or nothing serves).
    async fn waiting_for(&self, name: &str) -> Option<String> {
        let unsynced = self.plugins.unsynced(name).await?;
        (!unsynced.is_empty()).then(|| unsynced.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
    }

    /// The module's bytes. A URL module already serving with this spec is not downloaded again.
    async fn module(&self, name: &str, plugin: &WasmPlugin, modules: &Informer) -> Result<Option<Module>, NotServing> {
        let module = &plugin.spec.module;
        if let Some(oci) = &module.oci {
            return self.oci_module(name, plugin, oci).await;
        }
        if let Some(url) = &module.url
            && self.plugins.serves(name, &url.sha256, &plugin.spec.plugin_config()).await
        {
            return Ok(None);
        }
        self.module_bytes(module, plugin.spec.engine.is_some(), modules).await.map(Some)
    }

    /// The bytes of `module`, from its ConfigMap, URL or registry (a canary's: not remembered
    /// for the status); of a plugin given as `source` (its spec names an engine), the bundle of
    /// its ConfigMap's files.
    async fn module_bytes(
        &self,
        module: &ModuleSource,
        source: bool,
        modules: &Informer,
    ) -> Result<Module, NotServing> {
        if source && module.config_map.is_none() {
            return Err(NotServing {
                reason: "InvalidSpec",
                message: "a plugin given as source (spec.engine) comes from a ConfigMap: set spec.module.configMap"
                    .into(),
                retry: false,
            });
        }
        match (&module.config_map, &module.url, &module.oci) {
            (None, None, Some(oci)) => self.oci_bytes(oci).await,
            (Some(config_map), None, None) => self.config_map_module(config_map, source, modules).await,
            (None, Some(url), None) => {
                match super::fetch::fetch(&url.url, &url.sha256, FETCH_TIMEOUT).await {
                    // Checked against the pin: the pin is its hash.
                    Ok(bytes) => Ok(Module::digested(bytes, &url.sha256)),
                    Err(e) => {
                        let reason = match e {
                            super::fetch::FetchError::DigestMismatch { .. } => "DigestMismatch",
                            _ => "FetchFailed",
                        };
                        // A wrong digest will not fix itself; a network error may.
                        Err(NotServing { reason, message: e.to_string(), retry: reason == "FetchFailed" })
                    }
                }
            }
            _ => Err(NotServing {
                reason: "InvalidSpec",
                message: "set exactly one of spec.module.configMap, spec.module.url and spec.module.oci".into(),
                retry: false,
            }),
        }
    }

    /// The component in `module`'s ConfigMap, or (`source`) the bundle of the source files there.
    async fn config_map_module(
        &self,
        module: &ConfigMapModule,
        source: bool,
        modules: &Informer,
    ) -> Result<Module, NotServing> {
        let missing = |what: String| NotServing { reason: "ModuleNotFound", message: what, retry: true };
        let named = format!("ConfigMap {}/{}", self.module_namespace, module.name);
        let obj = modules
            .store()
            .get(Some(&self.module_namespace), &module.name)
            .ok_or_else(|| missing(format!("{named} not found")))?;
        let config_map: ConfigMap = serde_json::from_slice(obj.json()).map_err(|e| missing(e.to_string()))?;
        let (bytes, what) = match (source, &module.key) {
            (false, None) => {
                return Err(NotServing {
                    reason: "InvalidSpec",
                    message: "a component is one key of its ConfigMap's binaryData: set spec.module.configMap.key"
                        .into(),
                    retry: false,
                });
            }
            (false, Some(key)) => {
                let bytes = config_map.binary_data.and_then(|mut d| d.remove(key));
                let bytes = bytes.ok_or_else(|| missing(format!("{named} has no binaryData key `{key}`")))?;
                (bytes.0, format!("{named} key `{key}`"))
            }
            (true, key) => {
                let files = source_files(config_map, key.as_deref());
                if files.is_empty() {
                    let keys = key.as_ref().map_or("a key".to_owned(), |k| format!("key `{k}`"));
                    return Err(missing(format!("{named} has no {keys} in data or binaryData: the plugin's source")));
                }
                (crate::plugin::source::bundle(&files), format!("{named}'s source"))
            }
        };
        let module_hash = Module::hash(bytes).await;
        if let Some(pinned) = &module.sha256 {
            let got = module_hash.sha256();
            if got != pinned.to_ascii_lowercase() {
                // Not retried: a change to the ConfigMap or the WasmPlugin queues it again.
                return Err(NotServing {
                    reason: "DigestMismatch",
                    message: format!("{what} has sha256 {got}, but the WasmPlugin pins {pinned}"),
                    retry: false,
                });
            }
        }
        Ok(module_hash)
    }

    /// Writes the status for `result`; says what to do next.
    async fn report(
        &self,
        name: &str,
        plugin: Option<&WasmPlugin>,
        result: Result<(), NotServing>,
        canary_error: Option<String>,
    ) -> Followup {
        let serving = self.plugins.serving(name).await;
        let waiting = match (&result, &serving) {
            (Ok(()), Some(_)) => self.waiting_for(name).await,
            _ => None,
        };
        let generation = plugin.and_then(|p| p.meta().generation);
        let old = plugin.and_then(|p| p.status.clone()).unwrap_or_default();
        let cond = |type_: &str, ok: bool, reason: &str, message: &str| {
            condition(&old.conditions, type_, ok, reason, message, generation)
        };
        let (status, retry) = match (&result, &serving) {
            (Ok(()), Some(_)) if waiting.is_some() => {
                let waiting = waiting.as_deref().unwrap_or_default();
                (
                    vec![
                        cond("Loaded", true, "Loaded", "the latest spec is loaded"),
                        cond("Ready", false, "CachesNotSynced", waiting),
                        cond("Degraded", true, "CachesNotSynced", waiting),
                    ],
                    false,
                )
            }
            (Ok(()), _) => (
                vec![
                    cond("Loaded", true, "Loaded", "the latest spec serves"),
                    cond("Ready", true, "Serving", ""),
                    cond("Degraded", false, "AsExpected", ""),
                ],
                false,
            ),
            (Err(p), Some(s)) => (
                vec![
                    cond("Loaded", true, "PreviousVersionServing", &format!("revision {} keeps serving", s.revision)),
                    cond("Ready", true, "Serving", ""),
                    cond("Degraded", true, p.reason, &p.message),
                ],
                p.retry,
            ),
            (Err(p), None) => (
                vec![
                    cond("Loaded", false, p.reason, &p.message),
                    cond("Ready", false, p.reason, &p.message),
                    cond("Degraded", p.reason != "Paused", p.reason, &p.message),
                ],
                p.retry,
            ),
        };
        let mut status = status;
        if let Some(split) = serving.as_ref().and_then(|s| s.split.as_ref()) {
            let (ok, reason, message) = split.condition();
            status.push(cond("Sharded", ok, reason, &message));
        }
        // A request the API server refused at run time (since the last report) says the same as
        // a right the review found missing, with the request: the identity lacks a right, or an
        // admission policy refuses it.
        let taken = serving.as_ref().map(|_| self.plugins.runtime().refusals().take(name)).unwrap_or_default();
        let refused = taken.forbidden;
        let missing = serving.as_ref().and_then(|s| s.rbac_missing.clone());
        match (&refused, &missing) {
            (Some(refused), missing) => {
                let reviewed =
                    missing.as_ref().filter(|m| !m.is_empty()).map(|m| format!("; lacking: {}", m.join("; ")));
                let message = format!("{refused}{}", reviewed.unwrap_or_default());
                status.push(cond("RBACMissing", true, "APIServerForbidden", &message));
            }
            (None, Some(missing)) => {
                let lacking = !missing.is_empty();
                let reason = if lacking { "RBACMissing" } else { "AsExpected" };
                status.push(cond("RBACMissing", lacking, reason, &missing.join("; ")));
            }
            (None, None) => {}
        }
        // A write refused because another plugin made the object (since the last report): only
        // an operator's handover ends it, so the status names the holder and the command.
        if serving.is_some() {
            status.push(match &taken.held {
                Some(held) => cond("NamesHeld", true, "MadeByAnotherPlugin", held),
                None => cond("NamesHeld", false, "AsExpected", ""),
            });
        }
        let status = WasmPluginStatus {
            conditions: status,
            observed_generation: generation,
            loaded_sha256: serving.as_ref().map(|s| s.sha256.clone()),
            revision: serving.as_ref().map(|s| s.revision),
            last_error: result.as_ref().err().map(|p| p.message.clone()).or_else(|| waiting.clone()),
            canary: None,
            oci: self.oci_status(name, plugin),
        };
        self.plugins.conditions(name, Some(status.conditions.as_slice()));
        let canary = self.plugins.canary(name).await;
        let wants_canary = plugin.is_some_and(|p| p.spec.canary.is_some());
        let status =
            WasmPluginStatus { canary: wants_canary.then(|| canary_status(canary.as_ref(), canary_error)), ..status };
        // Reported again after a while, so that a condition raised by a refusal clears once the
        // refusals stop.
        let lacking = refused.is_some()
            || taken.held.is_some()
            || serving.as_ref().and_then(|s| s.rbac_missing.as_ref()).is_some_and(|m| !m.is_empty());
        let next = match (retry, &waiting) {
            (_, Some(_)) => Followup::WaitForCaches,
            (true, None) => Followup::Retry,
            (false, None) if canary.is_some() && wants_canary => Followup::Canary,
            (false, None) if lacking => Followup::RecheckRbac,
            (false, None) => self.refresh(plugin).map_or(Followup::Done, Followup::Refresh),
        };
        if !self.plugins.context().leader.is_leader() {
            return next;
        }
        if let (true, Some((sha256, report))) = (wants_canary, &canary) {
            self.announce(name, sha256, report);
        }
        // A canary's poll writes only what changed.
        if wants_canary && plugin.and_then(|p| p.status.as_ref()) == Some(&status) {
            return next;
        }
        let api: Api<WasmPlugin> = Api::all(self.client.clone());
        let patch = json!({ "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin", "status": status });
        let params = PatchParams::apply(STATUS_MANAGER).force();
        if let Err(err) = api.patch_status(name, &params, &Patch::Apply(&patch)).await {
            // Gone already, or the API server is away: the next event or retry writes it.
            tracing::warn!(plugin = name, error = %err, "cannot write WasmPlugin status");
            return if plugin.is_some() && next == Followup::Done { Followup::Retry } else { next };
        }
        next
    }
}

/// Whether discovery answered that the CRD is not installed (rather than not answering).
/// What was last logged about the WasmPlugin CRD while waiting for it, so a cluster without the
/// CRD gets one line instead of one per retry; a change (absent ↔ unreachable) is logged again.
#[derive(Debug, Default)]
struct CrdNotice(Option<bool>);

impl CrdNotice {
    /// Whether a failed attempt (`absent`: the CRD is not installed; else the API server could
    /// not be asked) is news worth a line; records it.
    fn is_news(&mut self, absent: bool) -> bool {
        self.0.replace(absent) != Some(absent)
    }

    /// Whether any failed attempt was logged.
    fn said_anything(&self) -> bool {
        self.0.is_some()
    }
}

/// The source files in `config_map`: the one of `key`, else every key of `data` and
/// `binaryData`, each a file named by its key.
fn source_files(config_map: ConfigMap, key: Option<&str>) -> Vec<crate::plugin::source::SourceFile> {
    let text = config_map.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes()));
    let binary = config_map.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0));
    let files = text.chain(binary).filter(|(k, _)| key.is_none_or(|key| key == k));
    files.map(|(path, contents)| crate::plugin::source::SourceFile { path, contents }).collect()
}

fn crd_absent(err: &crate::informer::Error) -> bool {
    let crate::informer::Error::KindNotFound { source, .. } = err else { return false };
    match source.as_ref() {
        kube::Error::Api(status) => status.code == 404,
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// A condition, keeping its transition time when its status did not change.
fn condition(
    old: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let unchanged = old.iter().find(|c| c.type_ == type_ && c.status == status);
    let now = || k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap_or_default();
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: unchanged
            .and_then(|c| c.last_transition_time.clone())
            .or_else(|| Some(now().to_string())),
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_every_key_of_its_config_map_or_the_one_named() {
        let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
            "data": {"plugin.py": "import helpers\n", "helpers.py": "X = 1\n"},
            "binaryData": {"data.bin": "AAE="},
        }))
        .unwrap();
        let paths =
            |files: Vec<crate::plugin::source::SourceFile>| files.into_iter().map(|f| f.path).collect::<Vec<_>>();
        assert_eq!(paths(source_files(config_map.clone(), None)), ["helpers.py", "plugin.py", "data.bin"]);
        let one = source_files(config_map.clone(), Some("plugin.py"));
        assert_eq!((one[0].path.as_str(), one[0].contents.as_slice()), ("plugin.py", b"import helpers\n".as_slice()));
        assert!(source_files(config_map, Some("absent.py")).is_empty());
    }

    #[test]
    fn a_missing_crd_is_logged_once_and_again_only_when_the_reason_changes() {
        let mut notice = CrdNotice::default();
        assert!(!notice.said_anything());
        assert!(notice.is_news(true), "the first miss is news");
        assert!((0..23).all(|_| !notice.is_news(true)), "retries with the CRD still absent are not");
        assert!(notice.is_news(false), "the API server becoming unreachable is news");
        assert!(!notice.is_news(false));
        assert!(notice.is_news(true));
        assert!(notice.said_anything());
    }
}
