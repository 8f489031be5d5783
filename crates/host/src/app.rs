//! The host application: one kube client, one metrics registry, one wasm runtime, one shared
//! informer factory, and a controller per plugin from the plugin directory and WasmPlugin objects.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus::Registry;

use crate::admin::Readiness;
use crate::breaker::{self, Breaker, BreakerMetrics, BreakerWriter};
use crate::controller::{self, ControllerMetrics};
use crate::hotload::{DirectorySource, HotloadMetrics, LoadedPlugins, Options, WasmPluginSource};
pub use crate::hotload::{PluginFile, plugin_files, read_config};
use crate::identity::Identities;
use crate::informer::{Discovery, SharedInformerFactory};
use crate::leader::{self, LeaderGate};
use crate::plugin::api::{ApiWriter, FIELD_MANAGER_PREFIX};
use crate::plugin::metrics::PluginMetrics;
use crate::plugin::protected::Protected;
use crate::plugin::{Runtime, RuntimeConfig};
use crate::queue::QueueMetrics;
use crate::rbac::Identity;
use crate::shard::ShardGate;
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

    /// The host's own client (its Secrets, its status writes).
    pub fn client(&self) -> &Client {
        &self.client
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
