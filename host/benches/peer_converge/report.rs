//! The bench's output: one table row per variant per round, then medians and ratios.

use std::collections::BTreeMap;

use crate::round::Outcome;
use crate::variant::Variant;

/// The machine and its load, so a reader can tell a quiet run from a busy one.
pub fn machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        cpu.lines().find_map(|l| l.strip_prefix("model name")).map_or("?", |m| m.trim_start_matches([' ', '\t', ':']));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("machine: {cpus} CPUs, {model}, load {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
}

/// The per-round table's header.
pub fn header() {
    println!(
        "| round | variant | plugins | namespaces | converge s | settle s | RSS at converge MiB | peak RSS MiB | CPU to converge s | CPU to settle s | apiserver + etcd CPU to converge s | machine busy to converge | applies answered by the API server s | requests by verb |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
}

fn verbs(requests: &BTreeMap<String, u64>) -> String {
    let total: u64 = requests.values().sum();
    let each: Vec<String> = requests.iter().map(|(v, n)| format!("{v} {n}")).collect();
    format!("{total}: {}", each.join(", "))
}

/// One round of one variant.
pub fn line(round: usize, variant: Variant, plugins: usize, o: &Outcome) {
    println!(
        "| {round} | {} | {plugins} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0}% | {:.2} | {} |",
        variant.name(),
        o.namespaces,
        o.converge,
        o.settle,
        o.rss_converge,
        o.peak,
        o.cpu_converge,
        o.cpu_settle,
        o.control_plane_cpu,
        o.machine_busy * 100.0,
        o.apply_server,
        verbs(&o.requests)
    );
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// Medians of one variant's rounds.
struct Medians {
    converge: f64,
    settle: f64,
    rss: f64,
    pss: f64,
    peak: f64,
    peak_pss: f64,
    cpu: f64,
    control_plane_cpu: f64,
    machine_busy: f64,
    apply_server: f64,
}

fn medians(outcomes: &[&Outcome]) -> Medians {
    let of = |f: fn(&Outcome) -> f64| median(outcomes.iter().map(|o| f(o)).collect());
    Medians {
        converge: of(|o| o.converge),
        settle: of(|o| o.settle),
        rss: of(|o| o.rss_converge),
        pss: of(|o| o.pss_converge),
        peak: of(|o| o.peak),
        peak_pss: of(|o| o.peak_pss),
        cpu: of(|o| o.cpu_settle),
        control_plane_cpu: of(|o| o.control_plane_cpu),
        machine_busy: of(|o| o.machine_busy),
        apply_server: of(|o| o.apply_server),
    }
}

/// Medians per variant, then each kubewasm variant against each controller-runtime one.
pub fn summary(results: &[(usize, Variant, Outcome)]) {
    let mut by_variant: BTreeMap<Variant, Vec<&Outcome>> = BTreeMap::new();
    for (_, variant, outcome) in results {
        by_variant.entry(*variant).or_default().push(outcome);
    }
    let m: BTreeMap<Variant, Medians> = by_variant.iter().map(|(v, o)| (*v, medians(o))).collect();
    println!("medians of {} round(s):", by_variant.values().map(Vec::len).max().unwrap_or(0));
    println!(
        "| variant | converge s | settle s | RSS at converge MiB | PSS at converge MiB | peak RSS MiB | peak PSS MiB | CPU to settle s | apiserver + etcd CPU to converge s | machine busy to converge | applies answered by the API server s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (v, x) in &m {
        println!(
            "| {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0}% | {:.2} |",
            v.name(),
            x.converge,
            x.settle,
            x.rss,
            x.pss,
            x.peak,
            x.peak_pss,
            x.cpu,
            x.control_plane_cpu,
            x.machine_busy * 100.0,
            x.apply_server
        );
    }
    let peers: Vec<&Variant> = m.keys().filter(|v| v.is_peer()).collect();
    if let Some(fastest) = peers.iter().min_by(|a, b| m[a].converge.total_cmp(&m[b].converge)) {
        println!("fastest controller-runtime variant (median converge): {}", fastest.name());
    }
    println!();
    println!("ratios kubewasm / controller-runtime (medians; below 1 is kubewasm ahead):");
    println!(
        "| kubewasm | vs | converge | settle | RSS at converge | PSS at converge | peak RSS | peak PSS | CPU to settle |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (ours, x) in m.iter().filter(|(v, _)| !v.is_peer()) {
        for theirs in &peers {
            let y = &m[theirs];
            println!(
                "| {} | {} | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x |",
                ours.name(),
                theirs.name(),
                x.converge / y.converge,
                x.settle / y.settle,
                x.rss / y.rss,
                x.pss / y.pss,
                x.peak / y.peak,
                x.peak_pss / y.peak_pss,
                x.cpu / y.cpu
            );
        }
    }
    println!();
    println!("requests by verb and resource (first round of each variant):");
    for (v, outcomes) in &by_variant {
        let each: Vec<String> = outcomes[0].by_resource.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("- {}: {}", v.name(), each.join(", "));
    }
}

/// kubewasm's resident set per number of plugins, and what each added plugin cost.
pub fn marginal(results: &[(usize, Variant, Outcome)]) {
    let mut by_plugins: BTreeMap<usize, Vec<&Outcome>> = BTreeMap::new();
    for (plugins, _, outcome) in results {
        by_plugins.entry(*plugins).or_default().push(outcome);
    }
    println!("kubewasm resident set by number of plugins (medians):");
    println!(
        "| plugins | RSS at converge MiB | peak RSS MiB | converge s | CPU to settle s | RSS per added plugin MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut previous: Option<(usize, f64)> = None;
    for (plugins, outcomes) in &by_plugins {
        let x = medians(outcomes);
        let per = previous.map_or("".to_owned(), |(p, rss)| format!("{:.2}", (x.rss - rss) / (plugins - p) as f64));
        println!("| {plugins} | {:.1} | {:.1} | {:.2} | {:.2} | {per} |", x.rss, x.peak, x.converge, x.cpu);
        previous = Some((*plugins, x.rss));
    }
}
