//! Swaps against a real kube-apiserver + etcd, as an operator times them: a swap that lowers
//! max-concurrent runs no more reconciles at once than the new number from the swap on, and a
//! version that takes long to compile (a Python component, ~20 s) leaves the old version
//! serving until the new one can serve at once.

mod common;
mod hotload_support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kubewasm::app::App;
use kubewasm::hotload::{Applied, Desired, Origin};
use kubewasm::plugin::PluginConfig;
use kubewasm_testenv::ControlPlane;

use common::{eventually, plugin_wasm};
use hotload_support::{Run, Spans, create_config_maps, stamp_of, stamper_config};

const CONVERGE: Duration = Duration::from_secs(180);

async fn stamped(client: &kube::Client, ns: &str, version: &str) -> usize {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items.iter().filter(|cm| stamp_of(cm) == Some(version)).count()
}

fn stamper(version: &str, label: &str, max_concurrent: u32) -> Desired {
    Desired {
        name: "stamper".into(),
        origin: Origin::Directory,
        wasm: plugin_wasm("fixture_stamper.wasm"),
        config: PluginConfig::from_yaml(&stamper_config(version, label, max_concurrent)).unwrap(),
    }
}

/// The most runs that overlap at any instant.
fn most_at_once(runs: &[Run]) -> usize {
    let mut edges: Vec<(Instant, i32)> = runs.iter().flat_map(|r| [(r.start, 1), (r.end, -1)]).collect();
    // At equal instants an end comes before a start: back-to-back runs do not overlap.
    edges.sort();
    let (mut now, mut most) = (0_i32, 0_i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_swap_that_lowers_max_concurrent_never_runs_more_reconciles_at_once_than_the_new_number() {
    let spans = Spans::install();
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("downsize").await;
    let label = format!("kubewasm.test/downsize={ns}");
    const KEYS: usize = 200;
    create_config_maps(&client, &ns, &label, (0..KEYS).map(|i| format!("cm-{i:04}"))).await;

    // Four workers, all idle in the queue once the backlog is done.
    let app = App::new(client.clone(), None, None).unwrap();
    app.manager().apply(stamper("v1", &label, 4)).await.unwrap();
    eventually("every ConfigMap stamped v1", CONVERGE, || async {
        (stamped(&client, &ns, "v1").await == KEYS).then_some(())
    })
    .await;
    let reconciler = app.manager().reconciler("stamper").await.unwrap();
    assert_eq!(reconciler.workers(), 4);

    // The swap requeues every key; one worker may take them from now on.
    assert_eq!(app.manager().apply(stamper("v2", &label, 1)).await.unwrap(), Applied::Swapped);
    eventually("the idle surplus workers stopped", CONVERGE, || async { (reconciler.workers() == 1).then_some(()) })
        .await;
    eventually("every ConfigMap stamped v2", CONVERGE, || async {
        (stamped(&client, &ns, "v2").await == KEYS).then_some(())
    })
    .await;
    let runs: Vec<Run> = spans.of_namespace(&ns).into_iter().filter(|r| r.revision == 2).collect();
    assert!(runs.len() >= KEYS, "revision 2 reconciled every key: {}", runs.len());
    assert_eq!(most_at_once(&runs), 1, "revision 2 ran more than its one reconcile at a time");
    assert_eq!(reconciler.workers(), 1);
    assert!(app.shut_down(Duration::from_secs(30)).await);
}
