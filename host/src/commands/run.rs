//! `kubewasm run`: its flags, and the host served on them until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use tokio_util::sync::CancellationToken;

pub mod oci;
pub mod serve;

/// `kubewasm run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Plugin directory: each `<name>.wasm` is a plugin, configured by `<name>.yaml` beside it;
    /// so is each `<name>.py` or `<name>.js` (or a directory `<name>/` of them), a plugin given
    /// as source, whose config names its engine (`engine: python@0.3`, `js@0.3`).
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Directory of the language engines plugins given as source run on
    /// (`<language>-<version>.wasm`, built by `make engines`); default: `engines` beside the
    /// binary, else in one of the two directories above it (`target/engines` for
    /// `target/debug/kubewasm`), else `../lib/kubewasm/engines`. Its `compiled/<sha256>.cwasm`,
    /// an engine precompiled (the image ships them), is mapped instead of compiling the engine:
    /// it is native code, so the directory must be as trusted as the binary.
    #[arg(long, env = "KUBEWASM_ENGINE_DIR")]
    pub engine_dir: Option<PathBuf>,
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
    pub oci: oci::OciArgs,
    /// Send each plugin's requests as its own ServiceAccount, `kubewasm-plugin-<name>` in the
    /// host's namespace (`Impersonate-User`), so RBAC bounds what it writes even where the host's
    /// checks would not (cached reads stay the host's); `kubewasm rbac` prints what each needs.
    /// On by default: `--impersonate-plugins=false` sends every plugin's requests as the host,
    /// with the host's rights, and leaves the host's authorizer as the only layer.
    #[arg(long, env = "KUBEWASM_IMPERSONATE_PLUGINS", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, overrides_with = "impersonate_plugins")]
    pub impersonate_plugins: bool,
    /// With impersonation: make each plugin's ServiceAccount and RBAC with the host's own
    /// credentials when it loads. For `kubewasm dev`, the demo and tests, where the host is a
    /// cluster admin; never give a deployed host the rights this needs.
    #[arg(long, env = "KUBEWASM_PROVISION_PLUGIN_RBAC")]
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
    /// Directory for compiled plugins, so restarts do not recompile. Their code is mapped from
    /// there, so what no plugin runs stays on disk; kept under 1 GiB, least recently loaded
    /// deleted first. Default: none (compiled plugins are kept in memory).
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

impl RunArgs {
    /// Serves the host on these flags until SIGTERM/SIGINT.
    pub async fn execute(self) -> anyhow::Result<()> {
        let token = CancellationToken::new();
        kubewasm_host::shutdown::on_signal(token.clone());
        serve::serve(self, token).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::telemetry::LogFormat;
    use clap::Parser as _;

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
    fn hot_load_switches_can_be_turned_off() {
        let args = ["kubewasm", "run", "--watch-plugins=false", "--wasm-plugins", "false", "--requeue-on-swap=false"];
        let Command::Run(run) = Cli::try_parse_from(args).unwrap().command else { panic!("not run") };
        assert!(!run.watch_plugins && !run.wasm_plugins && !run.requeue_on_swap);
        assert_eq!(run.plugins, None);
    }

    /// Issue 49, class 7: `kubewasm run` sent every plugin request as the host unless told.
    #[test]
    fn plugins_are_sent_as_their_own_identities_unless_told_otherwise_and_the_last_flag_counts() {
        let run = |args: &[&str]| {
            let Command::Run(run) = Cli::try_parse_from([&["kubewasm", "run"], args].concat()).unwrap().command else {
                panic!("not run")
            };
            run.impersonate_plugins
        };
        assert!(run(&[]), "on by default");
        assert!(!run(&["--impersonate-plugins=false"]));
        assert!(run(&["--impersonate-plugins=false", "--impersonate-plugins"]), "a bare flag turns it on");
        assert!(!run(&["--impersonate-plugins", "--impersonate-plugins", "false"]));
    }

    #[test]
    fn elision_of_unchanged_writes_can_be_turned_off() {
        let args = ["kubewasm", "run", "--elide-unchanged-writes=false"];
        let Command::Run(run) = Cli::try_parse_from(args).unwrap().command else { panic!("not run") };
        assert!(!run.elide_unchanged_writes);
    }
}
