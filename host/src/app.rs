//! The host application: one kube client, one metrics registry, one wasm runtime, one shared
//! informer factory, and a controller per plugin in the plugin directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, Readiness};
use crate::cli::RunArgs;
use crate::controller::{self, Controller, ControllerMetrics, PluginCache};
use crate::informer::SharedInformerFactory;
use crate::leader::{self, LeaderGate};
use crate::plugin::metrics::PluginMetrics;
use crate::plugin::{PluginConfig, Runtime, RuntimeConfig};
use crate::queue::QueueMetrics;
use crate::writer::KubeWriter;

/// A plugin file found in the plugin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginFile {
    /// Plugin name: the file name without `.wasm`.
    pub name: String,
    /// The component.
    pub wasm: PathBuf,
    /// Its config file, if there is one (`<name>.yaml`, `.yml` or `.json`).
    pub config: Option<PathBuf>,
}

/// Every `*.wasm` in `dir`, sorted by name, with its config file.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PluginFile>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            let config = ["yaml", "yml", "json"].iter().map(|ext| path.with_extension(ext)).find(|p| p.is_file());
            found.push(PluginFile { name, wasm: path, config });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Reads a plugin's config file (default config when there is none).
pub fn read_config(file: &PluginFile) -> anyhow::Result<PluginConfig> {
    match &file.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            PluginConfig::from_yaml(&text).with_context(|| format!("in {}", path.display()))
        }
        None => Ok(PluginConfig::default()),
    }
}

/// A kube client from `--kubeconfig`/`--context`, else the usual inference (KUBECONFIG,
/// ~/.kube/config, in-cluster service account).
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Client> {
    let options = KubeConfigOptions { context: context.map(Into::into), ..Default::default() };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// The running host.
pub struct App {
    ctx: controller::Context,
    runtime: Runtime,
    writer: Arc<KubeWriter>,
    controllers: Vec<Controller>,
    registry: Registry,
    plugin_metrics: PluginMetrics,
}

impl App {
    /// Builds the shared parts on `client`.
    pub fn new(client: Client, compile_cache: Option<&Path>, max_retries: Option<u32>) -> anyhow::Result<Self> {
        let registry = Registry::new();
        let plugin_metrics = PluginMetrics::register(&registry)?;
        let mut runtime_config = RuntimeConfig::default().metrics(plugin_metrics.clone());
        if let Some(dir) = compile_cache {
            runtime_config = runtime_config.cache_dir(dir);
        }
        let ctx = controller::Context {
            factory: SharedInformerFactory::new(client.clone(), &registry)?,
            client: client.clone(),
            metrics: ControllerMetrics::register(&registry)?,
            queue_metrics: QueueMetrics::register(&registry)?,
            readiness: Readiness::default(),
            max_retries,
            leader: LeaderGate::default(),
        };
        Ok(Self {
            ctx,
            runtime: Runtime::new(runtime_config)?,
            writer: Arc::new(KubeWriter::new(client)),
            controllers: Vec::new(),
            registry,
            plugin_metrics,
        })
    }

    /// The metrics registry (served on /metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Readiness checks (served on /readyz).
    pub fn readiness(&self) -> &Readiness {
        &self.ctx.readiness
    }

    /// Gates the workers of controllers started from now on (leader election).
    pub fn set_leader_gate(&mut self, gate: LeaderGate) {
        self.ctx.leader = gate;
    }

    /// Loads one plugin and starts its controller. On failure the plugin is reported (log,
    /// metric, readiness) and the host goes on without it.
    pub async fn add_plugin(&mut self, file: &PluginFile) -> anyhow::Result<()> {
        let check = format!("plugin {}", file.name);
        self.ctx.readiness.set(&check, false);
        let result = self.load(file).await;
        match &result {
            Ok(()) => self.ctx.readiness.set(&check, true),
            Err(e) => {
                tracing::error!(plugin = %file.name, error = format!("{e:#}"), "plugin not loaded");
                if e.downcast_ref::<crate::plugin::LoadError>().is_none() {
                    self.plugin_metrics.load_error(&file.name, "wiring");
                }
            }
        }
        result
    }

    async fn load(&mut self, file: &PluginFile) -> anyhow::Result<()> {
        let config = read_config(file)?;
        let wasm: Arc<[u8]> =
            std::fs::read(&file.wasm).with_context(|| format!("reading {}", file.wasm.display()))?.into();
        let cache = Arc::new(PluginCache::new(&file.name));
        let plugin = self.runtime.load(&file.name, wasm, config, cache.clone(), self.writer.clone()).await?;
        let mut controller = Controller::build(&self.ctx, Arc::new(plugin), cache).await?;
        controller.start(self.ctx.readiness.clone());
        self.controllers.push(controller);
        Ok(())
    }

    /// Stops every controller, letting in-flight reconciles finish within `grace`.
    pub async fn shut_down(self, grace: Duration) -> bool {
        let stops = self.controllers.into_iter().map(|c| c.shut_down(grace));
        futures::future::join_all(stops).await.into_iter().all(|ok| ok)
    }
}

/// `kubewasm run`: serve until `shutdown` is cancelled.
pub async fn run(args: RunArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let mut app = App::new(client.clone(), args.compile_cache.as_deref(), args.max_retries)?;
    let mut election = leader::election(&args, client, app.registry())?;
    if let Some(election) = &election {
        app.set_leader_gate(election.gate());
    }
    let router = admin::router(app.registry().clone(), app.readiness().clone());
    let (addr, admin_task) = admin::serve(args.admin_addr, router, shutdown.clone().cancelled_owned()).await?;
    tracing::info!(%addr, "admin server listening");
    let files =
        plugin_files(&args.plugins).with_context(|| format!("reading plugin directory {}", args.plugins.display()))?;
    if files.is_empty() {
        tracing::warn!(dir = %args.plugins.display(), "no *.wasm plugins found");
    }
    for file in &files {
        let _ = app.add_plugin(file).await;
    }
    if let Some(election) = election.as_mut() {
        tokio::select! {
            () = shutdown.cancelled() => {}
            lost = election.lost() => {
                // controller-runtime exits at once too: no reconcile may run once another
                // replica can lead, and a restart campaigns afresh with warm-up.
                tracing::error!(error = %lost, "leader election lost; exiting");
                std::process::exit(1);
            }
        }
    }
    shutdown.cancelled().await;
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    if app.shut_down(grace).await {
        tracing::info!("all in-flight reconciles finished; exiting");
    } else {
        tracing::warn!(?grace, "grace period over with reconciles still running; exiting");
    }
    if let Some(election) = election {
        election.release().await;
    }
    admin_task.await??;
    Ok(())
}
