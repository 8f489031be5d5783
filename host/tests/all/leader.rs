//! Leader election between `kubewasm run` processes on a real kube-apiserver: the Lease holder
//! reconciles and the follower only keeps its caches warm; after the leader is killed the
//! follower takes over and everything converges; a graceful stop releases the Lease; a leader
//! that cannot renew exits non-zero, also while it drains after SIGTERM.

use crate::common;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm_testenv::ControlPlane;

use common::eventually;
use common::process::{HostProcess, kubewasm_run};

/// Generous: a takeover waits for the killed leader's lease to expire (6 s here).
const TIMEOUT: Duration = Duration::from_secs(90);

/// A replica: namespace-defaults, electing on `lease_ns/kubewasm`, identity `<name>_<random>`.
fn replica(plugins: &Path, cp: &ControlPlane, lease_ns: &str, name: &str) -> HostProcess {
    let mut command = kubewasm_run(plugins);
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).arg("--compile-cache").arg(common::test_compile_cache());
    // Plugins from the directory only: the shared control plane has no WasmPlugin CRD.
    command.args(["--wasm-plugins", "false", "--leader-elect", "--leader-election-namespace", lease_ns]);
    // Shorter than controller-runtime's 15/10/2 s so the takeover test takes seconds, not minutes.
    command.args(["--leader-election-lease-duration-seconds", "6", "--leader-election-renew-deadline-seconds", "4"]);
    command.args(["--leader-election-retry-period-seconds", "1"]);
    command.env("HOSTNAME", name);
    HostProcess::spawn(command)
}

/// Takes the Lease for an `intruder`, for an hour: the holder's renewals fail from now on.
async fn take_lease(leases: &Api<Lease>) {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now());
    let taken =
        serde_json::json!({"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 3600, "renewTime": now}});
    leases.patch("kubewasm", &PatchParams::default(), &Patch::Merge(&taken)).await.unwrap();
}

fn leading(host: &HostProcess) -> Option<f64> {
    host.metric("leader_election_master_status", &[("name", "kubewasm")])
}

fn reconciles(host: &HostProcess) -> f64 {
    let metrics = host.get("/metrics").unwrap_or_default();
    ["success", "error", "requeue", "requeue_after"]
        .iter()
        .filter_map(|result| {
            common::metric_value(
                &metrics,
                "controller_runtime_reconcile_total",
                &[("controller", "namespace-defaults"), ("result", result)],
            )
        })
        .sum()
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get_opt("kubewasm").await.unwrap()?.spec?.holder_identity
}

async fn new_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

async fn quota_in(client: &kube::Client, ns: &str) -> ResourceQuota {
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    eventually(&format!("the default quota in {ns}"), TIMEOUT, || async {
        quotas.get_opt("default-quota").await.unwrap()
    })
    .await
}

fn plugins() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::install_plugin(dir.path(), "namespace-defaults", "namespace_defaults.wasm", "{}\n");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_follower_takes_over_when_it_is_killed() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let client = cp.admin_client().await;
    let lease_ns = cp.namespace("leader").await;
    let leases = Api::<Lease>::namespaced(client.clone(), &lease_ns);
    let plugins = plugins();

    let mut a = replica(plugins.path(), &cp, &lease_ns, "replica-a");
    a.ready(TIMEOUT).await;
    eventually("replica-a leads", TIMEOUT, || async { leading(&a).filter(|v| *v == 1.0) }).await;
    let mut b = replica(plugins.path(), &cp, &lease_ns, "replica-b");
    b.ready(TIMEOUT).await;
    assert_eq!(leading(&b), Some(0.0), "a second replica follows");
    assert!(holder(&leases).await.is_some_and(|h| h.starts_with("replica-a_")));

    let first = format!("{lease_ns}-first");
    new_namespace(&client, &first).await;
    quota_in(&client, &first).await;
    assert!(reconciles(&a) >= 1.0, "the leader reconciled");
    assert_eq!(reconciles(&b), 0.0, "the follower, ready with warm caches, did not reconcile");
    assert!(b.get("/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")), "the follower is ready");

    a.signal("-KILL");
    a.exited(TIMEOUT).await;
    let second = format!("{lease_ns}-second");
    new_namespace(&client, &second).await;
    eventually("replica-b leads after replica-a was killed", TIMEOUT, || async { leading(&b).filter(|v| *v == 1.0) })
        .await;
    assert!(holder(&leases).await.is_some_and(|h| h.starts_with("replica-b_")));
    quota_in(&client, &second).await;
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &first);
    quotas.delete("default-quota", &DeleteParams::default()).await.unwrap();
    quota_in(&client, &first).await;
    assert!(reconciles(&b) >= 1.0, "the new leader reconciles");

    b.signal("-TERM");
    assert!(b.exited(TIMEOUT).await.success(), "a graceful stop exits 0");
    assert_eq!(holder(&leases).await, None, "a graceful stop releases the Lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_its_lease_exits_non_zero() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let client = cp.admin_client().await;
    let lease_ns = cp.namespace("leader-lost").await;
    let leases = Api::<Lease>::namespaced(client.clone(), &lease_ns);
    let plugins = plugins();
    let mut a = replica(plugins.path(), &cp, &lease_ns, "replica-a");
    a.ready(TIMEOUT).await;
    eventually("replica-a leads", TIMEOUT, || async { leading(&a).filter(|v| *v == 1.0) }).await;

    // Someone else holds the Lease now, for an hour: replica-a's renewals fail.
    take_lease(&leases).await;
    let status = a.exited(TIMEOUT).await;
    assert_eq!(status.code(), Some(1), "a leader that lost its lease exits 1, as controller-runtime does");
    assert_eq!(holder(&leases).await.as_deref(), Some("intruder"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_while_draining_exits_at_once_without_writing() {
    use k8s_openapi::api::core::v1::ConfigMap;

    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    let client = cp.admin_client().await;
    let lease_ns = cp.namespace("leader-drain").await;
    let leases = Api::<Lease>::namespaced(client.clone(), &lease_ns);
    let plugins = tempfile::tempdir().unwrap();
    // A reconcile that takes 30 s and then writes; the grace period would let it finish.
    let config = "grants: {write: [ConfigMap]}\nlimits: {deadlineMs: 60000}\nsettings: {sleepMs: 30000}\n";
    common::install_plugin(plugins.path(), "sleeper", "fixture_sleeper.wasm", config);
    let mut command = kubewasm_run(plugins.path());
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).arg("--compile-cache").arg(common::test_compile_cache());
    command.args(["--wasm-plugins", "false", "--leader-elect", "--leader-election-namespace", &lease_ns]);
    command.args(["--leader-election-lease-duration-seconds", "6", "--leader-election-renew-deadline-seconds", "4"]);
    command.args(["--leader-election-retry-period-seconds", "1", "--shutdown-grace-seconds", "60"]);
    command.env("HOSTNAME", "replica-a");
    let mut a = HostProcess::spawn(command);
    a.ready(TIMEOUT).await;
    eventually("replica-a leads", TIMEOUT, || async { leading(&a).filter(|v| *v == 1.0) }).await;

    let ns = cp.namespace("leader-drain-objects").await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "slow", "labels": {"kubewasm.dev/fixture": "sleeper"}}}))
    .unwrap();
    configmaps.create(&PostParams::default(), &cm).await.unwrap();
    eventually("a reconcile in flight", TIMEOUT, || async {
        a.metric("controller_runtime_active_workers", &[("controller", "sleeper")]).filter(|v| *v >= 1.0)
    })
    .await;

    a.signal("-TERM");
    take_lease(&leases).await;
    let lost_at = std::time::Instant::now();
    let status = a.exited(TIMEOUT).await;
    assert_eq!(status.code(), Some(1), "a leader that lost its lease while draining exits 1");
    let took = lost_at.elapsed();
    assert!(took < Duration::from_secs(15), "it exited {took:?} after losing the lease, not at once");
    let slept = configmaps.get("slow").await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!slept.contains_key("kubewasm.dev/slept"), "the reconcile in flight wrote after the lease was lost");
    assert_eq!(holder(&leases).await.as_deref(), Some("intruder"));
}

/// Hosts started at the same time (as these tests do) each bind a port of their own, and a test
/// finds it from the process: a port picked by the test and handed over could be taken by
/// another host first, and the test would then watch that host instead.
#[test]
fn a_test_finds_the_port_a_process_or_its_forked_child_chose_and_listens_on() {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};

    // `sh` forks python (`; true` keeps sh from exec'ing it), which picks any free port.
    let mut server = Command::new("sh")
        .args(["-c", "python3 -u -m http.server 0 --bind 127.0.0.1; true"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    // "Serving HTTP on 127.0.0.1 port 43210 (http://127.0.0.1:43210/) ..."
    let port: u16 = line.split(" port ").nth(1).and_then(|rest| rest.split(' ').next()).unwrap().parse().unwrap();
    let found = common::process::listening_addr(server.id());
    let _ = Command::new("pkill").args(["-P", &server.id().to_string()]).status();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(found, Some(std::net::SocketAddr::from(([127, 0, 0, 1], port))), "python said: {line}");
}
