//! The host application: one kube client, one metrics registry, one wasm runtime, one shared
//! informer factory, and a controller per plugin from the plugin directory and WasmPlugin objects.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Readiness};
use crate::breaker::{self, Breaker, BreakerMetrics, BreakerWriter};
use crate::cli::RunArgs;
use crate::controller::{self, ControllerMetrics};
use crate::hotload::{DirectorySource, HotloadMetrics, LoadedPlugins, Options, WasmPluginSource};
pub use crate::hotload::{PluginFile, plugin_files, read_config};
use crate::identity::Identities;
use crate::informer::{Discovery, SharedInformerFactory};
use crate::leader::{self, LeaderGate};
use crate::plugin::host::{ApiWriter, FIELD_MANAGER_PREFIX};
use crate::plugin::metrics::PluginMetrics;
use crate::plugin::protected::Protected;
use crate::plugin::throttle::WriteRate;
use crate::plugin::{Runtime, RuntimeConfig};
use crate::queue::QueueMetrics;
use crate::rbac::Identity;
use crate::shard::{self, ShardGate};
use crate::writer::KubeWriter;
use crate::writer::fair::{self, FairMetrics, Scheduler};

/// A kube client from `--kubeconfig`/`--context`, else the usual inference (KUBECONFIG,
/// ~/.kube/config, in-cluster service account).
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Client> {
    Ok(Client::try_from(config(kubeconfig, context).await?)?)
}

/// The kube config [`client`] is made from.
pub async fn config(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions { context: context.map(Into::into), ..Default::default() };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(config)
}

/// A client for plugins' requests made from `config` without kube's retry layer (which retries
/// 429, 503 and 504 itself, a 429 for as long as Retry-After says, holding the request's write
/// seat): the write scheduler retries 429s, and the breaker handles 5xx.
pub fn plugin_client(mut config: kube::Config) -> anyhow::Result<Client> {
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

/// The engine settings of `App::new`/`with_options`: defaults, plus the compile cache if any.
fn runtime_config(compile_cache: Option<&Path>) -> RuntimeConfig {
    let config = RuntimeConfig::default();
    match compile_cache {
        Some(dir) => config.cache_dir(dir),
        None => config,
    }
}

/// The running host: shared parts plus the [`LoadedPlugins`] of its plugins.
pub struct App {
    plugins: LoadedPlugins,
    registry: Registry,
    client: Client,
    protected: Protected,
}

/// What [`App::assemble`] is handed: the plugins' writer, the discovery cache it resolves kinds
/// with, and the registry its metrics went to.
struct Parts {
    writer: Arc<dyn ApiWriter>,
    discovery: Discovery,
    registry: Registry,
}

impl App {
    /// Builds the shared parts on `client` as `kubewasm dev` runs them: each plugin's requests
    /// sent as its own ServiceAccount, whose RBAC the host makes with `client`'s (a cluster
    /// admin's) rights; default hot-load options otherwise.
    pub fn new(client: Client, compile_cache: Option<&Path>, max_retries: Option<u32>) -> anyhow::Result<Self> {
        let identity = Identity { namespace: leader::default_namespace(), host_service_account: "kubewasm".into() };
        let options = Options { identity: Some(identity), provision_rbac: true, ..Options::default() };
        Self::with_options(client, compile_cache, max_retries, options)
    }

    /// Builds the shared parts on `client`.
    pub fn with_options(
        client: Client,
        compile_cache: Option<&Path>,
        max_retries: Option<u32>,
        options: Options,
    ) -> anyhow::Result<Self> {
        Self::with_runtime(client, runtime_config(compile_cache), max_retries, options)
    }

    /// Builds the shared parts on `client`, with the wasm engine configured by `runtime_config`
    /// (its metrics go to the app's registry).
    pub fn with_runtime(
        client: Client,
        runtime_config: RuntimeConfig,
        max_retries: Option<u32>,
        options: Options,
    ) -> anyhow::Result<Self> {
        Self::with_plugin_client(client.clone(), client, runtime_config, max_retries, options)
    }

    /// As [`App::with_runtime`], with plugins' requests sent through `plugin_client` (see
    /// [`plugin_client`]).
    pub fn with_plugin_client(
        client: Client,
        plugin_client: Client,
        runtime_config: RuntimeConfig,
        max_retries: Option<u32>,
        options: Options,
    ) -> anyhow::Result<Self> {
        let registry = Registry::new();
        let identities = Identities::host(client.clone()).sending_through(plugin_client);
        let identities = match &options.identity {
            Some(identity) => identities.impersonating(&identity.namespace),
            None => identities,
        };
        let discovery = Discovery::new(client.clone());
        let scheduler = Scheduler::new(fair::Config::default().max_seats(options.write_seats))
            .metrics(FairMetrics::register(&registry)?);
        let writer = KubeWriter::with_identities(identities).discovery(discovery.clone()).scheduler(scheduler);
        registry.register(Box::new(writer.events_dropped()))?;
        let parts = Parts { writer: Arc::new(writer), discovery, registry };
        Self::assemble(client, runtime_config, max_retries, options, parts)
    }

    /// Builds the shared parts on `client`, with plugins writing through `writer` (tests wrap
    /// the [`KubeWriter`] to inject faults).
    pub fn with_writer(
        client: Client,
        compile_cache: Option<&Path>,
        max_retries: Option<u32>,
        options: Options,
        writer: Arc<dyn ApiWriter>,
    ) -> anyhow::Result<Self> {
        let parts = Parts { writer, discovery: Discovery::new(client.clone()), registry: Registry::new() };
        Self::assemble(client, runtime_config(compile_cache), max_retries, options, parts)
    }

    /// The one place the parts are put together: plugin writes go through the API-server
    /// breaker, kinds are resolved by one discovery cache, every metric goes into the registry.
    fn assemble(
        client: Client,
        runtime_config: RuntimeConfig,
        max_retries: Option<u32>,
        options: Options,
        parts: Parts,
    ) -> anyhow::Result<Self> {
        let Parts { writer, discovery, registry } = parts;
        let runtime_config = runtime_config.metrics(PluginMetrics::register(&registry)?);
        let protected = runtime_config.protected_of().clone();
        protected.namespace(&leader::default_namespace(), "is the host's own namespace");
        let breaker_config = breaker::Config::default().write_timeout(runtime_config.write_timeout_of());
        let breaker = Breaker::kube(client.clone(), breaker_config, Some(BreakerMetrics::register(&registry)?));
        let writer = Arc::new(BreakerWriter::new(writer, breaker.clone()));
        let ctx = controller::Context {
            // Each cached object keeps its plugins' own managedFields entries, which elision of
            // applies that would change nothing reads.
            factory: SharedInformerFactory::new(client.clone(), &registry)?
                .with_discovery(discovery)
                .keep_managers(FIELD_MANAGER_PREFIX),
            client: client.clone(),
            metrics: ControllerMetrics::register(&registry)?,
            queue_metrics: QueueMetrics::register(&registry)?,
            readiness: Readiness::default(),
            max_retries,
            leader: LeaderGate::default(),
            shard: ShardGate::default(),
            breaker,
        };
        let plugins = LoadedPlugins::new(
            ctx,
            Runtime::new(runtime_config)?,
            writer,
            options,
            HotloadMetrics::register(&registry)?,
        );
        Ok(Self { plugins, registry, client, protected })
    }

    /// The metrics registry (served on /metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Readiness checks (served on /readyz).
    pub fn readiness(&self) -> &Readiness {
        &self.plugins.context().readiness
    }

    /// Host objects no plugin may write, whatever its grants; rules added here apply to every
    /// plugin at once.
    pub fn protected(&self) -> &Protected {
        &self.protected
    }

    /// The plugins.
    pub fn plugins(&self) -> &LoadedPlugins {
        &self.plugins
    }

    /// Gates the workers of controllers started from now on (leader election); call before
    /// making sources, which share the plugins.
    pub fn set_leader_gate(&mut self, gate: LeaderGate) {
        self.plugins.set_leader_gate(gate);
    }

    /// Shards controllers started from now on by `gate` (see [`crate::shard`]); call before
    /// making sources, which share the plugins.
    pub fn set_shard_gate(&mut self, gate: ShardGate) {
        self.plugins.set_shard_gate(gate);
    }

    /// Loads (or swaps in) one plugin file as the directory source does, canary included. On
    /// failure the plugin is reported (log, metric) and the host goes on without it.
    pub async fn add_plugin(&mut self, file: &PluginFile) -> anyhow::Result<()> {
        crate::hotload::load_file(&self.plugins, file).await?;
        Ok(())
    }

    /// A source for the plugin directory `dir`.
    pub fn directory_source(&self, dir: &Path) -> DirectorySource {
        DirectorySource::new(dir, self.plugins.clone())
    }

    /// A source for WasmPlugin objects whose modules live in `module_namespace`, which becomes
    /// protected from plugin writes.
    pub fn wasm_plugin_source(&self, module_namespace: &str) -> WasmPluginSource {
        self.protected.module_namespace(module_namespace);
        WasmPluginSource::new(self.plugins.clone(), self.client.clone(), module_namespace)
    }

    /// Stops every controller, letting in-flight reconciles finish within `grace`.
    pub async fn shut_down(self, grace: Duration) -> bool {
        self.plugins.shut_down(grace).await
    }
}

/// This process's binary, for child processes (what `/proc/self/exe` points to); `None`, logged,
/// when it cannot be found, e.g. without a mounted /proc.
fn own_executable() -> Option<std::path::PathBuf> {
    match std::env::current_exe() {
        Ok(exe) => Some(exe),
        Err(error) => {
            tracing::warn!(%error, "cannot find the host's own executable: plugins compile inside the host");
            None
        }
    }
}

/// The host's own share of a memory-limited container: a quarter of the limit, at least this.
const HOST_MEMORY_SHARE: u64 = 128 << 20;

/// The plugins' memory budget in a memory-limited container: its cgroup's limit less the host's
/// own share; `None` without a limit. Hand-written: reading one cgroup file (v2, else v1) needs
/// no crate.
fn container_memory_budget() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
    let limit = read("/sys/fs/cgroup/memory.max").or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))?;
    budget_within(limit)
}

/// What plugins may reserve within a container limit of `limit` bytes; `None` for "no limit"
/// (cgroup v1 reports one as a number near `i64::MAX`).
fn budget_within(limit: u64) -> Option<u64> {
    (limit < 1 << 50).then(|| limit.saturating_sub((limit / 4).max(HOST_MEMORY_SHARE)))
}

/// `kubewasm run`: serve until `shutdown` is cancelled.
pub async fn run(args: RunArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let config = config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let client = Client::try_from(config.clone())?;
    let plugin_client = plugin_client(config)?;
    let identity = args.impersonate_plugins.then(|| Identity {
        namespace: leader::default_namespace(),
        host_service_account: args.host_service_account.clone(),
    });
    let options = Options {
        requeue_on_swap: args.requeue_on_swap,
        grace: Duration::from_secs(args.shutdown_grace_seconds),
        identity,
        provision_rbac: args.provision_plugin_rbac,
        elide_unchanged_writes: args.elide_unchanged_writes,
        write_seats: args.write_seats as usize,
        ..Options::default()
    };
    let mut runtime = RuntimeConfig::default()
        .pool_instances(args.pool_instances)
        .memory_budget(args.plugin_memory_budget.or_else(container_memory_budget))
        .max_concurrent_cap(args.max_concurrent_cap)
        .write_rate(WriteRate { qps: args.plugin_write_qps, burst: args.plugin_write_burst })
        .write_timeout(Duration::from_secs(args.plugin_write_timeout_seconds))
        .compiler(args.compiler.unwrap_or_default());
    if let Some(dir) = &args.compile_cache {
        runtime = runtime.cache_dir(dir);
        if let Some(exe) = args.compile_in_child.then(own_executable).flatten() {
            runtime = runtime.compile_in_child(exe);
        }
    }
    let mut app = App::with_plugin_client(client.clone(), plugin_client, runtime, args.max_retries, options)?;
    // The leader's and the shard members' Leases, whether or not this replica elects or shards:
    // another replica of the same group may.
    let lease_namespace = args.leader_election_namespace.clone().unwrap_or_else(leader::default_namespace);
    app.protected().leases(&lease_namespace, &args.leader_election_id);
    let mut election =
        args.leader_config().map(|c| leader::Election::start(client.clone(), c, app.registry())).transpose()?;
    if let Some(election) = &election {
        app.set_leader_gate(election.gate());
    }
    let gate = ShardGate::sharded();
    let mut membership =
        args.shard_config().map(|c| shard::Membership::start(client, c, gate.clone(), app.registry())).transpose()?;
    if membership.is_some() {
        app.set_shard_gate(gate);
    }
    let router = admin::router(app.registry().clone(), app.readiness().clone());
    let (addr, admin_task) = admin::serve(args.admin_addr, router, shutdown.clone().cancelled_owned())
        .await
        .with_context(|| format!("cannot serve the admin endpoints on {} (--admin-addr)", args.admin_addr))?;
    tracing::info!(%addr, "admin server listening");
    // Both sources register their (failing) readiness checks before either starts, so /readyz
    // cannot pass between the directory's first pass and the WasmPlugin source's start.
    let oci = args.oci.options(args.compile_cache.as_deref()).context("reading --oci-ca-file")?;
    let oci_refresh = Duration::from_secs(args.oci.oci_refresh_seconds);
    let wasm_source = args.wasm_plugins.then(|| {
        let source = app.wasm_plugin_source(&args.module_namespace).oci(&oci).oci_refresh(oci_refresh);
        match &args.wasm_plugin_selector {
            Some(selector) => source.selector(selector),
            None => source,
        }
    });
    let directory = args.plugins.as_ref().map(|dir| (dir, app.directory_source(dir)));
    let mut sources = Vec::new();
    if let Some(source) = wasm_source {
        let stop = shutdown.clone();
        sources.push(tokio::spawn(async move {
            source.run(stop).await;
            Ok(())
        }));
    }
    if let Some((dir, mut source)) = directory {
        let changes = source.sync().await?;
        if changes.is_empty() {
            tracing::warn!(dir = %dir.display(), "no *.wasm plugins found");
        }
        if args.watch_plugins {
            let debounce = Duration::from_millis(args.reload_debounce_ms);
            sources.push(tokio::spawn(source.watch(debounce, shutdown.clone())));
        }
    }
    if let Some(election) = election.as_mut() {
        tokio::select! {
            () = shutdown.cancelled() => {}
            lost = election.lost() => exit_on_lost_leadership(&lost),
        }
    }
    if let Some(membership) = membership.as_mut() {
        tokio::select! {
            () = shutdown.cancelled() => {}
            lost = membership.lost() => exit_on_lost_leadership(&lost),
        }
    }
    shutdown.cancelled().await;
    // No new plugin versions after SIGTERM: stop the sources where they are (the plugins keeps
    // whatever serves, so nothing escapes the shutdown below).
    for source in &sources {
        source.abort();
    }
    for source in sources {
        if let Ok(Err(e)) = source.await {
            tracing::error!(error = format!("{e:#}"), "plugin source failed");
        }
    }
    // No new keys either: only the reconciles in flight may finish, within the grace period.
    // A leader keeps watching its lease meanwhile: once it is lost another replica may lead,
    // so nothing may be written any more.
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let drain = app.shut_down(grace);
    let finished = match (election.as_mut(), membership.as_mut()) {
        (Some(election), _) => tokio::select! {
            finished = drain => finished,
            lost = election.lost() => exit_on_lost_leadership(&lost),
        },
        (None, Some(membership)) => tokio::select! {
            finished = drain => finished,
            lost = membership.lost() => exit_on_lost_leadership(&lost),
        },
        (None, None) => drain.await,
    };
    if finished {
        tracing::info!("all in-flight reconciles finished; exiting");
    } else {
        tracing::warn!(?grace, "grace period over with reconciles still running; exiting");
    }
    if let Some(election) = election {
        let bound = Duration::from_secs(args.leader_election_renew_deadline_seconds);
        if tokio::time::timeout(bound, election.release()).await.is_err() {
            tracing::warn!(?bound, "could not release the leader lease in time; it will expire");
        }
    }
    if let Some(membership) = membership {
        let bound = Duration::from_secs(args.leader_election_renew_deadline_seconds);
        if tokio::time::timeout(bound, membership.leave()).await.is_err() {
            tracing::warn!(?bound, "could not leave the shard group in time; the Lease will expire");
        }
    }
    admin_task.await??;
    Ok(())
}

/// Exits at once, as controller-runtime does: no reconcile may run, and nothing may be written,
/// once another replica can lead; a restart campaigns afresh with warm-up.
fn exit_on_lost_leadership(lost: &leader::Error) -> ! {
    tracing::error!(error = %lost, "leader election lost; exiting");
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_get_a_containers_limit_less_the_hosts_share_and_no_budget_without_a_limit() {
        const MIB: u64 = 1 << 20;
        assert_eq!(budget_within(512 * MIB), Some(384 * MIB));
        assert_eq!(budget_within(4096 * MIB), Some(3072 * MIB));
        assert_eq!(budget_within(100 * MIB), Some(0), "a tiny container leaves plugins nothing");
        assert_eq!(budget_within(9_223_372_036_854_771_712), None, "cgroup v1's 'no limit'");
    }
}
