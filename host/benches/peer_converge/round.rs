//! One round of one variant against its own fresh control plane: create the Namespaces, start
//! the controllers, wait until every Namespace has every child (converge), then until the
//! controllers' writes stop (settle), sampling the processes on the way.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use kubewasm_testenv::ControlPlane;
use serde_json::json;

use crate::audit::{self, AuditTail};
use crate::children::Children;
use crate::procs::{self, Procs};
use crate::restart::{self, Restart};
use crate::variant::{self, Setup, Variant};

/// How often the bench looks at the counts and the audit log. Reading counts is free (the
/// watches keep them); the audit log is read incrementally.
const POLL: Duration = Duration::from_millis(50);

/// Every how many polls the proportional set is sampled: reading `smaps_rollup` walks the
/// process's page tables, too much work for every poll.
const PSS_EVERY: usize = 10;

/// What a round asks for.
pub struct Spec {
    /// Namespaces created before the controllers start (the 4 system ones come on top).
    pub namespaces: usize,
    /// Copies of namespace-defaults.
    pub plugins: usize,
    /// Settled once no write came for this long after converging.
    pub quiet: Duration,
    /// Give up on converging (and on settling) after this long.
    pub timeout: Duration,
    /// Once settled, kill the controllers and start them again (`Outcome::restart`).
    pub restart: bool,
}

/// What a round measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Namespaces, system ones included.
    pub namespaces: usize,
    /// Seconds from start until every Namespace had every child.
    pub converge: f64,
    /// Seconds from start until the controllers' last write.
    pub settle: f64,
    /// Resident set (summed over processes) when converged, MiB.
    pub rss_converge: f64,
    /// Proportional set (summed over processes) when converged, MiB.
    pub pss_converge: f64,
    /// Peak resident set (`VmHWM`, summed over processes), MiB.
    pub peak: f64,
    /// The largest proportional set sampled (every [`PSS_EVERY`] polls, and when converged)
    /// until settled, MiB: the kernel keeps no high-water mark of it.
    pub peak_pss: f64,
    /// CPU seconds (user + system) used until converged.
    pub cpu_converge: f64,
    /// CPU seconds used until settled.
    pub cpu_settle: f64,
    /// CPU seconds kube-apiserver and etcd used from the controllers' start until converged.
    pub control_plane_cpu: f64,
    /// Seconds the API server spent answering the controllers' applies until converged.
    pub apply_server: f64,
    /// The share of the machine's CPU time (all CPUs) that was busy from the controllers' start
    /// until converged, whoever used it.
    pub machine_busy: f64,
    /// The controllers' API requests by verb (from the audit log).
    pub requests: BTreeMap<String, u64>,
    /// The same by verb and resource.
    pub by_resource: BTreeMap<String, u64>,
    /// With `Spec::restart`: what the controllers did when started again.
    pub restart: Option<Restart>,
}

/// Runs `variant` once. `work` is a scratch directory for this round.
pub fn run(variant: Variant, spec: &Spec, setup: &Setup, work: &Path) -> Outcome {
    std::fs::create_dir_all(work).unwrap();
    let (policy, log) = (work.join("audit-policy.yaml"), work.join("audit.log"));
    // The controllers run as `admin` (the kubeconfig's user); the bench watches as `restricted`.
    std::fs::write(&policy, audit::policy("admin")).unwrap();
    let mut builder = ControlPlane::builder();
    for arg in audit::apiserver_args(&policy, &log) {
        builder = builder.apiserver_arg(arg);
    }
    let cp = builder.start().expect("a control plane (make control-plane)");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let want = rt.block_on(prepare(&cp, spec.namespaces));
    let children = rt.block_on(async { Children::watch(&cp.restricted_client().await).await });

    let plugins_dir = work.join("plugins");
    variant::plugin_dir(setup, &plugins_dir, spec.plugins, variant.approved(setup), variant.form());
    let commands = variant::commands(variant, setup, cp.kubeconfig_path(), &plugins_dir, spec.plugins);
    let since = Timestamp::try_from(SystemTime::now()).unwrap();
    let (control_plane_start, machine_start) = (procs::cpu_seconds(cp.pids()), procs::machine_cpu_seconds());
    let started = Instant::now();
    let mut procs = Procs::spawn(commands, work, &variant.name());
    let mut audit = AuditTail::new(&log, since);
    let target = want * spec.plugins;
    let mut peak_pss: f64 = 0.0;
    let mut polls = 0usize;
    let mut sample_pss = |procs: &Procs| {
        polls += 1;
        if polls.is_multiple_of(PSS_EVERY) {
            peak_pss = peak_pss.max(procs.pss_mib());
        }
    };
    loop {
        let (quotas, policies) = children.counts();
        if quotas >= target && policies >= target {
            break;
        }
        procs.check_running();
        sample_pss(&procs);
        let elapsed = started.elapsed();
        assert!(
            elapsed < spec.timeout,
            "{} did not converge in {elapsed:?}: {quotas} quotas, {policies} policies of {target}",
            variant.name()
        );
        std::thread::sleep(POLL);
        audit.poll();
    }
    let converge = started.elapsed().as_secs_f64();
    audit.poll();
    let apply_server = audit.apply_seconds;
    let (rss_converge, pss_converge, cpu_converge) = (procs.rss_mib(), procs.pss_mib(), procs.cpu_seconds());
    // Where the memory goes at converge, mapping by mapping, when asked.
    if let Some(dir) = std::env::var_os("KUBEWASM_BENCH_SMAPS") {
        procs.save_smaps(Path::new(&dir), &variant.name());
    }
    let control_plane_cpu = procs::cpu_seconds(cp.pids()) - control_plane_start;
    let machine = procs::machine_cpu_seconds();
    let machine_busy = (machine.0 - machine_start.0) / (machine.1 - machine_start.1);
    loop {
        audit.poll();
        let last = audit.last_write.unwrap_or(since);
        let quiet_since = Timestamp::try_from(SystemTime::now()).unwrap().duration_since(last);
        if quiet_since.as_secs_f64() >= spec.quiet.as_secs_f64() {
            break;
        }
        procs.check_running();
        sample_pss(&procs);
        assert!(started.elapsed() < spec.timeout * 2, "{} did not settle", variant.name());
        std::thread::sleep(POLL);
    }
    let settle = audit.last_write.map_or(0.0, |t| t.duration_since(since).as_secs_f64());
    let mut outcome = Outcome {
        namespaces: want,
        converge,
        settle,
        rss_converge,
        pss_converge,
        peak: procs.peak_mib(),
        peak_pss: peak_pss.max(pss_converge).max(procs.pss_mib()),
        cpu_converge,
        cpu_settle: procs.cpu_seconds(),
        control_plane_cpu,
        apply_server,
        machine_busy,
        requests: audit.requests.clone(),
        by_resource: audit.by_resource.clone(),
        restart: None,
    };
    drop(procs);
    if spec.restart {
        let commands = variant::commands(variant, setup, cp.kubeconfig_path(), &plugins_dir, spec.plugins);
        outcome.restart = Some(restart::run(commands, &log, work, &variant.name(), spec.quiet, spec.timeout));
    }
    drop(rt);
    drop(cp);
    outcome
}

/// Creates the Namespaces (16 at a time) as `admin`, lets `restricted` list and watch the
/// children, and returns how many Namespaces there are in all.
async fn prepare(cp: &ControlPlane, namespaces: usize) -> usize {
    let client = cp.admin_client().await;
    let api = Api::<Namespace>::all(client.clone());
    stream::iter(0..namespaces)
        .map(|i| {
            let api = api.clone();
            async move {
                let ns: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": format!("bench-{i}")}})).unwrap();
                api.create(&PostParams::default(), &ns).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("creating the Namespaces");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "bench-watch-children"},
        "rules": [
            {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list", "watch"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "watch"]}
        ]
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bench-watch-children"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-watch-children"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": cp.restricted_user()}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone()).create(&PostParams::default(), &role).await.unwrap();
    Api::<ClusterRoleBinding>::all(client.clone()).create(&PostParams::default(), &binding).await.unwrap();
    Api::<Namespace>::all(client).list_metadata(&ListParams::default()).await.unwrap().items.len()
}
