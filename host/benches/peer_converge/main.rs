//! Converge side by side: kubewasm against controller-runtime (`benches/go/controller-runtime`)
//! on namespace-defaults, in interleaved rounds, each variant against its own fresh control plane
//! (BENCHMARKS.md, "Converge beside controller-runtime").
//!
//! `make bench-converge` (one controller), `make bench-converge-ten` (`--plugins 10`),
//! `ARGS=--restart` (then kill and start again over the converged objects) and
//! `make bench-plugin-rss` (`--marginal 1,2,5,10,20`); `ARGS="--namespaces 50 --rounds 1"`
//! passes arguments. `make bench-latency` (`--latency`): event → reconcile latency instead. `cargo bench -p kubewasm --bench peer_converge -- --help` lists them.

#[path = "../../tests/common/mod.rs"]
mod common;

mod audit;
mod children;
mod latency;
mod procs;
mod report;
mod restart;
mod round;
mod variant;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use kubewasm_testenv::ControlPlane;

use round::Spec;
use variant::{Form, Setup, Variant};

/// Converge benchmark: kubewasm vs controller-runtime, side by side.
#[derive(Debug, Parser)]
struct Args {
    /// Namespaces created before the controllers start (the 4 system ones come on top).
    #[arg(long, env = "KUBEWASM_BENCH_NAMESPACES", default_value_t = 2000)]
    namespaces: usize,
    /// Rounds; in each, every variant runs once, in turn.
    #[arg(long, env = "KUBEWASM_BENCH_ROUNDS", default_value_t = 3)]
    rounds: usize,
    /// Copies of namespace-defaults, each under its own name with its own child names.
    #[arg(long, env = "KUBEWASM_BENCH_PLUGINS", default_value_t = 1)]
    plugins: usize,
    /// Variants in the order they take turns; default: kubewasm, cr-fifo, kubewasm-cold,
    /// cr-priority with one plugin, kubewasm, cr-processes-fifo, cr-fifo with more.
    #[arg(long, env = "KUBEWASM_BENCH_VARIANTS", value_enum, value_delimiter = ',')]
    variants: Vec<Variant>,
    /// Instead of a side-by-side run: kubewasm (warm cache) with each of these numbers of
    /// plugins, for the resident set each added plugin costs.
    #[arg(long, env = "KUBEWASM_BENCH_MARGINAL", value_delimiter = ',')]
    marginal: Vec<usize>,
    /// Instead of converging: the event → reconcile latency under a steady stream of updates
    /// (kubewasm, cr-fifo, cr-priority unless `--variants` says otherwise).
    #[arg(long)]
    latency: bool,
    /// Latency: ConfigMaps the controller caches (updates go round them).
    #[arg(long, default_value_t = 500)]
    latency_objects: usize,
    /// Latency: updates per second.
    #[arg(long, default_value_t = 500)]
    latency_rate: u32,
    /// Latency: seconds of updates per round.
    #[arg(long, default_value_t = 20)]
    latency_seconds: u32,
    /// Settled: no write by the controllers for this many seconds after converging.
    #[arg(long, env = "KUBEWASM_BENCH_QUIET_SECONDS", default_value_t = 5.0)]
    quiet_seconds: f64,
    /// Once settled, kill the controllers and start them again over the converged objects:
    /// their writes and time until idle (issue 30).
    #[arg(long)]
    restart: bool,
    /// Give up on a round after this many seconds.
    #[arg(long, env = "KUBEWASM_BENCH_TIMEOUT_SECONDS", default_value_t = 600)]
    timeout_seconds: u64,
    /// The controller-runtime peer; default: `<target dir>/bench-peer/controller-runtime`
    /// (`make bench-peer` builds it there).
    #[arg(long, env = "KUBEWASM_BENCH_PEER")]
    peer: Option<PathBuf>,
    /// The host binary; default: this build's release `kubewasm`. The image runs the static
    /// musl build (`make image`: `<target>/image-build/x86_64-unknown-linux-musl/image/kubewasm`).
    #[arg(long, env = "KUBEWASM_BENCH_KUBEWASM")]
    kubewasm: Option<PathBuf>,
    /// Another `kubewasm` build for the `baseline-impersonated` variant (e.g. main before a
    /// change, built with `cargo build --release` in a worktree).
    #[arg(long, env = "KUBEWASM_BENCH_BASELINE")]
    baseline: Option<PathBuf>,
    /// The baseline predates approvals (issue 49): its plugin configs carry no `grants:`.
    #[arg(long)]
    baseline_unapproved: bool,
    /// namespace-defaults built at the baseline's commit (`make rust-plugins` in its worktree),
    /// for a baseline that cannot load today's component (one before contract 0.3).
    #[arg(long)]
    baseline_plugin: Option<PathBuf>,
    /// Set by `cargo bench`; without it (`cargo test --benches`) nothing runs.
    #[arg(long, hide = true)]
    bench: bool,
}

/// `<target dir>` from this bench's path, `<target>/release/deps/peer_converge-<hash>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).expect("the bench runs from <target>/<profile>/deps").to_owned()
}

/// Runs `binary` once with compile cache `cache` until the component `form` says is in it
/// (`approved`: with the plugin config's approvals).
fn warm_compile_cache(setup: &Setup, work: &Path, binary: &Path, approved: bool, form: Form, cache: &Path) {
    let started = Instant::now();
    let cp = ControlPlane::builder().start().expect("a control plane (make control-plane)");
    let plugins = work.join(format!("warm-up-{approved}-{}", form.baseline));
    variant::plugin_dir(setup, &plugins, 1, approved, form);
    let mut command = variant::run(binary, cp.kubeconfig_path(), &plugins, Some(cache));
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let cached = |dir: &std::path::Path| {
        walk(dir).iter().any(|f| {
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            !name.contains(".wip") && !name.ends_with(".stats")
        })
    };
    while !cached(cache) {
        assert!(child.try_wait().unwrap().is_none(), "kubewasm exited while warming the compile cache");
        assert!(started.elapsed() < Duration::from_secs(300), "the compile cache stayed empty");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    println!("compile cache warmed in {:.1} s", started.elapsed().as_secs_f64());
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

/// Round `round`'s order (from 1): each round starts one run later than the one before, so that
/// no variant always runs first (the first slot of a round measured slower on this VM).
fn rotated<T: Copy>(runs: &[T], round: usize) -> impl Iterator<Item = T> + '_ {
    (0..runs.len()).map(move |i| runs[(i + round - 1) % runs.len()])
}

/// The latency rounds, interleaved like the converge ones.
fn run_latency(args: &Args, setup: &Setup, work: &std::path::Path) {
    let variants = if args.variants.is_empty() {
        vec![Variant::Kubewasm, Variant::CrFifo, Variant::CrPriority]
    } else {
        args.variants.clone()
    };
    let spec = latency::Spec { objects: args.latency_objects, rate: args.latency_rate, seconds: args.latency_seconds };
    println!("| round | variant | updates | reconciles | p50 | p99 | max |\n|---|---|---|---|---|---|---|");
    let mut results = Vec::new();
    for r in 1..=args.rounds {
        for variant in rotated(&variants, r) {
            let outcome = latency::run(variant, &spec, setup, &work.join(format!("latency-{r}-{}", variant.name())));
            latency::line(r, variant, &outcome);
            results.push((variant, outcome));
        }
    }
    latency::summary(&results);
}

fn main() {
    let mut args = Args::parse();
    if !args.bench {
        return;
    }
    let work = tempfile::Builder::new().prefix("kubewasm-peer-converge-").tempdir().unwrap();
    let setup = Setup {
        kubewasm: args.kubewasm.clone().unwrap_or_else(|| env!("CARGO_BIN_EXE_kubewasm").into()),
        peer: args.peer.clone().unwrap_or_else(|| target_dir().join("bench-peer/controller-runtime")),
        plugin_dir: common::plugin_dir(),
        compile_cache: work.path().join("compile-cache"),
        baseline: args.baseline.clone().map(|binary| variant::Baseline {
            binary,
            approved: !args.baseline_unapproved,
            component: args.baseline_plugin.clone(),
        }),
    };
    assert!(setup.peer.exists(), "{}: build it with `make bench-peer`", setup.peer.display());
    report::machine();
    if args.latency {
        run_latency(&args, &setup, work.path());
        return;
    }
    let marginal = !args.marginal.is_empty();
    if args.variants.is_empty() {
        args.variants = if marginal { vec![Variant::Kubewasm] } else { Variant::defaults(args.plugins) };
    }
    let spec = |plugins| Spec {
        namespaces: args.namespaces,
        plugins,
        quiet: Duration::from_secs_f64(args.quiet_seconds),
        timeout: Duration::from_secs(args.timeout_seconds),
        restart: args.restart,
    };
    if args
        .variants
        .iter()
        .any(|v| !v.is_peer() && !matches!(v, Variant::KubewasmCold | Variant::KubewasmColdInProcess))
    {
        warm_compile_cache(&setup, work.path(), &setup.kubewasm, true, Form::default(), &setup.compile_cache);
    }
    if let (Some(baseline), true) = (&setup.baseline, args.variants.contains(&Variant::BaselineImpersonated)) {
        let form = Form { baseline: true, ..Default::default() };
        let cache = variant::baseline_cache(&setup);
        warm_compile_cache(&setup, work.path(), &baseline.binary, baseline.approved, form, &cache);
    }
    let runs: Vec<(usize, Variant)> = if marginal {
        args.marginal.iter().map(|&p| (p, Variant::Kubewasm)).collect()
    } else {
        args.variants.iter().map(|&v| (args.plugins, v)).collect()
    };
    let mut results = Vec::new();
    report::header();
    for r in 1..=args.rounds {
        for (plugins, variant) in rotated(&runs, r) {
            let dir = work.path().join(format!("round-{r}-{}-{plugins}", variant.name()));
            let outcome = round::run(variant, &spec(plugins), &setup, &dir);
            report::line(r, variant, plugins, &outcome);
            if let Some(restart) = &outcome.restart {
                restart::line(r, variant, restart);
            }
            results.push((plugins, variant, outcome));
        }
    }
    println!();
    if marginal {
        report::marginal(&results);
    } else {
        report::summary(&results);
        restart::summary(&results);
    }
}
