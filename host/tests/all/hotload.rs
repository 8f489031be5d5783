//! Hot-loading against a real kube-apiserver + etcd: swaps from the plugin directory under load,
//! rejected versions, informers added and released, and the WasmPlugin CRD as a source.
//!
//! The `stamper` fixture stamps its settings' `version` on ConfigMaps, so the cluster shows which
//! version reconciled each object; a tracing layer records every reconcile span (key, revision,
//! start, end) to check that no key was reconciled by two workers at once.

use crate::common;
use crate::hotload_support;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kubewasm_host::hotload::{Desired, Module, Origin};
use kubewasm_testenv::ControlPlane;
use tokio_util::sync::CancellationToken;

use common::{eventually, install_plugin, metric_value, plugin_module, plugin_wasm};
use hotload_support::{Spans, create_config_maps, stamp_of, stamper_config};

const CONVERGE: Duration = Duration::from_secs(180);

/// Names of the ConfigMaps in `ns` matching `label` not yet stamped `version`.
async fn unstamped(client: &kube::Client, ns: &str, label: &str, version: &str) -> Vec<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default().labels(label)).await.unwrap();
    list.items.iter().filter(|cm| stamp_of(cm) != Some(version)).map(|cm| cm.metadata.name.clone().unwrap()).collect()
}

/// The span recorder is this binary's global subscriber, and the `log` bridge takes its level
/// from it: at TRACE, every `trace!` Cranelift makes while compiling went through the subscriber.
#[test]
fn the_span_recorder_leaves_the_log_crates_level_at_info() {
    Spans::install();
    if std::env::var_os("RUST_LOG").is_some() {
        println!("RUST_LOG is set: the level is what it asks for, not checked");
        return;
    }
    assert_eq!(log::max_level(), log::LevelFilter::Info);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_swap_under_load_loses_no_key_overlaps_no_key_and_ends_on_the_new_version() {
    let spans = Spans::install();
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("swap").await;
    let label = format!("kubewasm.test/swap={ns}");
    const KEYS: usize = 1000;
    create_config_maps(&client, &ns, &label, (0..KEYS).map(|i| format!("cm-{i:04}"))).await;

    let dir = tempfile::tempdir().unwrap();
    install_plugin(dir.path(), "stamper", "fixture_stamper.wasm", &stamper_config("v1", &label, 4));
    let app = common::app(&client);
    let mut source = app.directory_source(dir.path());
    source.sync().await.unwrap();
    let stop = CancellationToken::new();
    let watch = tokio::spawn(source.start_watch(Duration::from_millis(200)).unwrap().run(stop.clone()));

    // Half-way through the 1,000 queued keys, a new config (a new version) is written.
    eventually("500 keys reconciled by revision 1", CONVERGE, || async {
        (spans.of_namespace(&ns).len() >= KEYS / 2).then_some(())
    })
    .await;
    std::fs::write(dir.path().join("stamper.yaml"), stamper_config("v2", &label, 2)).unwrap();
    eventually("revision 2 serving", CONVERGE, || async {
        app.plugins().serving("stamper").await.filter(|s| s.revision == 2)
    })
    .await;
    let workers = app.plugins().workers("stamper").await.unwrap();
    eventually("workers down from 4 to the new version's 2", CONVERGE, || async {
        (workers.running() == 2).then_some(())
    })
    .await;

    eventually("every ConfigMap stamped v2", CONVERGE, || async {
        unstamped(&client, &ns, &label, "v2").await.is_empty().then_some(())
    })
    .await;

    let recorded = spans.of_namespace(&ns);
    let by_rev1: HashSet<_> = recorded.iter().filter(|s| s.revision == 1).map(|s| s.key.clone()).collect();
    let by_rev2: HashSet<_> = recorded.iter().filter(|s| s.revision == 2).map(|s| s.key.clone()).collect();
    assert!(by_rev1.len() >= KEYS / 2, "revision 1 served the first half");
    assert_eq!(by_rev2.len(), KEYS, "every key was reconciled by the new version after the swap");
    let mut per_key: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for s in &recorded {
        per_key.entry(&s.key).or_default().push(s);
    }
    for (key, mut runs) in per_key {
        runs.sort_by_key(|s| s.start);
        for pair in runs.windows(2) {
            assert!(pair[1].start >= pair[0].end, "{key} reconciled by two workers at once: {pair:?}");
        }
    }
    stop.cancel();
    watch.await.unwrap().unwrap();
    assert!(app.shut_down(Duration::from_secs(30)).await);
}

#[rstest::rstest]
#[case::garbage("garbage", None, "not a WebAssembly binary")]
#[case::wrong_world("fixture-wrong-world.wasm", None, "does not fit world")]
#[case::trap_in_describe("fixture_trapper.wasm", Some("settings: {panicIn: describe}\n"), "describe() failed")]
#[case::beyond_grants(
    "fixture_stamper.wasm",
    Some("grants: {read: [ConfigMap], write: [ConfigMap]}\nsettings: {readSecrets: true}\n"),
    "has not approved: read Secret"
)]
#[case::invalid_settings(
    "fixture_stamper.wasm",
    Some(
        "grants: {read: [ConfigMap], write: [ConfigMap]}\nsettings: {version: 2}\nsettingsSchema: {properties: {version: {type: string}}}\n"
    ),
    "/version: want string, but got number"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_version_is_rejected_and_the_old_one_keeps_serving(
    #[case] file: &str,
    #[case] config: Option<&str>,
    #[case] message: &str,
) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("reject").await;
    let label = format!("kubewasm.test/reject={ns}");
    let app = common::app(&client);
    let good = kubewasm_host::plugin::PluginConfig::from_yaml(&stamper_config("v1", &label, 1)).unwrap();
    let desired = |wasm, config| Desired {
        name: "stamper".into(),
        origin: Origin::Directory,
        wasm: Module::hash_blocking(wasm),
        config,
    };
    app.plugins().apply(desired(plugin_wasm("fixture_stamper.wasm"), good)).await.unwrap();

    let bad_wasm = if file == "garbage" { Arc::from(&b"this is not wasm"[..]) } else { plugin_wasm(file) };
    let bad_config = kubewasm_host::plugin::PluginConfig::from_yaml(config.unwrap_or("")).unwrap();
    let err = app.plugins().apply(desired(bad_wasm, bad_config)).await.unwrap_err();
    assert!(format!("{err:#}").contains(message), "{err:#}");
    assert_eq!(app.plugins().serving("stamper").await.unwrap().revision, 1, "the old version still serves");
    let metrics = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let rejected = metric_value(&metrics, "kubewasm_plugin_rejected_versions_total", &[("plugin", "stamper")]);
    assert_eq!(rejected, Some(1.0), "{metrics}");

    // ... and keeps reconciling: a new object is stamped by revision 1.
    create_config_maps(&client, &ns, &label, ["after-reject".to_owned()].into_iter()).await;
    eventually("the new ConfigMap stamped v1", CONVERGE, || async {
        unstamped(&client, &ns, &label, "v1").await.is_empty().then_some(())
    })
    .await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_follow_registration_changes_and_the_last_unload_stops_the_watch() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("unload").await;
    let label = format!("kubewasm.test/unload={ns}");
    let dir = tempfile::tempdir().unwrap();
    let app = common::app(&client);
    let factory = app.plugins().context().factory.clone();
    let mut source = app.directory_source(dir.path());

    install_plugin(dir.path(), "a", "fixture_stamper.wasm", &stamper_config("v1", &label, 1));
    install_plugin(dir.path(), "b", "fixture_stamper.wasm", &stamper_config("v1", &label, 1));
    source.sync().await.unwrap();
    assert_eq!(factory.running().await, 1, "a and b share one ConfigMap informer");

    // b now also reads Pods: one more informer; and back: released once b's old version is gone.
    let with_pods = stamper_config("v1", &label, 1)
        .replace("read: [ConfigMap]", "read: [ConfigMap, Pod]")
        .replace("settings:", "settings:\n  readPods: true");
    std::fs::write(dir.path().join("b.yaml"), &with_pods).unwrap();
    source.sync().await.unwrap();
    assert_eq!(factory.running().await, 2, "b's Pod informer started");
    std::fs::write(dir.path().join("b.yaml"), stamper_config("v1", &label, 1)).unwrap();
    source.sync().await.unwrap();
    eventually("b's Pod informer released", CONVERGE, || async { (factory.running().await == 1).then_some(()) }).await;

    // A WasmPlugin cannot take over a name the directory serves.
    let config = kubewasm_host::plugin::PluginConfig::approving_requests();
    let other =
        Desired { name: "a".into(), origin: Origin::WasmPlugin, wasm: plugin_module("fixture_getter.wasm"), config };
    let err = app.plugins().apply(other).await.unwrap_err();
    assert!(err.to_string().contains("already loaded from the plugin directory"), "{err}");

    std::fs::remove_file(dir.path().join("a.wasm")).unwrap();
    source.sync().await.unwrap();
    assert!(app.plugins().serving("a").await.is_none());
    assert_eq!(factory.running().await, 1, "b still watches ConfigMaps");
    std::fs::remove_file(dir.path().join("b.wasm")).unwrap();
    source.sync().await.unwrap();
    eventually("the ConfigMap watch stopped", CONVERGE, || async { (factory.running().await == 0).then_some(()) })
        .await;
    assert!(app.readiness().is_ready(), "no plugin left, and the directory source is fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_copied_in_piece_by_piece_is_loaded_once_complete() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("copy").await;
    let label = format!("kubewasm.test/copy={ns}");
    let dir = tempfile::tempdir().unwrap();
    let app = common::app(&client);
    let source = app.directory_source(dir.path());
    let stop = CancellationToken::new();
    // The watch is in place once `start_watch` returns: every piece written below is seen.
    let watch = tokio::spawn(source.start_watch(Duration::from_secs(1)).unwrap().run(stop.clone()));

    std::fs::write(dir.path().join("stamper.yaml"), stamper_config("v1", &label, 1)).unwrap();
    let wasm = plugin_wasm("fixture_stamper.wasm");
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(dir.path().join("stamper.wasm")).unwrap();
        for chunk in wasm.chunks(wasm.len() / 4 + 1) {
            file.write_all(chunk).unwrap();
            file.flush().unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let serving = eventually("the plugin serving", CONVERGE, || async { app.plugins().serving("stamper").await }).await;
    assert_eq!(serving.sha256, kubewasm_host::plugin::sha256_hex(&wasm));
    assert_eq!(serving.revision, 1, "no partial file was ever loaded");
    let metrics = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    assert_eq!(metric_value(&metrics, "kubewasm_plugin_rejected_versions_total", &[("plugin", "stamper")]), None);
    stop.cancel();
    watch.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_failed_for_want_of_its_crd_loads_on_a_later_pass_without_a_file_change() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use kubewasm_host::hotload::directory::Change;

    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let dir = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/overlays/examples/plugins/configmap-sync.yaml"
    ));
    install_plugin(dir.path(), "configmap-sync", "configmap_sync.wasm", &config.unwrap());
    let app = common::app(&client);
    let mut source = app.directory_source(dir.path());

    // Its for kind (ConfigMapSync) is not served yet: a wiring error, not the file's fault.
    let changes = source.sync().await.unwrap();
    assert!(
        matches!(&changes[..], [(_, Change::Rejected(e))] if format!("{e:#}").contains("ConfigMapSync")
            && format!("{e:#}").contains("is its CustomResourceDefinition installed?")
            && !format!("{e:#}").contains("Failed to parse error data")),
        "{changes:?}"
    );
    assert!(app.plugins().serving("configmap-sync").await.is_none());

    let crd_yaml =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/crds/examples/configmapsync.yaml"));
    let crd: CustomResourceDefinition = serde_yaml::from_str(&crd_yaml.unwrap()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap();
    crds.patch(&name, &PatchParams::apply("kubewasm-test").force(), &Patch::Apply(&crd)).await.unwrap();

    // The same bytes are tried again on the next pass (the watcher also rescans periodically).
    let deadline = tokio::time::Instant::now() + CONVERGE;
    let serving = loop {
        source.sync().await.unwrap();
        if let Some(serving) = app.plugins().serving("configmap-sync").await {
            break serving;
        }
        assert!(tokio::time::Instant::now() < deadline, "configmap-sync never loaded after its CRD was installed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(serving.revision, 1);
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
