//! The variants that take turns: kubewasm with the namespace-defaults component, and the
//! controller-runtime peer in one manager or as one process per controller.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::ValueEnum;

/// One way of running `plugins` copies of namespace-defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Variant {
    /// `kubewasm run`, release build, with a compile cache warmed before the first round.
    Kubewasm,
    /// As `kubewasm`, namespace-defaults returning its two children as its desired state
    /// (contract 0.3, settings `desiredState: true`): the host applies them at once.
    KubewasmDesired,
    /// `kubewasm run` with an empty compile cache, as a new pod's `emptyDir`: it compiles the
    /// component at start-up (in a child process, `--compile-in-child`).
    KubewasmCold,
    /// As `kubewasm-cold`, compiling inside the host (`--compile-in-child=false`): what a cold
    /// start cost before the compile moved to a child process.
    KubewasmColdInProcess,
    /// namespace-defaults' Python source (`plugins/python/namespace-defaults`), each copy a
    /// different source (its own first line), on the host's Python engine, started with an empty
    /// compile cache as `kubewasm-cold`: the engine mapped from `compiled/` beside it when `make
    /// engines-compiled` put it there, as a pod of the image does.
    KubewasmPythonSourceCold,
    /// As `kubewasm-python-source-cold`, from a copy of the engine directory without `compiled/`:
    /// the host compiles the engine at start-up (issue 45: one engine compile for every plugin).
    KubewasmPythonSourceUncompiled,
    /// As `kubewasm-python-source-cold`, each instance serving up to 100 reconciles
    /// (`limits.reuseInstances: 100`).
    KubewasmPythonSourceColdReused,
    /// As `kubewasm`, with the plugin write limit off (`--plugin-write-qps 0`), like the peer's
    /// client, which has no client-side limit.
    KubewasmUnlimited,
    /// As `kubewasm-unlimited`, each plugin's requests sent as its own ServiceAccount
    /// (`--impersonate-plugins`; the RBAC is made at load, `--provision-plugin-rbac`): beside
    /// `kubewasm-unlimited` it shows what impersonation costs, which the write limit would hide.
    KubewasmImpersonated,
    /// As `kubewasm-unlimited`, sending every apply even when it would change nothing
    /// (`--elide-unchanged-writes=false`): beside `kubewasm-unlimited` it shows what elision saves.
    KubewasmUnelided,
    /// As `kubewasm-impersonated`, run by the `--baseline` binary (another build of kubewasm,
    /// e.g. main before a change), so that a change's cost is measured in one interleaved run.
    BaselineImpersonated,
    /// One controller-runtime manager running every controller, client-go's FIFO workqueue.
    CrFifo,
    /// One controller-runtime manager, controller-runtime's default priority queue.
    CrPriority,
    /// One controller-runtime process per controller, FIFO workqueue.
    CrProcessesFifo,
}

impl Variant {
    /// The variants of a side-by-side run with `plugins` controllers, in the order they take turns.
    pub fn defaults(plugins: usize) -> Vec<Self> {
        if plugins == 1 {
            vec![Self::Kubewasm, Self::CrFifo, Self::KubewasmCold, Self::CrPriority]
        } else {
            vec![Self::Kubewasm, Self::CrProcessesFifo, Self::CrFifo]
        }
    }

    /// Its name on the command line and in the tables.
    pub fn name(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default()
    }

    /// Whether its plugin configs carry approvals (`grants:`): all but a baseline that predates
    /// them.
    pub fn approved(self, setup: &Setup) -> bool {
        self != Self::BaselineImpersonated || setup.baseline.as_ref().is_some_and(|b| b.approved)
    }

    /// The form of its copies of namespace-defaults.
    pub fn form(self) -> Form {
        Form {
            desired: self == Self::KubewasmDesired,
            python: matches!(
                self,
                Self::KubewasmPythonSourceCold
                    | Self::KubewasmPythonSourceUncompiled
                    | Self::KubewasmPythonSourceColdReused
            ),
            reused: self == Self::KubewasmPythonSourceColdReused,
            baseline: self == Self::BaselineImpersonated,
        }
    }

    /// Whether this is controller-runtime (a peer) rather than kubewasm.
    pub fn is_peer(self) -> bool {
        !matches!(
            self,
            Self::Kubewasm
                | Self::KubewasmDesired
                | Self::KubewasmCold
                | Self::KubewasmColdInProcess
                | Self::KubewasmPythonSourceCold
                | Self::KubewasmPythonSourceUncompiled
                | Self::KubewasmPythonSourceColdReused
                | Self::KubewasmUnlimited
                | Self::KubewasmImpersonated
                | Self::KubewasmUnelided
                | Self::BaselineImpersonated
        )
    }
}

/// The form of the copies of namespace-defaults a variant runs; the default, the Rust component
/// writing imperatively with a fresh instance per reconcile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Form {
    /// Returning its children as its desired state (settings `desiredState: true`).
    pub desired: bool,
    /// Its Python source on the host's engine, each copy's source its own.
    pub python: bool,
    /// Each instance serving up to 100 reconciles (`limits.reuseInstances: 100`).
    pub reused: bool,
    /// For the baseline: its own build of the component, if `--baseline-plugin` names one.
    pub baseline: bool,
}

/// Another build of kubewasm to run beside this one ([`Variant::BaselineImpersonated`]).
pub struct Baseline {
    /// Its `kubewasm`.
    pub binary: PathBuf,
    /// Whether it takes the plugin configs' approvals (`grants:`; builds before issue 49 refuse
    /// them).
    pub approved: bool,
    /// namespace-defaults built at the baseline's commit, for a baseline that predates the
    /// contract today's component is built for; `None`: today's.
    pub component: Option<PathBuf>,
}

/// What the commands need: the binaries, the plugin directory, the compile cache.
pub struct Setup {
    /// `kubewasm` (release; `--kubewasm` may name another build, e.g. the image's musl binary).
    pub kubewasm: PathBuf,
    /// `benches/go/controller-runtime`, built by `make bench-peer`.
    pub peer: PathBuf,
    /// Built components (`make plugins`).
    pub plugin_dir: PathBuf,
    /// Compile cache for [`Variant::Kubewasm`].
    pub compile_cache: PathBuf,
    /// What [`Variant::BaselineImpersonated`] runs.
    pub baseline: Option<Baseline>,
}

/// Controller `i`'s name suffix and child names; one controller keeps the plain defaults.
fn names(plugins: usize, i: usize) -> Option<(String, String, String)> {
    (plugins > 1)
        .then(|| (format!("namespace-defaults-{i}"), format!("default-quota-{i}"), format!("default-deny-{i}")))
}

/// What namespace-defaults asks for, approved.
const APPROVED: &str = "grants:\n  read: [Namespace, ResourceQuota, NetworkPolicy.networking.k8s.io]\n  \
                        status: [Namespace]\n  own: [ResourceQuota, NetworkPolicy.networking.k8s.io]\n";

/// Writes `plugins` copies of namespace-defaults into `dir`, each under its own name with its
/// own child names (settings `quotaName`, `networkPolicyName`), one reconcile at a time, with
/// what it asks for approved unless `approved` is false, in the `form` given.
pub fn plugin_dir(setup: &Setup, dir: &Path, plugins: usize, approved: bool, form: Form) {
    let Form { desired, python, reused, baseline } = form;
    std::fs::create_dir_all(dir).unwrap();
    let built = match setup.baseline.as_ref().and_then(|b| b.component.as_ref()) {
        Some(component) if baseline => component.clone(),
        _ => setup.plugin_dir.join("namespace_defaults.wasm"),
    };
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/python/namespace-defaults/namespace_defaults.py");
    for i in 0..plugins {
        let (name, settings) = match names(plugins, i) {
            Some((name, quota, policy)) => {
                (name, format!("settings:\n  quotaName: {quota}\n  networkPolicyName: {policy}\n"))
            }
            None => ("namespace-defaults".to_owned(), String::new()),
        };
        let engine = if python {
            let text = std::fs::read_to_string(&source).unwrap();
            std::fs::write(dir.join(format!("{name}.py")), format!("# copy {i}\n{text}")).unwrap();
            "engine: python@0.3\n"
        } else {
            std::fs::copy(&built, dir.join(format!("{name}.wasm")))
                .unwrap_or_else(|e| panic!("{}: {e}; run `make plugins`", built.display()));
            ""
        };
        let grants = if approved { APPROVED } else { "" };
        let limits = if reused { "limits:\n  reuseInstances: 100\n" } else { "" };
        let settings = match (desired, settings.is_empty()) {
            (false, _) => settings,
            (true, true) => "settings:\n  desiredState: true\n".to_owned(),
            (true, false) => format!("{settings}  desiredState: true\n"),
        };
        std::fs::write(
            dir.join(format!("{name}.yaml")),
            format!("{engine}maxConcurrent: 1\n{limits}{grants}{settings}"),
        )
        .unwrap();
    }
}

/// `kubewasm run` over `plugins` (a directory from [`plugin_dir`]), serving nothing else: no
/// WasmPlugin source, no directory watch; requests sent as the host unless the variant adds
/// [`IMPERSONATED`] (a later `--impersonate-plugins` wins).
pub fn kubewasm(setup: &Setup, kubeconfig: &Path, plugins: &Path, cache: Option<&Path>) -> Command {
    let mut command = run(&setup.kubewasm, kubeconfig, plugins, cache);
    command.arg("--impersonate-plugins=false");
    command
}

/// `binary run` over `plugins`, serving nothing else, each plugin sent as the binary's default
/// says.
pub fn run(binary: &Path, kubeconfig: &Path, plugins: &Path, cache: Option<&Path>) -> Command {
    let mut command = Command::new(binary);
    command.args(["--log", "warn", "run", "--admin-addr", "127.0.0.1:0", "--wasm-plugins=false"]);
    command.args(["--watch-plugins=false", "--plugins"]).arg(plugins).arg("--kubeconfig").arg(kubeconfig);
    if let Some(cache) = cache {
        command.arg("--compile-cache").arg(cache);
    }
    command
}

/// The flags of [`Variant::KubewasmImpersonated`].
pub const IMPERSONATED: [&str; 2] = ["--impersonate-plugins", "--provision-plugin-rbac"];

/// The baseline's compile cache, beside the warm one: another build's engine may not read its
/// entries.
pub fn baseline_cache(setup: &Setup) -> PathBuf {
    setup.compile_cache.with_file_name("baseline-compile-cache")
}

/// A new, empty compile cache beside the warm one.
fn empty_cache(setup: &Setup) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = setup.compile_cache.with_file_name(format!("cold-compile-cache-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directory beside the warm compile cache with the engines of the binary's engine directory
/// (`KUBEWASM_ENGINE_DIR`, else `engines` in the target dir) linked, and not their `compiled/`.
fn uncompiled_engines(setup: &Setup) -> PathBuf {
    let built = std::env::var_os("KUBEWASM_ENGINE_DIR")
        .map_or_else(|| setup.kubewasm.parent().unwrap().join("../engines"), PathBuf::from);
    let dir = setup.compile_cache.with_file_name("engines-uncompiled");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for engine in std::fs::read_dir(&built).unwrap().flatten().map(|e| e.path()) {
        if engine.extension().is_some_and(|x| x == "wasm") {
            std::fs::hard_link(&engine, dir.join(engine.file_name().unwrap()))
                .or_else(|_| std::fs::copy(&engine, dir.join(engine.file_name().unwrap())).map(drop))
                .unwrap();
        }
    }
    dir
}

/// The commands of `variant` with `plugins` controllers.
pub fn commands(
    variant: Variant,
    setup: &Setup,
    kubeconfig: &Path,
    plugins_dir: &Path,
    plugins: usize,
) -> Vec<Command> {
    let peer = |queue: &str, controllers: usize, first: Option<usize>| {
        let mut command = Command::new(&setup.peer);
        command.arg("--kubeconfig").arg(kubeconfig).arg(format!("--queue={queue}"));
        command.arg(format!("--controllers={controllers}"));
        command.args(["--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0"]);
        if let Some(first) = first {
            command.arg(format!("--suffix-from={first}"));
        }
        command
    };
    let first = (plugins > 1).then_some(0);
    match variant {
        Variant::Kubewasm | Variant::KubewasmDesired => {
            vec![kubewasm(setup, kubeconfig, plugins_dir, Some(&setup.compile_cache))]
        }
        Variant::KubewasmCold | Variant::KubewasmPythonSourceCold | Variant::KubewasmPythonSourceColdReused => {
            vec![kubewasm(setup, kubeconfig, plugins_dir, Some(&empty_cache(setup)))]
        }
        Variant::KubewasmPythonSourceUncompiled => {
            let mut command = kubewasm(setup, kubeconfig, plugins_dir, Some(&empty_cache(setup)));
            command.arg("--engine-dir").arg(uncompiled_engines(setup));
            vec![command]
        }
        Variant::KubewasmColdInProcess => {
            let mut command = kubewasm(setup, kubeconfig, plugins_dir, Some(&empty_cache(setup)));
            command.arg("--compile-in-child=false");
            vec![command]
        }
        Variant::KubewasmUnlimited => {
            let mut command = kubewasm(setup, kubeconfig, plugins_dir, Some(&setup.compile_cache));
            command.args(["--plugin-write-qps", "0"]);
            vec![command]
        }
        Variant::KubewasmImpersonated => {
            let mut command = kubewasm(setup, kubeconfig, plugins_dir, Some(&setup.compile_cache));
            command.args(["--plugin-write-qps", "0"]).args(IMPERSONATED);
            vec![command]
        }
        Variant::KubewasmUnelided => {
            let mut command = kubewasm(setup, kubeconfig, plugins_dir, Some(&setup.compile_cache));
            command.args(["--plugin-write-qps", "0", "--elide-unchanged-writes=false"]);
            vec![command]
        }
        Variant::BaselineImpersonated => {
            let baseline = setup.baseline.as_ref().expect("--baseline names the baseline's binary");
            let mut command = run(&baseline.binary, kubeconfig, plugins_dir, Some(&baseline_cache(setup)));
            command.args(["--plugin-write-qps", "0"]).args(IMPERSONATED);
            vec![command]
        }
        Variant::CrFifo => vec![peer("fifo", plugins, first)],
        Variant::CrPriority => vec![peer("priority", plugins, first)],
        Variant::CrProcessesFifo => (0..plugins).map(|i| peer("fifo", 1, first.map(|_| i))).collect(),
    }
}
