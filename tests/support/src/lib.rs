//! A real kube-apiserver + etcd for tests, started once per test source file.
//!
//! envtest-style (controller-runtime `pkg/envtest`): no kubelet and, unless a test asks for one
//! with [`ControlPlaneBuilder::controller_manager`], no controller-manager, so nothing
//! garbage-collects owned objects and a deleted namespace stays `Terminating`. Binaries come from
//! `$KUBEBUILDER_ASSETS` or the cache `tests/control-plane/build.sh` fills.
//!
//! ```no_run
//! # async fn t() {
//! use kubewasm_testenv::ControlPlane;
//! let Some(cp) = ControlPlane::shared() else { return }; // skipped locally without binaries
//! let client = cp.admin_client().await;
//! let ns = cp.namespace("my-test").await;
//! # }
//! ```
//!
//! Every child runs in its own process group with a watchdog that kills the group when the test
//! binary exits (see `process.rs`), so no etcd or apiserver outlives `cargo test`, not even a
//! shared instance still held in its `static` when the binary exits.

mod apiserver;
mod binaries;
mod controller_manager;
mod etcd;
mod pki;
mod process;
mod proxy;
mod registry;
mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;

pub use binaries::DEFAULT_K8S_VERSION;
pub use proxy::FaultProxy;
pub use registry::{DEFAULT_REGISTRY_VERSION, REGISTRY_PASSWORD, REGISTRY_USER, Registry};
pub use tools::{DEFAULT_HELM_VERSION, DEFAULT_PROMTOOL_VERSION, Tool};

use binaries::Binaries;
use etcd::Etcd;
use pki::Pki;
use process::Supervised;

/// A running etcd + kube-apiserver pair with an admin and a restricted user.
///
/// Users (token authentication, `--authorization-mode=RBAC`): `admin` is in `system:masters`;
/// `restricted` has only what RBAC's bootstrap policy gives `system:authenticated` (discovery,
/// self-subject reviews) until a test binds it a role.
#[derive(Debug)]
pub struct ControlPlane {
    binaries: Binaries,
    etcd: Etcd,
    apiserver: Option<Supervised>,
    controller_manager: Option<Supervised>,
    apiserver_port: u16,
    apiserver_args: Vec<String>,
    admin: kube::Config,
    restricted: kube::Config,
    kubeconfig: PathBuf,
    /// How long the last apiserver start took until `/readyz` said ok.
    startup: Duration,
    /// How long `start` took: keys, etcd, apiserver.
    total_startup: Duration,
    /// Removes `dir` when the test binary exits, also when `self` is never dropped.
    _janitor: ChildStdin,
    dir: tempfile::TempDir,
}

/// Starts an owned [`ControlPlane`] with extra apiserver flags; see [`ControlPlane::builder`].
#[derive(Debug, Default, Clone)]
#[must_use]
pub struct ControlPlaneBuilder {
    apiserver_args: Vec<String>,
    controller_manager: bool,
}

impl ControlPlaneBuilder {
    /// Adds one kube-apiserver flag, e.g. `"--watch-cache=false"`. Added after the defaults: for
    /// scalar flags the last one wins; list flags given again replace or extend the default as
    /// that flag's type does in kube-apiserver.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Also runs kube-controller-manager with its garbage-collector and namespace controllers, so
    /// dependents of a deleted owner are deleted and a deleted namespace goes away. Needs the
    /// `kube-controller-manager` binary `tests/control-plane/build.sh` builds (envtest has none).
    pub fn controller_manager(mut self) -> Self {
        self.controller_manager = true;
        self
    }

    /// [`start`](Self::start), or `None` (saying so on stderr) when the binaries are missing
    /// and CI is not set, as [`ControlPlane::shared`] does; panics if the start fails.
    pub fn start_or_skip(self) -> Option<ControlPlane> {
        if let Err(message) = Binaries::locate() {
            assert!(!binaries::in_ci(), "CI=true and {message}");
            to_real_stderr(&message);
            return None;
        }
        Some(self.start().unwrap_or_else(|e| panic!("kubewasm-testenv: the control plane failed to start: {e:#}")))
    }

    /// Starts etcd and the apiserver and waits until the apiserver is ready (at most 60 s).
    ///
    /// Synchronous: the start-up runs on a helper thread with its own runtime, so it may be
    /// called from a `#[tokio::test]` (it blocks that test's thread meanwhile) or from plain code.
    /// Fails with instructions when the binaries are missing.
    pub fn start(self) -> anyhow::Result<ControlPlane> {
        let binaries = Binaries::locate().map_err(anyhow::Error::msg)?;
        if self.controller_manager && !binaries::is_executable(&binaries.controller_manager) {
            anyhow::bail!(
                "{} is missing: rebuild with tests/control-plane/build.sh (it builds kube-controller-manager too)",
                binaries.controller_manager.display()
            );
        }
        on_helper_runtime(|| async {
            let mut cp = ControlPlane::start(binaries, self.apiserver_args).await?;
            if self.controller_manager {
                cp.launch_controller_manager().await?;
            }
            Ok(cp)
        })
    }
}

/// Whether control-plane binaries were found (or why not, in CI), decided once per process.
static BINARIES: OnceLock<Result<Option<Binaries>, String>> = OnceLock::new();
/// The shared control planes, one per test source file (see [`ControlPlane::shared`]).
static SHARED: Mutex<BTreeMap<&'static str, Arc<ControlPlane>>> = Mutex::new(BTreeMap::new());
static NAMESPACE_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ControlPlane {
    /// Shared by the tests of one source file (the caller's), started on first use: the tests of
    /// a file share one, as they did when each file was a test binary of its own, while files
    /// linked into one binary (`host/tests/all`) do not see each other's objects. A file's
    /// control plane is stopped when a test of another file asks for one and no test holds it.
    /// `None` (after printing to stderr how to build the binaries: `make control-plane` /
    /// `tests/control-plane/build.sh`) when binaries are missing and CI is not set; panics with
    /// that message when `CI=true`. Never a silent pass. Panics, in every test that asks, if the
    /// control plane fails to start.
    #[track_caller]
    pub fn shared() -> Option<Arc<ControlPlane>> {
        let file = std::panic::Location::caller().file();
        let binaries = BINARIES.get_or_init(|| match Binaries::locate() {
            Err(message) if binaries::in_ci() => Err(format!("CI=true and {message}")),
            Err(message) => {
                to_real_stderr(&message);
                Ok(None)
            }
            Ok(binaries) => Ok(Some(binaries)),
        });
        let binaries = match binaries {
            Ok(Some(binaries)) => binaries.clone(),
            Ok(None) => {
                let test = std::thread::current().name().unwrap_or("this test").to_owned();
                to_real_stderr(&format!("kubewasm-testenv: SKIPPED {test}: no control-plane binaries (see above)"));
                return None;
            }
            Err(message) => panic!("{message}"),
        };
        let mut shared = SHARED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Planes no test holds any more, of files other than the caller's, are stopped (their
        // tests ran: the harness runs a file's tests next to each other).
        let idle: Vec<_> =
            shared.iter().filter(|(f, cp)| **f != file && Arc::strong_count(cp) == 1).map(|(f, _)| *f).collect();
        let stopped: Vec<_> = idle.into_iter().filter_map(|f| shared.remove(f)).collect();
        if let Some(cp) = shared.get(file) {
            let cp = cp.clone();
            drop(shared);
            drop(stopped);
            return Some(cp);
        }
        let started = on_helper_runtime(|| ControlPlane::start(binaries, Vec::new()))
            .map_err(|e| format!("kubewasm-testenv: the shared control plane for {file} failed to start: {e:#}"));
        let cp = match started {
            Ok(cp) => Arc::new(cp),
            Err(message) => panic!("{message}"),
        };
        eprintln!(
            "kubewasm-testenv: control plane for {file} ready in {:?} (kube-apiserver {:?} of it); logs in {}",
            cp.total_startup,
            cp.startup,
            cp.dir().display()
        );
        shared.insert(file, cp.clone());
        drop(shared);
        drop(stopped);
        Some(cp)
    }

    /// An owned control plane, stopped on drop; for tests that need extra apiserver flags or to
    /// restart the apiserver. `ControlPlane::builder().apiserver_arg("--watch-cache=false").start()`.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// Starts a control plane, again on fresh ports when one picked as free was taken meanwhile.
    async fn start(binaries: Binaries, extra_args: Vec<String>) -> anyhow::Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_once(binaries.clone(), &extra_args).await {
                Err(e) if attempt < PORT_ATTEMPTS && lost_port_race(&e) => attempt += 1,
                result => return result,
            }
        }
    }

    async fn start_once(binaries: Binaries, extra_args: &[String]) -> anyhow::Result<Self> {
        let started = Instant::now();
        let dir = tempfile::Builder::new().prefix("kubewasm-testenv-").tempdir()?;
        let janitor = process::remove_at_exit(dir.path())?;
        let pki = Pki::generate(dir.path())?;
        let etcd = Etcd::start(&binaries.etcd, dir.path(), started + apiserver::READY_TIMEOUT).await?;
        let apiserver_port = etcd::free_port()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let admin = config_for(&server, &pki.ca_der, &pki.admin_token)?;
        let restricted = config_for(&server, &pki.ca_der, &pki.restricted_token)?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&server, &pki.ca_file, &pki.admin_token))?;
        let apiserver_args = apiserver::args(&etcd.url(), apiserver_port, dir.path(), &pki, extra_args);
        let mut cp = Self {
            binaries,
            etcd,
            apiserver: None,
            controller_manager: None,
            apiserver_port,
            apiserver_args,
            admin,
            restricted,
            kubeconfig,
            startup: Duration::ZERO,
            total_startup: Duration::ZERO,
            _janitor: janitor,
            dir,
        };
        cp.launch_apiserver().await?;
        cp.total_startup = started.elapsed();
        Ok(cp)
    }

    async fn launch_apiserver(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let log = self.dir.path().join("kube-apiserver.log");
        let mut process = Supervised::spawn("kube-apiserver", &self.binaries.apiserver, &self.apiserver_args, &log)?;
        if let Err(e) = apiserver::wait_ready(&mut process, &self.admin, started).await {
            // A dead etcd is the likelier root cause; say so.
            return Err(match self.etcd.process.check_running() {
                Err(etcd_died) => e.context(etcd_died),
                Ok(()) => e,
            });
        }
        self.startup = started.elapsed();
        self.apiserver = Some(process);
        Ok(())
    }

    async fn launch_controller_manager(&mut self) -> anyhow::Result<()> {
        let mut attempt = 1;
        loop {
            let port = etcd::free_port()?;
            let binary = &self.binaries.controller_manager;
            match controller_manager::start(binary, &self.kubeconfig, self.dir.path(), port).await {
                Ok(process) => {
                    self.controller_manager = Some(process);
                    return Ok(());
                }
                Err(e) if attempt < PORT_ATTEMPTS && lost_port_race(&e) => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// A config for the `admin` user (group `system:masters`).
    pub fn admin_config(&self) -> kube::Config {
        self.admin.clone()
    }

    /// A client for the `admin` user, built in the caller's runtime (a `kube::Client` spawns a
    /// task on the runtime it is made in, and each `#[tokio::test]` has its own: never keep one
    /// in a `static`).
    pub async fn admin_client(&self) -> kube::Client {
        kube::Client::try_from(self.admin_config()).expect("a kube::Client from the admin config")
    }

    /// A config for the `restricted` user (no groups beyond `system:authenticated`).
    pub fn restricted_config(&self) -> kube::Config {
        self.restricted.clone()
    }

    /// A client for the `restricted` user, built in the caller's runtime.
    pub async fn restricted_client(&self) -> kube::Client {
        kube::Client::try_from(self.restricted_config()).expect("a kube::Client from the restricted config")
    }

    /// The name RBAC knows the restricted user by, for RoleBinding subjects: `restricted`.
    pub fn restricted_user(&self) -> &'static str {
        pki::RESTRICTED_USER
    }

    /// The admin kubeconfig file, for kubectl and other tools.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The kubectl binary of the control plane's version (beside kube-apiserver and etcd).
    pub fn kubectl_path(&self) -> &Path {
        &self.binaries.kubectl
    }

    /// `kubectl --kubeconfig <admin kubeconfig>`, ready for more arguments.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.binaries.kubectl);
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        command
    }

    /// Creates a fresh namespace named `<prefix>-<n>-<random>` (prefix made DNS-safe and
    /// shortened) and returns its name. Namespaces are not deleted afterwards: without a
    /// controller-manager they would only hang in `Terminating`.
    pub async fn namespace(&self, prefix: &str) -> String {
        let name = namespace_name(prefix, NAMESPACE_COUNTER.fetch_add(1, Ordering::Relaxed), &pki::random_suffix());
        let api: Api<Namespace> = Api::all(self.admin_client().await);
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": name } })).expect("a Namespace");
        api.create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// Kills the apiserver (SIGKILL, as a crash); etcd keeps running. No-op if already stopped.
    pub fn stop_apiserver(&mut self) {
        if let Some(apiserver) = self.apiserver.take() {
            apiserver.kill();
        }
    }

    /// Sends the apiserver SIGTERM, as a rolling restart does: it fails `/readyz` and refuses
    /// new requests at once but keeps open watches while it drains, then exits. See
    /// [`apiserver_exited`](Self::apiserver_exited) and [`start_apiserver`](Self::start_apiserver).
    pub fn terminate_apiserver(&mut self) -> anyhow::Result<()> {
        match &self.apiserver {
            Some(apiserver) => apiserver.terminate(),
            None => Ok(()),
        }
    }

    /// Freezes the apiserver with SIGSTOP, as a hung server: the kernel still accepts TCP
    /// connections and buffers requests, but nothing answers, and open watches go silent.
    /// [`resume_apiserver`](Self::resume_apiserver) thaws it. No-op if it is not running.
    pub fn pause_apiserver(&self) -> anyhow::Result<()> {
        self.apiserver.as_ref().map_or(Ok(()), |apiserver| apiserver.signal("-STOP"))
    }

    /// Thaws an apiserver frozen by [`pause_apiserver`](Self::pause_apiserver) (SIGCONT).
    pub fn resume_apiserver(&self) -> anyhow::Result<()> {
        self.apiserver.as_ref().map_or(Ok(()), |apiserver| apiserver.signal("-CONT"))
    }

    /// Whether the apiserver has exited (or was stopped).
    pub fn apiserver_exited(&mut self) -> bool {
        self.apiserver.as_mut().is_none_or(process::Supervised::exited)
    }

    /// Starts the apiserver again with the same etcd, port, certificates and users, and waits
    /// until it is ready. No-op if it is running. Synchronous like [`ControlPlaneBuilder::start`].
    pub fn start_apiserver(&mut self) -> anyhow::Result<()> {
        if !self.apiserver_exited() {
            return Ok(());
        }
        self.apiserver = None;
        on_helper_runtime(|| self.launch_apiserver())
    }

    /// The etcd client URL, `http://127.0.0.1:PORT`.
    pub fn etcd_url(&self) -> String {
        self.etcd.url()
    }

    /// Compacts etcd to its current revision (physically), so watches resumed from an older
    /// resourceVersion get `410 Gone` — from etcd only when the apiserver does not serve them
    /// from its watch cache: use an owned instance with `--watch-cache=false` for that.
    pub async fn compact_etcd(&self) -> anyhow::Result<()> {
        etcd::compact(self.etcd.client_port).await.map(drop)
    }

    /// Writes `writes` revisions of a key outside the apiserver's `/registry` prefix straight
    /// into etcd, so etcd's revision moves past what any watcher has seen without an event
    /// for it. With [`compact_etcd`](Self::compact_etcd) after it, every watch resumed from the
    /// revision it last saw gets `410 Gone`, even while the apiserver is down.
    pub async fn advance_etcd(&self, writes: u32) -> anyhow::Result<()> {
        etcd::advance(self.etcd.client_port, writes).await
    }

    /// A [`FaultProxy`] in front of this apiserver; its [`config`](FaultProxy::config) is the
    /// admin's, pointed at the proxy.
    pub fn fault_proxy(&self) -> FaultProxy {
        let upstream = ([127, 0, 0, 1], self.apiserver_port).into();
        FaultProxy::start(upstream, self.admin_config()).expect("starting a fault proxy")
    }

    /// How long the last apiserver start took from spawn until `/readyz` was ok and the
    /// `default` namespace existed (for start-up time figures, not for assertions).
    pub fn apiserver_startup_time(&self) -> Duration {
        self.startup
    }

    /// The process ids of etcd and, while it runs, the apiserver (for benchmarks that sample
    /// the control plane's CPU time).
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(self.etcd.process.id()).chain(self.apiserver.as_ref().map(process::Supervised::id)).collect()
    }

    /// The temporary directory holding certificates, the kubeconfig, etcd's data and the logs
    /// (`etcd.log`, `kube-apiserver.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(controller_manager) = self.controller_manager.take() {
            controller_manager.kill();
        }
        self.stop_apiserver();
        // etcd is killed when its field drops; then the temp dir is removed.
    }
}

/// How often a start is tried on fresh ports (free ports are picked by binding to port 0 and
/// closing, as envtest does, so another process can take one before our child binds it).
const PORT_ATTEMPTS: u32 = 3;

/// Whether a start failed because a port picked as free was taken meanwhile (the error quotes the log).
fn lost_port_race(error: &anyhow::Error) -> bool {
    format!("{error:#}").contains("address already in use")
}

/// Writes a line to the process's stderr, bypassing libtest's output capture (which only
/// intercepts `print!`/`eprint!`), so a skip is visible in a plain `cargo test` run.
fn to_real_stderr(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Runs `make_future()` to completion on a new current-thread runtime on a scoped helper thread,
/// so sync callers inside a `#[tokio::test]` runtime do not nest runtimes.
fn on_helper_runtime<'a, F, Fut, T>(make_future: F) -> anyhow::Result<T>
where
    F: FnOnce() -> Fut + Send + 'a,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
    T: Send + 'a,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(make_future())
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn config_for(server: &str, ca_der: &[u8], token: &str) -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::new(server.parse().context("apiserver URL")?);
    config.root_cert = Some(vec![ca_der.to_vec()]);
    // AuthInfo's token is a secrecy::SecretString; deserializing avoids depending on secrecy.
    config.auth_info = serde_json::from_value(serde_json::json!({ "token": token }))?;
    Ok(config)
}

fn kubeconfig_yaml(server: &str, ca_file: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n\
         - name: testenv\n  context:\n    cluster: testenv\n    user: admin\n    namespace: default\n\
         current-context: testenv\n",
        ca = ca_file.display()
    )
}

/// `<prefix>-<n>-<suffix>` as a DNS label: lowercase alphanumerics and `-`, at most 63 characters.
fn namespace_name(prefix: &str, n: u64, suffix: &str) -> String {
    let mut clean: String =
        prefix.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let tail = format!("-{n}-{suffix}");
    clean.truncate(63 - tail.len());
    let clean = clean.trim_matches('-');
    let clean = if clean.is_empty() { "test" } else { clean };
    format!("{clean}{tail}")
}

#[cfg(test)]
mod tests {
    use super::namespace_name;

    #[test]
    fn namespace_names_are_dns_labels_whatever_the_prefix() {
        assert_eq!(namespace_name("My_Test::case", 3, "abc123"), "my-test--case-3-abc123");
        assert_eq!(namespace_name("--", 0, "abc123"), "test-0-abc123");
        let long = namespace_name(&"x".repeat(100), 12, "abc123");
        assert_eq!(long.len(), 63);
        assert!(long.ends_with("-12-abc123"));
    }
}
