//! Plugins given as source on the host's shared Python engine, against a real kube-apiserver +
//! etcd: a broken source is a load error with its file and line while the version before keeps
//! serving, many source plugins cost one engine compile, and every reconcile runs in an instance
//! no call ran in before. (That a source plugin leaves the
//! same state as its component builds is `languages::the_python_source_…`.)
//!
//! Every plugin here is namespace-defaults (`plugins/python/namespace-defaults`) confined to
//! namespaces of its test's own (`grants.namespaces`), so the tests' Apps never act on each
//! other's Namespaces.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm_host::app::App;
use kubewasm_host::hotload::directory::Change;
use kubewasm_testenv::ControlPlane;
use rstest::rstest;

use common::{eventually, install_source, metric_value, plugin_source};

const CONVERGE: Duration = Duration::from_secs(90);

/// The source of namespace-defaults.
pub(crate) fn namespace_defaults() -> String {
    plugin_source("python/namespace-defaults/namespace_defaults.py")
}

/// Installs namespace-defaults' source as plugin `name` in `dir`, confined to namespace `ns`.
pub(crate) fn install(dir: &std::path::Path, name: &str, source: &str, ns: &str) {
    install_source(dir, name, "namespace_defaults_py.wasm", source, &confined_to(ns));
}

/// The config of a source plugin of these tests: their limits, confined to namespace `ns`.
pub(crate) fn confined_to(ns: &str) -> String {
    format!("limits: {{deadlineMs: 5000, memoryBytes: 134217728}}\ngrants: {{namespaces: {{names: [{ns}]}}}}\n")
}

/// Creates Namespace `ns`; before the plugins confined to it load, so that the host makes their
/// RBAC in it.
pub(crate) async fn create_namespace(client: &kube::Client, ns: &str) {
    let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}

/// Waits for the default quota namespace-defaults makes in `ns`, other than the one of uid
/// `not`: a plugin serves there.
pub(crate) async fn defaults_made(client: &kube::Client, ns: &str, not: Option<&str>) -> ResourceQuota {
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    eventually(&format!("the default quota in {ns}"), CONVERGE, || async {
        quotas.get_opt("default-quota").await.unwrap().filter(|q| q.metadata.uid.as_deref() != not)
    })
    .await
}

/// The App tests run plugins in: the shared compile cache, so the engine compiles once per run.
pub(crate) fn app(client: &kube::Client) -> App {
    common::app(client)
}

#[rstest]
#[case::a_syntax_error("def broken(:", "syntax error", "SyntaxError")]
#[case::a_missing_module("import kubewasm_no_such_module", "import error", "No module named 'kubewasm_no_such_module'")]
#[case::an_exception_at_import(
    "raise RuntimeError('broken at import')",
    "exception at import",
    "RuntimeError: broken at import"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_source_is_a_load_error_at_its_line_and_the_version_before_keeps_serving(
    #[case] broken_line: &str,
    #[case] kind: &str,
    #[case] message: &str,
) {
    let ns = format!("src-broken-{}-{}", kind.split(' ').next().unwrap(), std::process::id());
    let broken = Broken { line: broken_line, kind, message, at_end: "" };
    a_broken_version_is_rejected_and_the_one_before_serves("defaults.py", install, &namespace_defaults(), &ns, broken)
        .await;
}

/// A new version of a plugin given as source, `source` with one broken line appended, and what
/// its load error must say: `kind`, `message`, and `<file>:<line><at_end>`.
pub(crate) struct Broken<'a> {
    pub line: &'a str,
    pub kind: &'a str,
    pub message: &'a str,
    pub at_end: &'a str,
}

/// Serves namespace-defaults' `source` as plugin file `file` (installed by `install`, confined
/// to `ns`), then a `broken` version of it: the load error names the file and line, the kind
/// and the message, and is counted; the version before keeps serving.
pub(crate) async fn a_broken_version_is_rejected_and_the_one_before_serves(
    file: &str,
    install: fn(&std::path::Path, &str, &str, &str),
    source: &str,
    ns: &str,
    broken: Broken<'_>,
) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    create_namespace(&client, ns).await;
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "defaults", source, ns);
    let app = app(&client);
    let mut directory = app.directory_source(dir.path());
    directory.sync().await.unwrap();
    assert_eq!(app.plugins().serving("defaults").await.map(|s| s.revision), Some(1), "the good source serves");
    let quota = defaults_made(&client, ns, None).await;

    // A new version whose last line is broken.
    let text = format!("{}\n{}\n", source.trim_end(), broken.line);
    let line = text.lines().count();
    std::fs::write(dir.path().join(file), &text).unwrap();
    let changes = directory.sync().await.unwrap();
    let err = match changes.as_slice() {
        [(name, Change::Rejected(err))] if name == "defaults" => format!("{err:#}"),
        other => panic!("the broken version was not rejected: {other:?}"),
    };
    for said in [format!("{file}:{line}{}", broken.at_end), broken.kind.to_owned(), broken.message.to_owned()] {
        assert!(err.contains(&said), "the load error does not say {said:?}: {err}");
    }
    let metrics = prometheus::TextEncoder::new().encode_to_string(&app.registry().gather()).unwrap();
    let labels = [("plugin", "defaults"), ("reason", "source")];
    assert_eq!(metric_value(&metrics, "kubewasm_plugin_load_errors_total", &labels), Some(1.0), "{metrics}");

    // The version before still serves: it makes again the quota deleted after the rejection.
    assert_eq!(app.plugins().serving("defaults").await.map(|s| s.revision), Some(1), "the old version serves");
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    quotas.delete("default-quota", &Default::default()).await.unwrap();
    defaults_made(&client, ns, quota.metadata.uid.as_deref()).await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_plugins_of_one_language_share_one_engine_compile() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let (first, second) =
        (format!("src-shared-a-{}", std::process::id()), format!("src-shared-b-{}", std::process::id()));
    create_namespace(&client, &first).await;
    create_namespace(&client, &second).await;
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "defaults-a", &namespace_defaults(), &first);
    install(dir.path(), "defaults-b", &namespace_defaults(), &second);
    let app = app(&client);
    app.directory_source(dir.path()).sync().await.unwrap();
    let runtime = app.plugins().runtime();
    assert_eq!(runtime.engines_compiled(), 1, "the second plugin compiled the engine again");
    assert_eq!(runtime.compiled_reused(), 1, "the second plugin did not reuse the first one's engine");

    // Both serve, each on its own Namespace.
    defaults_made(&client, &first, None).await;
    defaults_made(&client, &second, None).await;
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_of_several_files_in_its_own_directory_serves_and_an_edit_to_one_of_them_is_watched() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = format!("src-dir-{}", std::process::id());
    create_namespace(&client, &ns).await;
    // namespace-defaults, taking its quota's name from a module of its own in a package without
    // an `__init__.py` (a namespace package, as Python allows).
    let main = namespace_defaults()
        .replace("\"quotaName\": \"default-quota\"", "\"quotaName\": names.QUOTA")
        .replace("NAMESPACE, QUOTA =", "from helpers import names\n\nNAMESPACE, QUOTA =");
    assert_eq!(main.matches("names.").count(), 1, "the source changed: {main}");
    let dir = tempfile::tempdir().unwrap();
    let files = [("main.py", main.as_str()), ("helpers/names.py", "QUOTA = \"default-quota\"\n")];
    let root = common::install_source_dir(
        dir.path(),
        "several",
        "namespace_defaults_py.wasm",
        &files,
        "main",
        &confined_to(&ns),
    );
    let app = app(&client);
    // No rescan during the test: only the watch's events can bring the edit.
    let mut source = app.directory_source(dir.path()).rescan_every(Duration::from_secs(3600));
    let changes = source.sync().await.unwrap();
    assert!(matches!(changes.as_slice(), [(name, Change::Applied(_))] if name == "several"), "{changes:?}");
    defaults_made(&client, &ns, None).await;

    // The helper module changes, two directories down from the watched plugin directory.
    let stop = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(source.start_watch(Duration::from_millis(200)).unwrap().run(stop.clone()));
    std::fs::write(root.join("helpers/names.py"), "QUOTA = \"edited-quota\"\n").unwrap();
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), &ns);
    eventually("the quota named by the edited helper", CONVERGE, || async {
        quotas.get_opt("edited-quota").await.unwrap()
    })
    .await;
    assert_eq!(app.plugins().serving("several").await.map(|s| s.revision), Some(2), "the edit is a new version");
    stop.cancel();
    watch.await.unwrap().unwrap();
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_loops_at_import_is_stopped_at_its_deadline_and_rejected() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = format!("src-loop-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let looping = format!("{}\nwhile True:\n    pass\n", namespace_defaults().trim_end());
    let config =
        format!("limits: {{deadlineMs: 1000, memoryBytes: 134217728}}\ngrants: {{namespaces: {{names: [{ns}]}}}}\n");
    install_source(dir.path(), "looper", "namespace_defaults_py.wasm", &looping, &config);
    let app = app(&client);
    let changes = app.directory_source(dir.path()).sync().await.unwrap();
    let err = match changes.as_slice() {
        [(name, Change::Rejected(err))] if name == "looper" => format!("{err:#}"),
        other => panic!("the looping source was not rejected: {other:?}"),
    };
    assert!(err.contains("deadline"), "the load error does not name the deadline: {err}");
    assert!(app.plugins().serving("looper").await.is_none(), "nothing serves");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reconcile_of_a_source_plugin_runs_in_an_instance_no_call_ran_in_before() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = format!("src-fresh-{}", std::process::id());
    create_namespace(&client, &ns).await;
    // namespace-defaults, counting its reconciles in a module-level list, with the count and the
    // Namespace's `round` label on the quota it makes.
    let source = namespace_defaults();
    let counting = source
        .replace("def reconcile(request):\n", "def reconcile(request):\n    CALLS.append(1)\n")
        .replace(
            "\"labels\": {\"app.kubernetes.io/managed-by\": \"kubewasm-namespace-defaults\"}}",
            "\"labels\": {\"app.kubernetes.io/managed-by\": \"kubewasm-namespace-defaults\", \"calls\": \
             str(len(CALLS)), \"round\": (ns[\"metadata\"].get(\"labels\") or {}).get(\"round\", \"0\")}}",
        )
        .replace("NAMESPACE, QUOTA =", "CALLS = []\nNAMESPACE, QUOTA =");
    assert_eq!(counting.matches("CALLS").count(), 3, "the source changed: {source}");
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "counting", &counting, &ns);
    let app = app(&client);
    app.directory_source(dir.path()).sync().await.unwrap();

    for round in 1..=5 {
        let labels = quota_labels_of_round(&client, &ns, round).await;
        assert_eq!(labels.get("calls").map(String::as_str), Some("1"), "round {round}: an instance served twice");
    }
    assert!(app.shut_down(Duration::from_secs(10)).await);
}

/// Labels Namespace `ns` with `round` and waits for the quota a reconcile of that round made
/// (the plugins here copy the label onto it): its labels.
async fn quota_labels_of_round(
    client: &kube::Client,
    ns: &str,
    round: u32,
) -> std::collections::BTreeMap<String, String> {
    let label = serde_json::json!({"metadata": {"labels": {"round": round.to_string()}}});
    Api::<Namespace>::all(client.clone()).patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    eventually(&format!("the quota of round {round}"), CONVERGE, || async {
        let quota = quotas.get_opt("default-quota").await.unwrap()?;
        let labels = quota.metadata.labels.unwrap_or_default();
        (labels.get("round") == Some(&round.to_string())).then_some(labels)
    })
    .await
}

/// namespace-defaults with a token its import draws (`os.urandom`) on the quota it makes, with the
/// Namespace's `round` label; printing a line at import too when `prints`.
fn with_import_token(prints: bool) -> String {
    let source = namespace_defaults();
    let header = if prints {
        "import os\nprint(\"imported\")\nTOKEN = os.urandom(8).hex()\n"
    } else {
        "import os\nTOKEN = os.urandom(8).hex()\n"
    };
    let tokened = source
        .replace(
            "\"labels\": {\"app.kubernetes.io/managed-by\": \"kubewasm-namespace-defaults\"}}",
            "\"labels\": {\"app.kubernetes.io/managed-by\": \"kubewasm-namespace-defaults\", \"token\": TOKEN, \
             \"round\": (ns[\"metadata\"].get(\"labels\") or {}).get(\"round\", \"0\")}}",
        )
        .replace("NAMESPACE, QUOTA =", &format!("{header}NAMESPACE, QUOTA ="));
    assert_eq!(tokened.matches("TOKEN").count(), 2, "the source changed: {source}");
    tokened
}

#[rstest]
#[case::kept_from_one_import(false, 1)]
// Python keeps the stdout stream it printed to: a host resource, which a snapshot cannot carry.
#[case::run_again_when_it_keeps_a_host_resource(true, 3)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_instance_starts_from_the_state_the_versions_one_import_left_unless_the_import_keeps_a_host_resource(
    #[case] prints: bool,
    #[case] tokens: usize,
) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = format!("src-import-{}-{}", u8::from(prints), std::process::id());
    create_namespace(&client, &ns).await;
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "tokened", &with_import_token(prints), &ns);
    let app = app(&client);
    app.directory_source(dir.path()).sync().await.unwrap();

    let mut seen = std::collections::BTreeSet::new();
    for round in 1..=3 {
        seen.insert(quota_labels_of_round(&client, &ns, round).await.get("token").cloned());
    }
    assert_eq!(seen.len(), tokens, "the tokens the imports drew: {seen:?}");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
