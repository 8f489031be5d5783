//! `kubewasm new rust`: a project outside the repository is scaffolded, built with its own
//! build script, passes its offline test through `kubewasm test`, and reconciles on a real
//! kube-apiserver + etcd when its directory is served by the host.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kubewasm::app::App;
use kubewasm_testenv::ControlPlane;

/// How long the served plugin may take to write its ConfigMap (a deadline, not a measurement).
/// The build before it is not bounded: cold, it compiles the SDK and k8s-openapi for
/// wasm32-wasip2 (minutes on 2 cores); later runs reuse the target dir under CARGO_TARGET_TMPDIR.
const CONVERGE: Duration = Duration::from_secs(120);

fn kubewasm(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    command.args(args);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rust_project_builds_passes_its_offline_test_and_reconciles_on_the_apiserver() {
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("hello-ns");
    let dir = project.display().to_string();
    let created = common::run_ok(kubewasm(&["new", "rust", "hello-ns", "--dir", &dir]));
    assert!(created.contains("build.sh"), "{created}");
    let again = kubewasm(&["new", "rust", "hello-ns", "--dir", &dir]).output().unwrap();
    assert!(!again.status.success(), "a project is never written over");

    let mut build = Command::new(project.join("build.sh"));
    build.arg("--offline").env("CARGO_TARGET_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("new-e2e-target"));
    common::run_ok(build);
    let wasm = project.join("hello-ns.wasm").display().to_string();
    let (fixtures, expected) = (format!("{dir}/tests/fixtures.yaml"), format!("{dir}/tests/expected.yaml"));
    let cache = common::test_compile_cache().display().to_string();
    let args = ["test", &wasm, "--objects", &fixtures, "--expect", &expected, "--compile-cache", &cache];
    let mut offline = kubewasm(&args);
    offline.env("KUBECONFIG", "/nonexistent");
    common::run_ok(offline);

    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("new").await;
    // The project directory is a plugin directory: hello-ns.wasm beside hello-ns.yaml.
    let app = App::new(client.clone(), None, None).unwrap();
    let mut source = app.directory_source(&project);
    source.sync().await.unwrap();
    assert!(app.manager().serving("hello-ns").await.is_some(), "hello-ns serves");
    let welcome: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let greeting = common::eventually("the welcome ConfigMap", CONVERGE, || async {
        welcome.get_opt("welcome").await.ok().flatten()?.data?.remove("greeting")
    })
    .await;
    assert_eq!(greeting, format!("hello, {ns}"));
    let owner = Api::<Namespace>::all(client).get(&ns).await.unwrap();
    let cm = welcome.get("welcome").await.unwrap();
    assert_eq!(cm.metadata.owner_references.unwrap()[0].uid, owner.metadata.uid.unwrap(), "owned by its Namespace");
    assert!(app.shut_down(Duration::from_secs(10)).await);
}
