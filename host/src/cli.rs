//! Command line: `kubewasm run` and `kubewasm check`; every flag also reads a `KUBEWASM_*` variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

pub mod oci;

/// Runs Kubernetes controllers whose reconcile logic is a sandboxed WebAssembly component.
#[derive(Debug, Parser)]
#[command(name = "kubewasm", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers of every plugin in a directory against a cluster.
    Run(Box<RunArgs>),
    /// Load one plugin without a cluster and print its registration and effective grants.
    Check(CheckArgs),
    /// Print the least-privilege RBAC of one plugin's own identity (YAML): its ServiceAccount,
    /// the rules its effective grants need, and the host's right to impersonate it.
    Rbac(RbacArgs),
    /// Print the WasmPlugin CustomResourceDefinition (YAML).
    Crd,
    /// Run a plugin's reconciles without a cluster over objects from YAML files and print the
    /// writes and Events it would make (exits 1 when they differ from `--expect`).
    Test(TestArgs),
    /// Reconcile chosen keys once against a cluster, sending nothing, and write for each a
    /// fixture file (the objects it read, the writes it would make) that `kubewasm test` replays.
    Record(RecordArgs),
    /// Start a local control plane (etcd + kube-apiserver), write its kubeconfig and run the
    /// plugins of a directory on it with hot reload, until Ctrl-C.
    Dev(Box<DevArgs>),
    /// Create a plugin project outside this repository: build script, config with a settings
    /// schema, and an offline test that runs `kubewasm test` (cargo test, pytest, node --test).
    New(NewArgs),
    /// Push a component to an OCI registry as the standard wasm artifact and print its
    /// reference pinned by digest (what a WasmPlugin's `module.oci.ref` names).
    Push(crate::cli::oci::PushArgs),
    /// Write a new ECDSA P-256 key pair for `push --sign-key` (`<prefix>.key`) and a WasmPlugin's
    /// `module.oci.signature` (`<prefix>.pub`); cosign verifies with the same public key.
    GenerateKey(crate::cli::oci::GenerateKeyArgs),
    /// Compile one component (stdin) into a compile cache: what the host runs in a child process.
    #[command(name = kubewasm_host::plugin::compile_process::SUBCOMMAND, hide = true)]
    CompilePlugin(CompileArgs),
}

/// `kubewasm run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Plugin directory: each `<name>.wasm` is a plugin, configured by `<name>.yaml` beside it.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Watch the plugin directory and load, swap or unload plugins as its files change.
    #[arg(long, env = "KUBEWASM_WATCH_PLUGINS", default_value_t = true, action = ArgAction::Set)]
    pub watch_plugins: bool,
    /// Quiet time after the last change in the plugin directory before it is read (a file
    /// being copied in is not loaded half-written).
    #[arg(long, env = "KUBEWASM_RELOAD_DEBOUNCE_MS", default_value_t = 300)]
    pub reload_debounce_ms: u64,
    /// Load plugins from WasmPlugin objects (waits for the CRD if it is not installed).
    #[arg(long, env = "KUBEWASM_WASMPLUGINS", default_value_t = true, action = ArgAction::Set)]
    pub wasm_plugins: bool,
    /// Serve only the WasmPlugins with these labels (e.g. `shard=a`); default: all.
    #[arg(long, env = "KUBEWASM_WASM_PLUGIN_SELECTOR")]
    pub wasm_plugin_selector: Option<String>,
    /// Namespace of the ConfigMaps that hold WasmPlugin modules.
    #[arg(long, env = "KUBEWASM_MODULE_NAMESPACE", default_value = "kubewasm-system")]
    pub module_namespace: String,
    /// Registries of OCI modules.
    #[command(flatten)]
    pub oci: crate::cli::oci::OciArgs,
    /// Send each plugin's requests as its own ServiceAccount, `kubewasm-plugin-<name>` in the
    /// host's namespace (`Impersonate-User`), so RBAC bounds what it writes even where the host's
    /// checks would not (cached reads stay the host's); `kubewasm rbac` prints what each needs.
    /// On in deploy/base.
    #[arg(long, env = "KUBEWASM_IMPERSONATE_PLUGINS")]
    pub impersonate_plugins: bool,
    /// With --impersonate-plugins: make each plugin's ServiceAccount and RBAC with the host's
    /// own credentials when it loads. For `kubewasm dev` and tests, where the host is a cluster
    /// admin; never give a deployed host the rights this needs.
    #[arg(long, env = "KUBEWASM_PROVISION_PLUGIN_RBAC", requires = "impersonate_plugins")]
    pub provision_plugin_rbac: bool,
    /// The host's own ServiceAccount (in its namespace), named in the RBAC that lets it
    /// impersonate plugins.
    #[arg(long, env = "KUBEWASM_HOST_SERVICE_ACCOUNT", default_value = "kubewasm")]
    pub host_service_account: String,
    /// After a plugin swap, reconcile every object of its kind again with the new version.
    #[arg(long, env = "KUBEWASM_REQUEUE_ON_SWAP", default_value_t = true, action = ArgAction::Set)]
    pub requeue_on_swap: bool,
    /// Answer a plugin's server-side apply from the cache, sending nothing, when it would change
    /// nothing (its values are all in the object and its field manager owns exactly the fields
    /// it names); a plugin's `elideUnchangedWrites: false` turns it off for that plugin.
    #[arg(long, env = "KUBEWASM_ELIDE_UNCHANGED_WRITES", default_value_t = true, action = ArgAction::Set)]
    pub elide_unchanged_writes: bool,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account.
    #[arg(long, env = "KUBEWASM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use; default: the current context.
    #[arg(long, env = "KUBEWASM_CONTEXT")]
    pub context: Option<String>,
    /// Address of the admin server (/metrics, /healthz, /livez, /readyz).
    #[arg(long, env = "KUBEWASM_ADMIN_ADDR", default_value = "127.0.0.1:8080")]
    pub admin_addr: SocketAddr,
    /// Directory for compiled plugins, so restarts do not recompile; default: none.
    #[arg(long, env = "KUBEWASM_COMPILE_CACHE")]
    pub compile_cache: Option<PathBuf>,
    /// With a compile cache, compile each new plugin in a child process (this binary, run as
    /// `kubewasm compile-plugin`) that leaves it in the cache: the compiler's memory is returned
    /// when the child exits, and a compiler crash fails only that plugin's load.
    #[arg(long, env = "KUBEWASM_COMPILE_IN_CHILD", default_value_t = true, action = ArgAction::Set)]
    pub compile_in_child: bool,
    /// The code generator: `cranelift` (optimized code, a slow compile) or `winch` (wasmtime's
    /// baseline compiler: compiles several times faster, runs slower); default `cranelift`, and
    /// `winch` under `kubewasm dev`, where a saved plugin should be served in seconds.
    #[arg(long, env = "KUBEWASM_COMPILER")]
    pub compiler: Option<kubewasm_host::plugin::Compiler>,
    /// Seconds to let in-flight reconciles finish after SIGTERM/SIGINT.
    #[arg(long, env = "KUBEWASM_SHUTDOWN_GRACE_SECONDS", default_value_t = 30)]
    pub shutdown_grace_seconds: u64,
    /// Most concurrent reconciles any plugin gets; a plugin (or config) asking for more is
    /// clamped to it with a warning.
    #[arg(long, env = "KUBEWASM_MAX_CONCURRENT_CAP", default_value_t = kubewasm_host::plugin::engine::DEFAULT_MAX_CONCURRENT_CAP, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_cap: u32,
    /// Plugin instances alive at once, across all plugins: the wasm instance pool. Each plugin
    /// version reserves its concurrency's share at load; a version that does not fit is rejected.
    #[arg(long, env = "KUBEWASM_POOL_INSTANCES", default_value_t = kubewasm_host::plugin::engine::DEFAULT_POOL_INSTANCES, value_parser = clap::value_parser!(u32).range(1..))]
    pub pool_instances: u32,
    /// Bytes of linear memory all plugins may reserve together: each loaded version reserves
    /// its instances (maxConcurrent) × `limits.memoryBytes` per memory, and a version that does
    /// not fit is rejected. Default: the container's memory limit (cgroup) less the host's own
    /// share (a quarter, at least 128 MiB); unbounded outside a memory-limited container.
    #[arg(long, env = "KUBEWASM_PLUGIN_MEMORY_BUDGET")]
    pub plugin_memory_budget: Option<u64>,
    /// Most plugin requests in flight at the API server at once, across all plugins: seats handed
    /// round the plugins with writes waiting, so one alone gets them all and busy ones split
    /// them; fewer while the API server's latency rises or it answers 429.
    #[arg(long, env = "KUBEWASM_WRITE_SEATS", default_value_t = kubewasm_host::writer::fair::DEFAULT_MAX_SEATS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub write_seats: u32,
    /// A hard cap on each plugin's writes per second (token bucket) unless its `limits.writeQps`
    /// says otherwise; 0 (the default): no cap, the fair write scheduler shares the API server.
    #[arg(long, env = "KUBEWASM_PLUGIN_WRITE_QPS", default_value_t = kubewasm_host::plugin::throttle::DEFAULT_WRITE_QPS)]
    pub plugin_write_qps: u32,
    /// Writes each capped plugin may make at once (the bucket's size) unless its
    /// `limits.writeBurst` says otherwise; 0 (the default): twice its cap.
    #[arg(long, env = "KUBEWASM_PLUGIN_WRITE_BURST", default_value_t = kubewasm_host::plugin::throttle::DEFAULT_WRITE_BURST)]
    pub plugin_write_burst: u32,
    /// Seconds a plugin's write may wait for the API server's answer before it fails as
    /// `unavailable` and opens the API-server breaker (a hung server shows as an outage). Keep it
    /// below the reconcile deadline (default 10 s).
    #[arg(long, env = "KUBEWASM_PLUGIN_WRITE_TIMEOUT_SECONDS", default_value_t = kubewasm_host::plugin::limits::DEFAULT_WRITE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub plugin_write_timeout_seconds: u64,
    /// Drop a key after this many failed reconciles in a row; default: retry forever with backoff.
    #[arg(long, env = "KUBEWASM_MAX_RETRIES")]
    pub max_retries: Option<u32>,
    /// Elect a leader on a Lease: every replica keeps its caches warm, only the leader reconciles.
    /// Off for local runs; on in deploy/base.
    #[arg(long, env = "KUBEWASM_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the Lease; default: $POD_NAMESPACE, else the service account's namespace, else kubewasm-system.
    #[arg(long, env = "KUBEWASM_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, env = "KUBEWASM_LEADER_ELECTION_ID", default_value = "kubewasm")]
    pub leader_election_id: String,
    /// Seconds followers wait after the leader's last renewal before taking over (controller-runtime: 15).
    #[arg(long, env = "KUBEWASM_LEADER_ELECTION_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub leader_election_lease_duration_seconds: u64,
    /// Seconds the leader keeps trying to renew before it stops leading and exits (controller-runtime: 10).
    #[arg(long, env = "KUBEWASM_LEADER_ELECTION_RENEW_DEADLINE_SECONDS", default_value_t = 10)]
    pub leader_election_renew_deadline_seconds: u64,
    /// Seconds between attempts to acquire or renew the Lease (controller-runtime: 2).
    #[arg(long, env = "KUBEWASM_LEADER_ELECTION_RETRY_PERIOD_SECONDS", default_value_t = 2)]
    pub leader_election_retry_period_seconds: u64,
    /// Split the work between replicas by namespace hash: each holds a Lease
    /// `<leader-election-id>-shard-…` in the leader-election namespace (same timings), lists and
    /// watches its range of its plugins' kinds (server-side with KEP-5866's shardSelector when
    /// the API server has ShardedListAndWatch on, else filtered here) and reconciles only that.
    #[arg(long, env = "KUBEWASM_SHARDING", value_enum, default_value_t = Sharding::Off, conflicts_with = "leader_elect")]
    pub sharding: Sharding,
}

/// `--sharding`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Sharding {
    /// One replica does all the work (with `--leader-elect`, the leader).
    #[default]
    Off,
    /// Replicas find each other through their Leases and split the hash space evenly.
    Auto,
}

impl RunArgs {
    /// The namespace of the host's Leases: `--leader-election-namespace`, else the host's own.
    fn lease_namespace(&self) -> String {
        self.leader_election_namespace.clone().unwrap_or_else(kubewasm_host::leader::default_namespace)
    }

    /// The leader election `--leader-elect` asks for; `None` without it.
    pub fn leader_config(&self) -> Option<kubewasm_host::leader::Config> {
        self.leader_elect.then(|| {
            kubewasm_host::leader::Config::new(self.lease_namespace(), &self.leader_election_id).timings(
                Duration::from_secs(self.leader_election_lease_duration_seconds),
                Duration::from_secs(self.leader_election_renew_deadline_seconds),
                Duration::from_secs(self.leader_election_retry_period_seconds),
            )
        })
    }

    /// The shard membership `--sharding auto` asks for; `None` when sharding is off.
    pub fn shard_config(&self) -> Option<kubewasm_host::shard::Config> {
        (self.sharding == Sharding::Auto).then(|| {
            let mut config = kubewasm_host::shard::Config::new(self.lease_namespace(), &self.leader_election_id);
            config.lease_duration = Duration::from_secs(self.leader_election_lease_duration_seconds);
            config.renew_deadline = Duration::from_secs(self.leader_election_renew_deadline_seconds);
            config.retry_period = Duration::from_secs(self.leader_election_retry_period_seconds);
            config
        })
    }
}

/// `kubewasm compile-plugin` (hidden): the engine settings of the host that runs it (the
/// flags [`compile_process`](kubewasm_host::plugin::compile_process) passes its child).
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The compile cache to fill.
    #[arg(long)]
    pub compile_cache: PathBuf,
    /// The host's largest linear memory.
    #[arg(long)]
    pub max_memory_bytes: u64,
    /// The host's instance pool size.
    #[arg(long)]
    pub pool_instances: u32,
    /// The host's bytes kept resident per freed slot.
    #[arg(long)]
    pub keep_resident: usize,
    /// Whether the host uses the pagemap scan.
    #[arg(long, action = ArgAction::Set)]
    pub pagemap_scan: bool,
    /// The host's code generator.
    #[arg(long)]
    pub compiler: kubewasm_host::plugin::Compiler,
}

impl From<CompileArgs> for kubewasm_host::plugin::compile_process::ChildSettings {
    fn from(a: CompileArgs) -> Self {
        Self {
            compile_cache: a.compile_cache,
            max_memory_bytes: a.max_memory_bytes,
            pool_instances: a.pool_instances,
            keep_resident: a.keep_resident,
            pagemap_scan: a.pagemap_scan,
            compiler: a.compiler,
        }
    }
}

/// `kubewasm check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The plugin component.
    pub wasm: PathBuf,
    /// Its config file; default: `<wasm without .wasm>.yaml` if present.
    #[arg(long, env = "KUBEWASM_CHECK_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for compiled plugins (the same as `run --compile-cache`): a second check of the
    /// same component does not recompile it.
    #[arg(long, env = "KUBEWASM_COMPILE_CACHE")]
    pub compile_cache: Option<PathBuf>,
    /// The code generator, as `run --compiler` (default `cranelift`).
    #[arg(long, env = "KUBEWASM_COMPILER", default_value_t)]
    pub compiler: kubewasm_host::plugin::Compiler,
}

/// `kubewasm rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The plugin, loaded as `kubewasm check` loads it; `--config` may also be a WasmPlugin
    /// manifest, whose spec is then the config and whose name the plugin's.
    #[command(flatten)]
    pub plugin: CheckArgs,
    /// The host's namespace, where the plugin's ServiceAccount is made.
    #[arg(long, default_value = "kubewasm-system")]
    pub namespace: String,
    /// The host's ServiceAccount, which impersonates the plugin's.
    #[arg(long, default_value = "kubewasm")]
    pub host_service_account: String,
}

/// `kubewasm test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The plugin component.
    pub wasm: PathBuf,
    /// Objects to cache (multi-document YAML; `kind: List` items count), or a recording made by
    /// `kubewasm record`, which also says the key and the expected writes. Repeatable.
    #[arg(long, required = true, env = "KUBEWASM_TEST_OBJECTS", value_delimiter = ',')]
    pub objects: Vec<PathBuf>,
    /// Reconcile only this key (`namespace/name`, or `name` for a cluster-scoped kind); repeatable.
    /// Default: every object of the for kind and every key the plugin maps watched objects to.
    #[arg(long = "key", env = "KUBEWASM_TEST_KEY", value_delimiter = ',')]
    pub keys: Vec<String>,
    /// Expected report (the YAML this command prints): compare, print a diff and exit 1 when
    /// they differ.
    #[arg(long, env = "KUBEWASM_TEST_EXPECT")]
    pub expect: Option<PathBuf>,
    /// Settings (YAML or JSON) to use instead of those of the config file.
    #[arg(long, env = "KUBEWASM_TEST_SETTINGS")]
    pub settings: Option<PathBuf>,
    /// Its config file; default: `<wasm without .wasm>.yaml` if present.
    #[arg(long, env = "KUBEWASM_TEST_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for compiled plugins (the same as `run --compile-cache`).
    #[arg(long, env = "KUBEWASM_COMPILE_CACHE")]
    pub compile_cache: Option<PathBuf>,
    /// Run each key to a fixed point: apply its writes to the fixture objects (server-side apply
    /// as a merge that drops the fields the plugin applied before and no longer names, patches,
    /// creates, deletes), reconcile it again, and so on until a round's writes change nothing;
    /// fail, naming the fields that keep changing in the last two rounds, if that takes more
    /// than N reconciles (default 10). The report is the first round's.
    #[arg(long, env = "KUBEWASM_TEST_UNTIL_SETTLED", value_name = "N", num_args = 0..=1,
          default_missing_value = "10", value_parser = clap::value_parser!(u32).range(1..))]
    pub until_settled: Option<u32>,
    /// Also send each write to the API server of the kubeconfig as a server-side dry run
    /// (`dryRun=All`, as the plugin's field manager): nothing is stored, and a write the server
    /// rejects (422 Invalid, …) fails the run with the server's message. A write in a namespace
    /// the server lacks fails too; a patch, delete or status apply of an object only the
    /// fixtures hold is reported as not validated. `kubewasm dev`'s cluster is enough.
    #[arg(long, env = "KUBEWASM_TEST_SERVER_DRY_RUN")]
    pub server_dry_run: bool,
    /// Kubeconfig file for --server-dry-run; default: $KUBECONFIG, ~/.kube/config.
    #[arg(long, env = "KUBEWASM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for --server-dry-run; default: the current context.
    #[arg(long, env = "KUBEWASM_CONTEXT")]
    pub context: Option<String>,
}

/// `kubewasm record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The plugin component.
    pub wasm: PathBuf,
    /// Key to record (`namespace/name`, or `name` for a cluster-scoped kind); repeatable.
    #[arg(long = "key", required = true, env = "KUBEWASM_RECORD_KEY", value_delimiter = ',')]
    pub keys: Vec<String>,
    /// Directory for the fixture files, one per key: `<namespace>_<name>.yaml` or `<name>.yaml`.
    #[arg(long, env = "KUBEWASM_RECORD_OUT", default_value = ".")]
    pub out: PathBuf,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account.
    #[arg(long, env = "KUBEWASM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use; default: the current context.
    #[arg(long, env = "KUBEWASM_CONTEXT")]
    pub context: Option<String>,
    /// Settings (YAML or JSON) to use instead of those of the config file.
    #[arg(long, env = "KUBEWASM_RECORD_SETTINGS")]
    pub settings: Option<PathBuf>,
    /// Its config file; default: `<wasm without .wasm>.yaml` if present.
    #[arg(long, env = "KUBEWASM_RECORD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for compiled plugins (the same as `run --compile-cache`).
    #[arg(long, env = "KUBEWASM_COMPILE_CACHE")]
    pub compile_cache: Option<PathBuf>,
}

/// The languages `kubewasm new` writes projects in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Language {
    /// Rust, with the kubewasm Rust SDK.
    Rust,
    /// Python, with the kubewasm Python SDK, built by componentize-py.
    Python,
    /// JavaScript, with the kubewasm JavaScript SDK, bundled by rolldown and built by componentize-js.
    Js,
}

/// `kubewasm new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The project's language.
    pub language: Language,
    /// The plugin's name (a DNS label): it names the crate, module or package, `<name>.wasm` and
    /// `<name>.yaml`.
    pub name: String,
    /// Where to create the project (must be absent or empty); default `./<name>`.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The SDK the project builds with; default: a copy of the one this binary carries, written
    /// into the project's `vendor/kubewasm-sdk/` (no path outside the project). Rust: the
    /// crate's directory (a path dependency). Python: the
    /// SDK's directory, or the wheel or sdist `make sdk-packages` builds (build.sh installs it
    /// with pip). JavaScript: the SDK's directory, or the tarball `make sdk-packages` packs (a
    /// `file:` dependency).
    #[arg(long, env = "KUBEWASM_SDK")]
    pub sdk: Option<PathBuf>,
}

/// `kubewasm dev`: `run`'s flags, on a control plane of its own.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Also run kube-controller-manager's garbage collector (and namespace controller), so
    /// objects owned by a deleted object are deleted and deleted namespaces go away.
    #[arg(long, env = "KUBEWASM_DEV_WITH_GC")]
    pub with_gc: bool,
    /// Where to write the admin kubeconfig of the control plane (removed on exit).
    #[arg(long, env = "KUBEWASM_DEV_KUBECONFIG_OUT", default_value = ".kubewasm/kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// The host's flags, as for `kubewasm run` (`--kubeconfig` is the control plane's).
    #[command(flatten)]
    pub run: RunArgs,
}

/// Log output.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log filter (tracing EnvFilter syntax), e.g. `info,kubewasm=debug`.
    #[arg(long = "log", env = "KUBEWASM_LOG", default_value = "info", global = true)]
    pub filter: String,
    /// Log format.
    #[arg(long, env = "KUBEWASM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sharding_is_off_by_default_and_excludes_leader_election() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["kubewasm", "run"], args].concat());
        let Command::Run(run) = parse(&[]).unwrap().command else { panic!("not run") };
        assert_eq!(run.sharding, Sharding::Off);
        let Command::Run(run) = parse(&["--sharding", "auto"]).unwrap().command else { panic!("not run") };
        assert_eq!(run.sharding, Sharding::Auto);
        assert!(parse(&["--sharding", "auto", "--leader-elect"]).is_err());
    }

    #[test]
    fn test_runs_until_settled_within_10_reconciles_unless_told_how_many() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["kubewasm", "test", "p.wasm", "--objects", "o.yaml"], args].concat());
            let Command::Test(test) = cli.unwrap().command else { panic!("not test") };
            (test.until_settled, test.server_dry_run)
        };
        assert_eq!(parse(&[]), (None, false));
        assert_eq!(parse(&["--until-settled"]), (Some(10), false));
        assert_eq!(parse(&["--until-settled=3", "--server-dry-run"]), (Some(3), true));
        assert!(Cli::try_parse_from(["kubewasm", "test", "p.wasm", "--objects", "o", "--until-settled=0"]).is_err());
    }

    #[test]
    fn run_takes_its_flags_and_defaults() {
        let cli = Cli::try_parse_from(["kubewasm", "run", "--plugins", "/p", "--max-retries", "5"]).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!(run.plugins, Some(PathBuf::from("/p")));
        assert_eq!(run.max_retries, Some(5));
        assert!(run.watch_plugins && run.wasm_plugins && run.requeue_on_swap && run.elide_unchanged_writes);
        assert_eq!(run.module_namespace, "kubewasm-system");
        assert_eq!(run.shutdown_grace_seconds, 30);
        assert_eq!(run.admin_addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(cli.log.log_format, LogFormat::Text);
        assert!(!run.leader_elect, "leader election is off for local runs");
        assert_eq!(run.leader_election_id, "kubewasm");
        let timings = (
            run.leader_election_lease_duration_seconds,
            run.leader_election_renew_deadline_seconds,
            run.leader_election_retry_period_seconds,
        );
        assert_eq!(timings, (15, 10, 2), "controller-runtime's defaults");
        let fair = (run.max_concurrent_cap, run.pool_instances, run.plugin_write_qps, run.plugin_write_burst);
        assert_eq!(fair, (16, 1000, 0, 0), "no per-plugin cap: the fair scheduler shares writes");
        assert_eq!(run.write_seats, 32);
        assert_eq!(run.plugin_write_timeout_seconds, 5, "the write timeout is half the default deadline");
    }

    #[test]
    fn the_plugin_write_timeout_is_a_flag_and_never_zero() {
        let cli = Cli::try_parse_from(["kubewasm", "run", "--plugin-write-timeout-seconds", "2"]).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!(run.plugin_write_timeout_seconds, 2);
        assert!(Cli::try_parse_from(["kubewasm", "run", "--plugin-write-timeout-seconds", "0"]).is_err());
    }

    #[test]
    fn a_max_concurrent_cap_of_zero_is_refused() {
        assert!(Cli::try_parse_from(["kubewasm", "run", "--max-concurrent-cap", "0"]).is_err());
        let cli = Cli::try_parse_from(["kubewasm", "run", "--max-concurrent-cap", "4"]).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!(run.max_concurrent_cap, 4);
    }

    #[test]
    fn dev_takes_run_flags_and_defaults_to_the_plugins_directory_with_hot_reload() {
        let cli = Cli::try_parse_from(["kubewasm", "dev", "--plugins", "p", "--with-gc"]).unwrap();
        let Command::Dev(dev) = cli.command else { panic!("not dev") };
        assert!(dev.with_gc && dev.run.watch_plugins);
        assert_eq!(dev.run.plugins, Some(PathBuf::from("p")));
        assert_eq!(dev.kubeconfig_out, PathBuf::from(".kubewasm/kubeconfig"));
    }

    #[test]
    fn hot_load_switches_can_be_turned_off() {
        let args = ["kubewasm", "run", "--watch-plugins=false", "--wasm-plugins", "false", "--requeue-on-swap=false"];
        let Command::Run(run) = Cli::try_parse_from(args).unwrap().command else { panic!("not run") };
        assert!(!run.watch_plugins && !run.wasm_plugins && !run.requeue_on_swap);
        assert_eq!(run.plugins, None);
    }

    #[test]
    fn elision_of_unchanged_writes_can_be_turned_off() {
        let args = ["kubewasm", "run", "--elide-unchanged-writes=false"];
        let Command::Run(run) = Cli::try_parse_from(args).unwrap().command else { panic!("not run") };
        assert!(!run.elide_unchanged_writes);
    }
}
