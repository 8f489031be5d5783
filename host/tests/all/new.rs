//! `kubewasm new rust|python|js`, as an author who ran `make install` has it: the installed
//! binary on `$PATH` (no `$KUBEWASM`), every command run from outside the checkout. The project
//! is made in a temporary directory, names no path to the checkout, and is built from a copy
//! elsewhere with its own build script (a Python project given as source builds nothing); it passes its offline test (`kubewasm test`, pytest,
//! node --test, each finding `kubewasm` on the PATH) and reconciles on a real kube-apiserver +
//! etcd when its directory is served by the host.
//!
//! The Python and JavaScript builds use the toolchains `make test` installed (`make py-plugins
//! sdk-test js-plugins`, in `$KUBEWASM_TOOLS`, default ~/.cache/kubewasm/tools); without them
//! these tests fail, saying so, rather than download them again. Cold, on 2 cores: the Python
//! project builds in ~30 s and its component compiles once in ~50 s (debug host; the offline test
//! fills the compile cache the host then loads from); the JavaScript one ~15 s and ~25 s.

use crate::common;
use crate::common::project::{self, Installed};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kubewasm_host::app::App;
use kubewasm_testenv::ControlPlane;

/// How long the served plugin may take to write its ConfigMap (a deadline, not a measurement).
/// The build before it is not bounded: cold, it compiles the SDK and k8s-openapi for
/// wasm32-wasip2 (minutes on 2 cores); later runs reuse the target dir under CARGO_TARGET_TMPDIR.
const CONVERGE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rust_project_builds_passes_its_offline_test_and_reconciles_on_the_apiserver() {
    let kubewasm = Installed::new();
    let (_clone, project) = project::scaffold(&kubewasm, "rust", "hello-ns", &[]);
    project::build(&kubewasm, &project, "hello-ns");
    // Its tests/offline.rs runs the installed `kubewasm test` on what build.sh built.
    let mut cargo = kubewasm.command("cargo", &project);
    cargo.args(["test", "--offline"]).env("CARGO_TARGET_DIR", project::rust_target_dir());
    let (out, cache) = offline_test(cargo, &project);
    assert!(out.contains("test result: ok. 1 passed"), "{out}");

    serves_and_reconciles(&project, "hello-ns", Some(&cache)).await;
}

/// Serves `project` (a plugin directory: `<name>.wasm` or `<name>.py` beside `<name>.yaml`) from a host on the
/// shared control plane, and waits for the scaffolded reconciler's owned ConfigMap.
async fn serves_and_reconciles(project: &Path, name: &str, compile_cache: Option<&Path>) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("new").await;
    // The project directory is a plugin directory: the plugin beside its config.
    let app = App::new(client.clone(), compile_cache, None).unwrap();
    let mut source = app.directory_source(project);
    source.sync().await.unwrap();
    assert!(app.plugins().serving(name).await.is_some(), "{name} serves");
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

/// Runs a project's own offline test command as an author runs it: from the project, with the
/// installed `kubewasm` on the PATH and neither `$KUBEWASM` nor `$KUBEWASM_COMPILE_CACHE`. The
/// test keeps the compiled component in the project's `.kubewasm/compile-cache`, which the host
/// below loads it from without compiling it again. Returns the runner's output and that cache.
fn offline_test(mut runner: Command, project: &Path) -> (String, PathBuf) {
    runner.env_remove("KUBEWASM_COMPILE_CACHE").env("KUBECONFIG", "/nonexistent");
    let out = common::run_ok(runner);
    let cache = project.join(".kubewasm/compile-cache");
    assert!(
        std::fs::read_dir(&cache).is_ok_and(|mut entries| entries.next().is_some()),
        "the offline test kept the compiled component in {}",
        cache.display()
    );
    (out, cache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_python_project_is_its_source_passes_its_pytest_and_reconciles_on_the_apiserver_unbuilt() {
    let venv = project::python_toolchain();
    let kubewasm = Installed::new();
    let (_clone, project) = project::scaffold(&kubewasm, "python", "hello-src", &[]);
    assert!(!project.join("build.sh").exists() && project.join("hello-src.py").is_file(), "nothing to build");
    let mut pytest = kubewasm.command(venv.join("bin/pytest"), &project);
    pytest.args(["-q", "-p", "no:cacheprovider"]);
    let (out, cache) = offline_test(pytest, &project);
    assert!(out.contains("1 passed"), "{out}");
    assert!(
        !project::files_under(&project).iter().any(|f| f.extension().is_some_and(|e| e == "wasm")),
        "built nothing"
    );
    serves_and_reconciles(&project, "hello-src", Some(&cache)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_python_component_project_builds_passes_its_pytest_and_reconciles_on_the_apiserver() {
    let venv = project::python_toolchain();
    let sdk = project::checkout().join("plugins/sdk/python");
    let before = project::files_under(&sdk);
    let kubewasm = Installed::new();
    let (_clone, project) = project::scaffold(&kubewasm, "python", "hello-py", &["--component"]);
    project::build(&kubewasm, &project, "hello-py");
    assert_eq!(project::files_under(&sdk), before, "the build wrote nothing into the SDK's sources");
    let mut pytest = kubewasm.command(venv.join("bin/pytest"), &project);
    pytest.args(["-q", "-p", "no:cacheprovider"]);
    let (out, cache) = offline_test(pytest, &project);
    assert!(out.contains("1 passed"), "{out}");
    serves_and_reconciles(&project, "hello-py", Some(&cache)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_js_project_is_its_source_passes_its_node_test_and_reconciles_on_the_apiserver_unbuilt() {
    let kubewasm = Installed::new();
    let (_clone, project) = project::scaffold(&kubewasm, "js", "hello-jsrc", &[]);
    assert!(!project.join("build.sh").exists() && project.join("hello-jsrc.js").is_file(), "nothing to build");
    let mut npm = kubewasm.command("npm", &project);
    npm.args(["test", "--silent"]);
    let (out, cache) = offline_test(npm, &project);
    assert!(out.contains("# pass 1") && out.contains("# fail 0"), "{out}");
    assert!(
        !project::files_under(&project).iter().any(|f| f.extension().is_some_and(|e| e == "wasm")),
        "built nothing"
    );
    assert!(!project.join("node_modules").exists(), "installed nothing");
    serves_and_reconciles(&project, "hello-jsrc", Some(&cache)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_js_component_project_builds_passes_its_node_test_and_reconciles_on_the_apiserver() {
    project::js_toolchain();
    let kubewasm = Installed::new();
    let (_clone, project) = project::scaffold(&kubewasm, "js", "hello-js", &["--component"]);
    project::build(&kubewasm, &project, "hello-js");
    let mut node = kubewasm.command("node", &project);
    node.arg("--test");
    let (out, cache) = offline_test(node, &project);
    assert!(out.contains("# pass 1") && out.contains("# fail 0"), "{out}");
    serves_and_reconciles(&project, "hello-js", Some(&cache)).await;
}
