//! `kubewasm new rust|python|js`: a project outside the repository, with the SDK vendored and no
//! path to the checkout in it, is scaffolded, built with its own build script, passes its offline test through `kubewasm test` (cargo's, pytest, node
//! --test), and reconciles on a real kube-apiserver + etcd when its directory is served by the host.
//!
//! The Python and JavaScript builds use the toolchains `make test` installed (`make py-plugins
//! sdk-test js-plugins`, in `$KUBEWASM_TOOLS`, default ~/.cache/kubewasm/tools); without them
//! these tests fail, saying so, rather than download them again. Cold, on 2 cores: the Python
//! project builds in ~30 s and its component compiles once in ~50 s (debug host; the offline test
//! fills the compile cache the host then loads from); the JavaScript one ~15 s and ~25 s.

use crate::common;

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

/// Where the Makefile installs the Python and JavaScript toolchains (and build.sh looks).
fn tools_dir() -> PathBuf {
    std::env::var_os("KUBEWASM_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/kubewasm/tools"))
}

/// The componentize-py venv `make py-plugins sdk-test` installed; panics, saying how to get it.
fn python_toolchain() -> PathBuf {
    let pins = include_str!("../../../plugins/python/requirements.txt");
    let version = pins.lines().find_map(|l| l.strip_prefix("componentize-py==")).expect("componentize-py pinned");
    let venv = tools_dir().join(format!("componentize-py-{version}"));
    for tool in ["componentize-py", "pytest"] {
        assert!(
            venv.join("bin").join(tool).is_file(),
            "no {tool} in {}: install the Python toolchain with `make py-plugins sdk-test` (`make test` does)",
            venv.display()
        );
    }
    venv
}

/// The JavaScript toolchain `make js-plugins` installed (named by its lock file's hash, which a
/// `kubewasm new js` project carries byte for byte); panics, saying how to get it.
fn js_toolchain() -> PathBuf {
    use sha2::Digest as _;
    let manifests =
        [include_str!("../../../plugins/js/package.json"), include_str!("../../../plugins/js/package-lock.json")];
    let hash = hex::encode(sha2::Sha256::digest(manifests.concat()));
    let dir = tools_dir().join(format!("js-{}", &hash[..16]));
    assert!(
        dir.join(".installed").is_file(),
        "no JavaScript toolchain in {}: install it with `make js-plugins` (`make test` does)",
        dir.display()
    );
    dir
}

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
    names_no_checkout(&project);
    let again = kubewasm(&["new", "rust", "hello-ns", "--dir", &dir]).output().unwrap();
    assert!(!again.status.success(), "a project is never written over");

    let mut build = Command::new(project.join("build.sh"));
    build.arg("--offline").env("CARGO_TARGET_DIR", Path::new(env!("CARGO_TARGET_TMPDIR")).join("new-e2e-target"));
    common::run_ok(build);
    let wasm = project.join("hello-ns.wasm").display().to_string();
    let (fixtures, expected) = (format!("{dir}/tests/fixtures.yaml"), format!("{dir}/tests/expected.yaml"));
    let cache = common::test_compile_cache().display().to_string();
    let args =
        ["test", &wasm, "--objects", &fixtures, "--expect", &expected, "--compile-cache", &cache, "--until-settled"];
    let mut offline = kubewasm(&args);
    offline.env("KUBECONFIG", "/nonexistent");
    common::run_ok(offline);

    serves_and_reconciles(&project, "hello-ns", None).await;
}

/// Serves `project` (a plugin directory: `<name>.wasm` beside `<name>.yaml`) from a host on the
/// shared control plane, and waits for the scaffolded reconciler's owned ConfigMap.
async fn serves_and_reconciles(project: &Path, name: &str, compile_cache: Option<&Path>) {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    let ns = cp.namespace("new").await;
    // The project directory is a plugin directory: hello-ns.wasm beside hello-ns.yaml.
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

/// Asserts that no file of the freshly made `project` names the checkout: it builds from the
/// SDK copy in its `vendor/`, so it can be committed and built anywhere.
fn names_no_checkout(project: &Path) {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().display().to_string();
    for file in source_files(project) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains(&checkout), "{} names the checkout {checkout}", file.display());
    }
    assert!(project.join("vendor/kubewasm-sdk").is_dir(), "the SDK is vendored");
}

/// Scaffolds a `language` project named `name` in a temporary directory and runs its build
/// script; returns the directory (kept alive by the guard).
fn scaffold_and_build(language: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join(name);
    let dir = project.display().to_string();
    let created = common::run_ok(kubewasm(&["new", language, name, "--dir", &dir]));
    assert!(created.contains("build.sh"), "{created}");
    names_no_checkout(&project);
    common::run_ok(Command::new(project.join("build.sh")));
    assert!(project.join(format!("{name}.wasm")).is_file(), "build.sh wrote {name}.wasm");
    (work, project)
}

/// Runs a project's own offline test command with `kubewasm` being this build's binary, as an
/// author runs it (no `$KUBEWASM_COMPILE_CACHE`): the test keeps the compiled component in the
/// project's `.kubewasm/compile-cache`, which the host below loads it from without compiling
/// it again. Returns the runner's output and that cache.
fn offline_test(mut runner: Command, project: &Path) -> (String, PathBuf) {
    runner
        .current_dir(project)
        .env("KUBEWASM", env!("CARGO_BIN_EXE_kubewasm"))
        .env_remove("KUBEWASM_COMPILE_CACHE")
        .env("KUBECONFIG", "/nonexistent");
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
async fn a_new_python_project_builds_passes_its_pytest_and_reconciles_on_the_apiserver() {
    let venv = python_toolchain();
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk/python");
    let before = source_files(&sdk);
    let (_work, project) = scaffold_and_build("python", "hello-py");
    assert_eq!(source_files(&sdk), before, "the build wrote nothing into the SDK's sources");
    let mut pytest = Command::new(venv.join("bin/pytest"));
    pytest.args(["-q", "-p", "no:cacheprovider"]);
    let (out, cache) = offline_test(pytest, &project);
    assert!(out.contains("1 passed"), "{out}");
    serves_and_reconciles(&project, "hello-py", Some(&cache)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_js_project_builds_passes_its_node_test_and_reconciles_on_the_apiserver() {
    js_toolchain();
    let (_work, project) = scaffold_and_build("js", "hello-js");
    let mut node = Command::new("node");
    node.arg("--test");
    let (out, cache) = offline_test(node, &project);
    assert!(out.contains("# pass 1") && out.contains("# fail 0"), "{out}");
    serves_and_reconciles(&project, "hello-js", Some(&cache)).await;
}

/// Every file under `dir`, recursively (to see that a build wrote nothing there).
fn source_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { dirs.push(path) } else { files.push(path) }
        }
    }
    files.sort();
    files
}
