//! `kubewasm dev`: a local control plane and the host on a plugin directory, stopped by Ctrl-C
//! (SIGINT) or SIGTERM; with `--with-gc`, owned objects are garbage-collected; on an author's
//! project, an edit rebuilt with its `build.sh`, or saved in a source plugin, reaches the API
//! server with no restart.

use crate::common;
use crate::common::project::{self, Installed};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

/// Start-up of etcd + kube-apiserver (the harness allows 60 s) plus loading the plugin.
const START: Duration = Duration::from_secs(180);

/// Each kind of project `kubewasm new` makes: its language and flags, the source file that ends
/// the greeting it writes (`NAME`: the project's name, `MODULE`: the same with `_` for `-`), the
/// text that ends the greeting (its closing quote last), and how it is built: not at all (`None`),
/// or by `build.sh` with these arguments.
const PROJECTS: [Project; 6] = [
    Project { label: "rust", language: "rust", flags: &[], file: "src/lib.rs", end: r#", {name}""#, build: Some(&[]) },
    Project {
        label: "rust, build.sh --quick",
        language: "rust",
        flags: &[],
        file: "src/lib.rs",
        end: r#", {name}""#,
        build: Some(&["--quick"]),
    },
    Project { label: "python", language: "python", flags: &[], file: "NAME.py", end: r#", {name}""#, build: None },
    Project {
        label: "python --component",
        language: "python",
        flags: &["--component"],
        file: "src/MODULE.py",
        end: r#", {name}""#,
        build: Some(&[]),
    },
    Project { label: "js", language: "js", flags: &[], file: "NAME.js", end: ", ${ns.metadata.name}`", build: None },
    Project {
        label: "js --component",
        language: "js",
        flags: &["--component"],
        file: "src/NAME.js",
        end: ", ${ns.metadata.name}`",
        build: Some(&[]),
    },
];

/// One kind of project (see [`PROJECTS`]).
struct Project {
    label: &'static str,
    language: &'static str,
    flags: &'static [&'static str],
    file: &'static str,
    end: &'static str,
    build: Option<&'static [&'static str]>,
}

impl Project {
    fn of(label: &str) -> &'static Self {
        PROJECTS.iter().find(|p| p.label == label).unwrap()
    }

    /// Scaffolds project `name` and builds it if it is built.
    fn make(&self, kubewasm: &Installed, name: &str) -> (tempfile::TempDir, PathBuf) {
        let (clone, project) = project::scaffold(kubewasm, self.language, name, self.flags);
        self.build(kubewasm, &project, name);
        (clone, project)
    }

    /// What the author runs after an edit: `build.sh`, or nothing for a source plugin.
    fn build(&self, kubewasm: &Installed, project: &Path, name: &str) {
        if let Some(args) = self.build {
            project::build_with(kubewasm, project, name, args);
        }
    }
}

/// The source file of a project that writes the greeting, as the scaffold made it.
struct Greeting {
    path: PathBuf,
    pristine: String,
    end: &'static str,
}

impl Greeting {
    /// The greeting of the project `name` of kind `kind` at `project`.
    fn of(project: &Path, kind: &Project, name: &str) -> Self {
        let file = kind.file.replace("NAME", name).replace("MODULE", &name.replace('-', "_"));
        let path = project.join(&file);
        let pristine = std::fs::read_to_string(&path).unwrap();
        let end = kind.end;
        assert_eq!(pristine.matches(end).count(), 1, "{file}: the scaffold's greeting changed; update PROJECTS");
        Self { path, pristine, end }
    }

    /// Writes the source as the scaffold made it with `suffix` appended to the greeting: an
    /// author's edit.
    fn write_with(&self, suffix: &str) {
        let (body, quote) = self.end.split_at(self.end.len() - 1);
        std::fs::write(&self.path, self.pristine.replace(self.end, &format!("{body}{suffix}{quote}"))).unwrap();
    }
}

/// `kubewasm dev` running on a plugin directory with namespace-defaults, its output in files.
struct Dev {
    child: Child,
    work: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Dev {
    fn start(extra: &[&str]) -> Self {
        Self::start_with_path(extra, &std::env::var_os("PATH").unwrap_or_default())
    }

    /// [`start`](Self::start) with `$PATH` set to `path` for `kubewasm dev`.
    fn start_with_path(extra: &[&str], path: &std::ffi::OsStr) -> Self {
        let work = tempfile::tempdir().unwrap();
        let plugins = work.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        common::install_plugin(&plugins, "namespace-defaults", "namespace_defaults.wasm", "");
        Self::spawn(work, &plugins, extra, path)
    }

    /// `kubewasm dev` on the plugin directory `plugins` (an author's project), with `--with-gc`
    /// or other `extra` flags.
    fn start_on(plugins: &Path, extra: &[&str]) -> Self {
        let path = std::env::var_os("PATH").unwrap_or_default();
        Self::spawn(tempfile::tempdir().unwrap(), plugins, extra, &path)
    }

    /// Runs `kubewasm dev` on `plugins`, its kubeconfig, compile cache and output in `work`.
    fn spawn(work: tempfile::TempDir, plugins: &Path, extra: &[&str], path: &std::ffi::OsStr) -> Self {
        let kubeconfig = work.path().join("kube/config");
        let stdout = std::fs::File::create(work.path().join("stdout")).unwrap();
        let stderr = std::fs::File::create(work.path().join("stderr")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .arg("dev")
            .arg("--plugins")
            .arg(plugins)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .args(["--admin-addr", "127.0.0.1:0", "--wasm-plugins=false", "--compile-cache"])
            .arg(work.path().join("compile-cache"))
            .args(extra)
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap();
        Self { child, work, kubeconfig }
    }

    fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.work.path().join(f)).unwrap_or_default();
        format!("stdout:\n{}\nstderr:\n{}", read("stdout"), read("stderr"))
    }

    /// A client of the control plane, once the kubeconfig is written.
    async fn client(&mut self) -> kube::Client {
        let started = Instant::now();
        while !self.kubeconfig.exists() {
            assert!(self.child.try_wait().unwrap().is_none(), "kubewasm dev exited: {}", self.logs());
            assert!(started.elapsed() < START, "no kubeconfig after {START:?}: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let options = kube::config::KubeConfigOptions::default();
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap()).unwrap()
    }

    /// Sends `signal`; asserts that dev exits cleanly, removes its kubeconfig and stops the
    /// apiserver.
    async fn stop_with(mut self, signal: &str, client: kube::Client) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
        let stopping = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(stopping.elapsed() < Duration::from_secs(90), "still running after {signal}: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(status.success(), "{status}: {}", self.logs());
        assert!(!self.kubeconfig.exists(), "the kubeconfig is removed");
        assert!(Api::<Namespace>::all(client).list(&Default::default()).await.is_err(), "the apiserver is gone");
    }
}

/// A failed assertion must not leave `kubewasm dev` and its control plane running.
impl Drop for Dev {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}

/// `$PATH` with every directory holding `tool` replaced by `shadow`, which gets a link to each
/// of their other files: the same tools (the control plane needs `sh`, `kill`…) but that one.
fn path_without(tool: &str, shadow: &Path) -> std::ffi::OsString {
    let dirs = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect::<Vec<_>>();
    let mut kept = vec![shadow.to_owned()];
    for dir in dirs {
        if !dir.join(tool).exists() {
            kept.push(dir);
            continue;
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if name != tool && !shadow.join(&name).exists() {
                let _ = std::os::unix::fs::symlink(entry.path(), shadow.join(&name));
            }
        }
    }
    std::env::join_paths(kept).unwrap()
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_a_directory_of_plugins_compiled_in_a_child_process_on_a_local_control_plane_until_sigint_stops_everything()
 {
    // No kubectl on its PATH, and the printed commands run from another directory with none
    // either: they work as printed.
    let no_kubectl = tempfile::tempdir().unwrap();
    let path = path_without("kubectl", no_kubectl.path());
    let mut dev = Dev::start_with_path(&[], &path);
    let client = dev.client().await;
    let printed = common::eventually("the printed kubectl commands", START, || async {
        let logs = dev.logs();
        let lines: Vec<String> = logs.lines().filter(|l| l.contains("--kubeconfig")).map(str::to_owned).collect();
        (lines.len() == 2).then_some(lines)
    })
    .await;
    let create = printed[0].split_once("try:").expect("a `try:` line").1.trim().to_owned();
    assert!(create.ends_with("create namespace demo") && create.starts_with('/'), "{create}");
    let ran = Command::new("/bin/sh").args(["-c", &create]).current_dir("/").env("PATH", &path).output();
    let ran = ran.unwrap();
    assert!(ran.status.success(), "`{create}` as printed: {}", String::from_utf8_lossy(&ran.stderr));
    create_namespace(&client, "dev-demo").await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "dev-demo");
    common::eventually("the plugin reconciled dev-demo", START, || async {
        quotas.get_opt("default-quota").await.ok().flatten()
    })
    .await;
    assert!(Api::<Namespace>::all(client.clone()).get_opt("demo").await.unwrap().is_some(), "kubectl created it");
    // `kubewasm compile-plugin` compiled it into the compile cache, where the host mapped it from.
    let compiled = std::fs::read_dir(dev.work.path().join("compile-cache/compiled")).map(Iterator::count);
    assert!(matches!(compiled, Ok(1)), "no compiled file in the cache ({compiled:?}): {}", dev.logs());
    assert!(dev.logs().contains("compiled in a child process"), "no child process compiled the plugin: {}", dev.logs());
    dev.stop_with("-INT", client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_with_gc_deletes_the_dependents_of_a_deleted_owner_and_sigterm_stops_everything() {
    let mut dev = Dev::start(&["--with-gc"]);
    let client = dev.client().await;
    create_namespace(&client, "gc-demo").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "gc-demo");
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = config_maps.create(&PostParams::default(), &owner).await.unwrap();
    let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid});
    let dependent: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "dependent", "ownerReferences": [reference]}})).unwrap();
    config_maps.create(&PostParams::default(), &dependent).await.unwrap();
    config_maps.delete("owner", &DeleteParams::default()).await.unwrap();
    common::eventually("the garbage collector deleted the dependent", START, || async {
        matches!(config_maps.get_opt("dependent").await, Ok(None)).then_some(())
    })
    .await;
    dev.stop_with("-TERM", client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_an_edit_rebuilt_with_the_projects_build_script_without_a_restart() {
    serves_an_edit(Project::of("rust"), "edit-ns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_an_edit_of_a_python_source_once_saved_with_no_build_and_no_restart() {
    serves_an_edit(Project::of("python"), "edit-py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_an_edit_of_a_javascript_source_once_saved_with_no_build_and_no_restart() {
    serves_an_edit(Project::of("js"), "edit-js").await;
}

/// `kubewasm dev` on a new project of kind `kind` serves its greeting, then the author edits the
/// string the plugin writes (and rebuilds it, if it is built); `kubewasm dev` keeps running and
/// the edited greeting reaches the API server.
async fn serves_an_edit(kind: &Project, name: &str) {
    let kubewasm = Installed::new();
    let (_clone, project) = kind.make(&kubewasm, name);
    let mut dev = Dev::start_on(&project, &[]);
    let client = dev.client().await;
    create_namespace(&client, "edit-demo").await;
    let welcome: Api<ConfigMap> = Api::namespaced(client.clone(), "edit-demo");
    let greeting = || async { welcome.get_opt("welcome").await.ok().flatten()?.data?.remove("greeting") };
    let first = common::eventually("the first version's greeting", START, || async {
        greeting().await.filter(|g| g == "hello, edit-demo")
    })
    .await;

    let greeting_source = Greeting::of(&project, kind, name);
    let edit = Instant::now();
    greeting_source.write_with(", edited");
    kind.build(&kubewasm, &project, name);
    let built = edit.elapsed();
    // The swap queues every Namespace again, so the existing ConfigMap gets the new string.
    let second = common::eventually("the edited version's greeting", START, || async {
        greeting().await.filter(|g| g != &first)
    })
    .await;
    assert_eq!(second, "hello, edit-demo, edited");
    eprintln!("{}: edit → effect: {:?} (build {built:?}, then swap and reconcile)", kind.label, edit.elapsed());
    assert!(dev.child.try_wait().unwrap().is_none(), "kubewasm dev was not restarted: {}", dev.logs());
    dev.stop_with("-INT", client).await;
}

/// Edit → effect per language under `kubewasm dev` (issue 32, BENCHMARKS.md), with the binary
/// and profile of this build: one `kubewasm dev` per scaffolded project, all running; then
/// rounds in which each language in turn has its greeting edited, is rebuilt by its `build.sh`,
/// and is timed until the ConfigMap it writes has the new greeting (polled every 100 ms). Prints
/// each run and the medians; asserts nothing about time. `make bench-edit` runs it in release:
/// `cargo test -p kubewasm --release --test all -- --ignored --nocapture dev::edit_to_effect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it on its own, with --release"]
async fn edit_to_effect_per_language_under_kubewasm_dev() {
    const ROUNDS: usize = 3;
    let kubewasm = Installed::new();
    let mut projects = Vec::new();
    for (i, kind) in PROJECTS.iter().enumerate() {
        let name = format!("edit-{}-{i}", kind.language);
        let (clone, project) = kind.make(&kubewasm, &name);
        let mut dev = Dev::start_on(&project, &[]);
        let client = dev.client().await;
        create_namespace(&client, "edit-demo").await;
        let greeting = Greeting::of(&project, kind, &name);
        projects.push((kind, name, clone, project, dev, client, greeting));
    }
    let mut runs: Vec<(&str, Duration, Duration)> = Vec::new();
    for round in 0..=ROUNDS {
        for (kind, name, _, project, dev, client, greeting) in &mut projects {
            let language = kind.label;
            let welcome: Api<ConfigMap> = Api::namespaced(client.clone(), "edit-demo");
            let expected =
                if round == 0 { "hello, edit-demo".to_owned() } else { format!("hello, edit-demo, edit {round}") };
            let edit = Instant::now();
            if round > 0 {
                greeting.write_with(&format!(", edit {round}"));
                kind.build(&kubewasm, project, name);
            }
            let built = edit.elapsed();
            common::eventually(&format!("{language}: {expected}"), START, || async {
                let data = welcome.get_opt("welcome").await.ok().flatten()?.data?;
                (data.get("greeting") == Some(&expected)).then_some(())
            })
            .await;
            let effect = edit.elapsed();
            assert!(dev.child.try_wait().unwrap().is_none(), "kubewasm dev was restarted: {}", dev.logs());
            if round > 0 {
                eprintln!("{language} round {round}: edit → effect {effect:.2?} (build.sh {built:.2?})");
                runs.push((language, effect, built));
            }
        }
    }
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    eprintln!("\nedit → effect, {profile} kubewasm dev, {ROUNDS} rounds, medians:");
    eprintln!("| language | edit → effect | build.sh | swap + reconcile |");
    for language in PROJECTS.map(|p| p.label) {
        let median = |pick: fn(&(&str, Duration, Duration)) -> Duration| {
            let mut times: Vec<Duration> = runs.iter().filter(|r| r.0 == language).map(pick).collect();
            times.sort();
            times[times.len() / 2]
        };
        let (effect, built) = (median(|r| r.1), median(|r| r.2));
        eprintln!("| {language} | {effect:.2?} | {built:.2?} | {:.2?} |", effect.saturating_sub(built));
    }
    for (_, _, _, _, dev, client, _) in projects {
        dev.stop_with("-INT", client).await;
    }
}
