//! API-server outages against a real kube-apiserver + etcd: the host's client goes through a
//! [`FaultProxy`](kubewasm_testenv::FaultProxy) that the test cuts for 5 s in the middle of a
//! backlog. The breaker pauses the workers instead of burning every key's backoff: no key is
//! charged a retry for the outage, and the backlog converges once the API server answers.

mod common;
mod hotload_support;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::{Desired, Origin};
use kubewasm_host::plugin::PluginConfig;
use kubewasm_testenv::ControlPlane;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

use common::{eventually, metric_values, plugin_module};
use hotload_support::{stamp_of, stamper_config};

/// ConfigMaps in each backlog.
const KEYS: usize = 600;
/// How long the API server is cut off.
const OUTAGE: Duration = Duration::from_secs(5);
/// Give up on convergence after this long (client-go's limiter takes minutes here).
const CONVERGE: Duration = Duration::from_secs(120);

/// The tests of this binary cut off or stop the API server: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Counts WARN and ERROR events of the host while `on`.
#[derive(Default)]
struct LoudLines {
    on: AtomicBool,
    count: AtomicUsize,
}

impl<S: Subscriber> Layer<S> for &'static LoudLines {
    /// Only warnings and errors are counted; without a hint the `log` bridge would pass every
    /// `trace!` of Cranelift's to this layer.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let (level, target) = (*event.metadata().level(), event.metadata().target());
        // kube's HTTP trace layer is off in the host's default filter (telemetry::QUIET).
        let quiet = target.starts_with("kube_client::client::builder");
        if self.on.load(Ordering::SeqCst) && (level == Level::WARN || level == Level::ERROR) && !quiet {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn loud_lines() -> &'static LoudLines {
    static LINES: OnceLock<&'static LoudLines> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines: &'static LoudLines = Box::leak(Box::default());
        tracing_subscriber::registry().with(lines).init();
        lines
    })
}

async fn create_config_maps(client: &kube::Client, ns: &str, label: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let (key, value) = label.split_once('=').unwrap();
    futures::stream::iter(0..KEYS)
        .map(|i| {
            let api = api.clone();
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": { "name": format!("cm-{i:04}"), "labels": { key: value } },
            }))
            .unwrap();
            async move { api.create(&PostParams::default(), &cm).await.unwrap() }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

async fn stamped(client: &kube::Client, ns: &str) -> usize {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items.iter().filter(|cm| stamp_of(cm) == Some("v1")).count()
}

/// Starts the stamper on `ns`'s backlog, with the host's client going through `host_client`.
async fn start(host_client: &kube::Client, label: &str) -> App {
    let app = common::app(host_client);
    let config = PluginConfig::from_yaml(&stamper_config("v1", label, 4)).unwrap();
    let wasm = plugin_module("fixture_stamper.wasm");
    app.plugins().apply(Desired { name: "stamper".into(), origin: Origin::Directory, wasm, config }).await.unwrap();
    app
}

/// Metric `name` of the host, summed over its series (each queue's, say); 0 if it has none.
fn metric(app: &App, name: &str) -> f64 {
    let text = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    metric_values(&text, name, &[]).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_cut_off_from_the_api_server_charges_no_keys_backoff_and_converges_once_it_answers_again() {
    let _serial = SERIAL.lock().await;
    let lines = loud_lines();
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let proxy = cp.fault_proxy();
    let host_client = proxy.client().await;

    // The backlog, cut off for OUTAGE after a sixth of it is done.
    let ns = cp.namespace("outage").await;
    let label = format!("kubewasm.test/outage={ns}");
    create_config_maps(&client, &ns, &label).await;
    let app = start(&host_client, &label).await;
    eventually("a sixth of the backlog stamped", CONVERGE, || async {
        (stamped(&client, &ns).await >= KEYS / 6).then_some(())
    })
    .await;
    lines.on.store(true, Ordering::SeqCst);
    let retries_before = metric(&app, "workqueue_retries_total");
    proxy.cut();
    let cut = Instant::now();
    let remaining = KEYS - stamped(&client, &ns).await;
    eventually("the breaker open", OUTAGE, || async {
        (metric(&app, "kubewasm_apiserver_breaker_open") == 1.0).then_some(())
    })
    .await;
    tokio::time::sleep(OUTAGE.saturating_sub(cut.elapsed())).await;
    // The keys that failed while it was cut off, the reconciles in flight at the cut, were
    // deferred, not retried: none was charged a backoff (with client-go's limiter every key
    // that failed was, and waited minutes after the outage; module docs).
    let retries = metric(&app, "workqueue_retries_total") - retries_before;
    proxy.restore();
    let restored = Instant::now();
    lines.on.store(false, Ordering::SeqCst);
    let loud = lines.count.load(Ordering::SeqCst);
    eventually("the backlog stamped", CONVERGE, || async { (stamped(&client, &ns).await == KEYS).then_some(()) }).await;
    eprintln!(
        "backlog of {KEYS}, cut off for {OUTAGE:?}: the {remaining} keys left took {:?} once it answered; \
         {retries} retries during the outage; {loud} WARN/ERROR lines",
        restored.elapsed()
    );
    assert_eq!(retries, 0.0, "keys charged a backoff for the outage");
    assert_eq!(metric(&app, "kubewasm_apiserver_breaker_opened_total"), 1.0, "one outage, one opening");
    assert_eq!(metric(&app, "kubewasm_apiserver_breaker_open"), 0.0, "closed again");
    assert!(loud <= 20, "{loud} WARN/ERROR lines during a {OUTAGE:?} outage");
    app.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminating_apiserver_that_keeps_its_watches_open_pauses_the_workers_until_it_is_back() {
    let _serial = SERIAL.lock().await;
    if ControlPlane::shared().is_none() {
        return;
    }
    let mut cp = ControlPlane::builder().start().unwrap();
    let client = cp.admin_client().await;
    let ns = cp.namespace("sigterm").await;
    let label = format!("kubewasm.test/outage={ns}");
    create_config_maps(&client, &ns, &label).await;
    let app = start(&client, &label).await;
    eventually("a sixth of the backlog stamped", CONVERGE, || async {
        (stamped(&client, &ns).await >= KEYS / 6).then_some(())
    })
    .await;

    // Writes fail and /readyz fails while the old apiserver drains its watches.
    let retries_before = metric(&app, "workqueue_retries_total");
    cp.terminate_apiserver().unwrap();
    eventually("the breaker open", CONVERGE, || async {
        (metric(&app, "kubewasm_apiserver_breaker_open") == 1.0).then_some(())
    })
    .await;
    let terminated = Instant::now();
    let mut exited = false;
    while !exited && terminated.elapsed() < CONVERGE {
        tokio::time::sleep(Duration::from_millis(200)).await;
        exited = cp.apiserver_exited();
    }
    assert!(exited, "the apiserver did not exit within {CONVERGE:?} of SIGTERM");
    let drained = terminated.elapsed();
    assert_eq!(metric(&app, "kubewasm_apiserver_breaker_open"), 1.0, "open until the apiserver answers");
    let retries = metric(&app, "workqueue_retries_total") - retries_before;
    cp.start_apiserver().unwrap();
    let back = Instant::now();
    eventually("the backlog stamped", CONVERGE, || async { (stamped(&client, &ns).await == KEYS).then_some(()) }).await;
    let after = back.elapsed();
    eprintln!(
        "SIGTERM: the apiserver drained for {drained:?}; {retries} retries meanwhile; the backlog converged {after:?} \
         after it was back"
    );
    assert_eq!(retries, 0.0, "keys charged a backoff while the apiserver was away");
    assert_eq!(metric(&app, "kubewasm_apiserver_breaker_opened_total"), 1.0, "one outage, one opening");
    assert_eq!(metric(&app, "kubewasm_apiserver_breaker_open"), 0.0, "closed again");
    app.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_apiserver_times_writes_out_opens_the_breaker_and_loses_no_key_once_it_thaws() {
    let _serial = SERIAL.lock().await;
    let Some(cp) = ControlPlane::builder().start_or_skip() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("sigstop").await;
    let label = format!("kubewasm.test/outage={ns}");
    create_config_maps(&client, &ns, &label).await;
    let app = start(&client, &label).await;
    eventually("a sixth of the backlog stamped", CONVERGE, || async {
        (stamped(&client, &ns).await >= KEYS / 6).then_some(())
    })
    .await;

    // SIGSTOP: the kernel still accepts connections and buffers the writes in flight, but
    // nothing answers them, and the watches go silent. Without a write timeout the writes wait
    // forever (kube's client has no response timeout) and nothing trips the breaker.
    cp.pause_apiserver().unwrap();
    let paused = Instant::now();
    let open_within = kubewasm_host::plugin::limits::DEFAULT_WRITE_TIMEOUT * 4;
    let opened = tokio::time::timeout(open_within, async {
        while metric(&app, "kubewasm_apiserver_breaker_open") != 1.0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let open_after = paused.elapsed();
    cp.resume_apiserver().unwrap();
    assert!(opened.is_ok(), "the breaker did not open within {open_within:?} of the apiserver hanging");
    let resumed = Instant::now();
    eventually("the backlog stamped", CONVERGE, || async { (stamped(&client, &ns).await == KEYS).then_some(()) }).await;
    let after = resumed.elapsed();
    eprintln!(
        "SIGSTOP: the breaker opened {open_after:?} after the apiserver hung; the backlog converged {after:?} after SIGCONT"
    );
    eventually("the breaker closed", CONVERGE, || async {
        (metric(&app, "kubewasm_apiserver_breaker_open") == 0.0).then_some(())
    })
    .await;
    assert_eq!(metric(&app, "kubewasm_apiserver_breaker_opened_total"), 1.0, "one hang, one opening");
    app.shut_down(Duration::from_secs(5)).await;
}
