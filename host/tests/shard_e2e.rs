//! Sharding between `kubewasm run --sharding auto` processes on a real kube-apiserver, with the
//! `ShardedListAndWatch` feature gate on (the server filters) and off (the hosts filter): every
//! ConfigMap is stamped by the replica whose range holds its namespace; a killed replica's range
//! is taken over, an added replica takes its share, and no two live replicas ever publish
//! overlapping ranges (sampled from their Leases throughout).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kubewasm::shard::{HashRange, SERVING_ANNOTATION, fnv1a64};
use kubewasm_testenv::ControlPlane;

use common::eventually;
use common::process::{HostProcess, kubewasm_run};

/// Generous: a takeover waits for the killed replica's Lease to expire (6 s here), then every
/// moved object is stamped again.
const TIMEOUT: Duration = Duration::from_secs(180);
/// The annotation the stamper fixture writes: its `version` setting, here the replica's name.
const STAMP: &str = "kubewasm.test/version";
/// Namespaces the objects are spread over (the shard key is the namespace).
const NAMESPACES: usize = 30;

/// Objects in the test: 1,500 by default (issue 21 asks for 10,000, which takes several minutes
/// to create and stamp on a 2-core machine; `KUBEWASM_SHARD_E2E_OBJECTS=10000` runs that).
fn objects() -> usize {
    std::env::var("KUBEWASM_SHARD_E2E_OBJECTS").ok().and_then(|n| n.parse().ok()).unwrap_or(1_500)
}

/// A replica `name`, stamping ConfigMaps labelled `label` with its own name.
fn replica(cp: &ControlPlane, lease_ns: &str, label: &str, name: &str, dir: &Path) -> HostProcess {
    let config = format!(
        "maxConcurrent: 4\ngrants:\n  write: [ConfigMap]\nsettings:\n  version: {name}\n  selector: \"{label}\"\n"
    );
    common::install_plugin(dir, "stamper", "fixture_stamper.wasm", &config);
    let (mut command, addr) = kubewasm_run(dir);
    command.arg("--kubeconfig").arg(cp.kubeconfig_path()).arg("--compile-cache").arg(common::test_compile_cache());
    command.args(["--wasm-plugins", "false", "--sharding", "auto", "--leader-election-namespace", lease_ns]);
    // Shorter than controller-runtime's 15/10/2 s so a takeover takes seconds, not minutes.
    command.args(["--leader-election-lease-duration-seconds", "6", "--leader-election-renew-deadline-seconds", "4"]);
    command.args(["--leader-election-retry-period-seconds", "1"]);
    command.env("HOSTNAME", name);
    HostProcess::spawn(command, addr)
}

/// The live members' published ranges (`identity → range`), judged on the wall clock (every
/// process of the test shares it): a Lease counts until `renewTime + leaseDurationSeconds`.
async fn published(leases: &Api<Lease>) -> Vec<(String, HashRange)> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut out = Vec::new();
    for lease in leases.list(&ListParams::default()).await.unwrap() {
        let spec = lease.spec.clone().unwrap_or_default();
        let (Some(holder), Some(renew), Some(secs)) =
            (spec.holder_identity, spec.renew_time, spec.lease_duration_seconds)
        else {
            continue;
        };
        let expires = renew.0 + k8s_openapi::jiff::SignedDuration::from_secs(secs.into());
        let range = lease.metadata.annotations.unwrap_or_default().get(SERVING_ANNOTATION).cloned().unwrap_or_default();
        if let (true, Ok(range)) = (expires > now, HashRange::parse(&range)) {
            out.push((holder, range));
        }
    }
    out
}

/// The replica name (`HOSTNAME`, before `_<random>`) serving each namespace, once the published
/// ranges of exactly `names` cover the hash space.
async fn owners(leases: &Api<Lease>, names: &[&str], namespaces: &[String]) -> BTreeMap<String, String> {
    eventually(&format!("{names:?} serve the whole hash space"), TIMEOUT, || async {
        let ranges = published(leases).await;
        let mut serving: Vec<&str> = ranges.iter().map(|(id, _)| id.split('_').next().unwrap()).collect();
        serving.sort_unstable();
        let owners: Option<BTreeMap<String, String>> = namespaces
            .iter()
            .map(|ns| {
                let (id, _) = ranges.iter().find(|(_, r)| r.contains(fnv1a64(ns)))?;
                Some((ns.clone(), id.split('_').next().unwrap().to_owned()))
            })
            .collect();
        (serving == names).then_some(owners).flatten()
    })
    .await
}

/// Waits until every object carries the stamp of its namespace's owner.
async fn converged(configmaps: &Api<ConfigMap>, label: &str, owners: &BTreeMap<String, String>, total: usize) {
    let what = format!("all {total} ConfigMaps stamped by their range owner");
    eventually(&what, TIMEOUT, || async {
        let listed = configmaps.list(&ListParams::default().labels(label)).await.ok()?;
        let stamped = listed.items.iter().filter(|cm| {
            let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
            let stamp = cm.metadata.annotations.as_ref().and_then(|a| a.get(STAMP));
            stamp.is_some() && stamp == owners.get(ns)
        });
        (listed.items.len() == total && stamped.count() == total).then_some(())
    })
    .await;
}

fn gauge(host: &HostProcess, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    host.metric(name, labels)
}

async fn scenario(cp: &ControlPlane, server_side: bool) {
    let client = cp.admin_client().await;
    let lease_ns = cp.namespace("shard").await;
    let label = format!("kubewasm.test/shard={lease_ns}");
    let leases = Api::<Lease>::namespaced(client.clone(), &lease_ns);
    let mut namespaces = Vec::new();
    for _ in 0..NAMESPACES {
        namespaces.push(cp.namespace("shard-objects").await);
    }
    let total = objects();
    futures::stream::iter(0..total)
        .map(|i| {
            let (client, ns, label) = (client.clone(), namespaces[i % NAMESPACES].clone(), lease_ns.clone());
            async move {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("cm-{i}"), "labels": {"kubewasm.test/shard": label}}}))
                .unwrap();
                Api::<ConfigMap>::namespaced(client, &ns).create(&PostParams::default(), &cm).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
        .unwrap();
    let configmaps = Api::<ConfigMap>::all(client.clone());

    // Sample the Leases throughout: no two live members may ever publish overlapping ranges.
    let overlaps = Arc::new(parking_lot::Mutex::new((0_usize, Vec::<String>::new())));
    let sampler = tokio::spawn({
        let (leases, overlaps) = (leases.clone(), overlaps.clone());
        async move {
            loop {
                let ranges = published(&leases).await;
                {
                    let mut seen = overlaps.lock();
                    seen.0 += 1;
                    for (i, (a, ra)) in ranges.iter().enumerate() {
                        for (b, rb) in &ranges[i + 1..] {
                            if ra.overlaps(rb) {
                                seen.1.push(format!("{a} {ra} and {b} {rb}"));
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut a = replica(cp, &lease_ns, &label, "replica-a", dirs[0].path());
    let mut b = replica(cp, &lease_ns, &label, "replica-b", dirs[1].path());
    let mut c = replica(cp, &lease_ns, &label, "replica-c", dirs[2].path());
    for host in [&mut a, &mut b, &mut c] {
        host.ready(TIMEOUT).await;
    }
    let owned = owners(&leases, &["replica-a", "replica-b", "replica-c"], &namespaces).await;
    converged(&configmaps, &label, &owned, total).await;
    let filter = if server_side { 0.0 } else { 1.0 };
    for host in [&a, &b, &c] {
        let filtering = gauge(host, "kubewasm_shard_client_side_filter", &[("kind", "v1/ConfigMap")]);
        assert_eq!(filtering, Some(filter), "server-side filtering: {server_side}");
        let cached = gauge(host, "kubewasm_informer_objects", &[("kind", "v1/ConfigMap")]).unwrap();
        assert!(cached < total as f64, "a replica caches only its share: {cached} of {total}");
    }

    c.signal("-KILL");
    c.exited(TIMEOUT).await;
    let owned = owners(&leases, &["replica-a", "replica-b"], &namespaces).await;
    converged(&configmaps, &label, &owned, total).await;

    let mut d = replica(cp, &lease_ns, &label, "replica-d", dirs[3].path());
    d.ready(TIMEOUT).await;
    let owned = owners(&leases, &["replica-a", "replica-b", "replica-d"], &namespaces).await;
    converged(&configmaps, &label, &owned, total).await;

    d.signal("-TERM");
    assert!(d.exited(TIMEOUT).await.success(), "a graceful stop exits 0");
    let owned = owners(&leases, &["replica-a", "replica-b"], &namespaces).await;
    converged(&configmaps, &label, &owned, total).await;

    sampler.abort();
    let (samples, seen) = std::mem::take(&mut *overlaps.lock());
    assert!(samples > 10, "the Leases were sampled {samples} times");
    assert!(seen.is_empty(), "live members published overlapping ranges: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "compiles, not yet run green (issue 21): run with --ignored"]
async fn replicas_split_the_objects_with_the_server_side_shard_selector_and_hand_over_ranges() {
    let cp = ControlPlane::builder()
        .apiserver_arg("--feature-gates=ShardedListAndWatch=true")
        .start()
        .expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    scenario(&cp, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "compiles, not yet run green (issue 21): run with --ignored"]
async fn replicas_split_the_objects_by_filtering_themselves_when_the_server_ignores_the_selector() {
    let cp = ControlPlane::shared().expect("kube-apiserver, etcd and kubectl: run `make control-plane`");
    scenario(cp, false).await;
}
