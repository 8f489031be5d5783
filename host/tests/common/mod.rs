//! Helpers shared by the host's integration tests.
#![allow(dead_code)]

pub mod audit;
pub mod examples;
pub mod hostile;
pub mod image;
pub mod process;
pub mod project;
pub mod registry;

use std::path::PathBuf;
use std::sync::Arc;

/// Where `make plugins` puts guest components.
pub fn plugin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBEWASM_PLUGIN_DIR") {
        return dir.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("wasm32-wasip2/plugin")
}

/// The repository's copy of a plugin's source file, `path` relative to `plugins/`.
pub fn plugin_source(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()))
}

/// Writes `<name>.py`, `source`, and `<name>.yaml`: `config` with `engine: python@0.3` and the
/// approval of what plugin `asks_as` (a built plugin's file name, see [`install_plugin`]) asks
/// for, into `dir`: a plugin given as source, as its operator would install it.
pub fn install_source(dir: &std::path::Path, name: &str, asks_as: &str, source: &str, config: &str) -> PathBuf {
    install_source_file(dir, &format!("{name}.py"), asks_as, source, config)
}

/// [`install_source`] of a source file `file` in any language: `<name>.py` runs on
/// `python@0.3`, `<name>.js` on `js@0.3`.
pub fn install_source_file(dir: &std::path::Path, file: &str, asks_as: &str, source: &str, config: &str) -> PathBuf {
    let (name, engine) = match file.rsplit_once('.') {
        Some((name, "py")) => (name, "python@0.3"),
        Some((name, "js")) => (name, "js@0.3"),
        _ => panic!("{file} is not a .py or .js source file"),
    };
    let path = dir.join(file);
    std::fs::write(&path, source).unwrap();
    let config = approving(&format!("engine: {engine}\n{config}"), asked_by(asks_as));
    std::fs::write(dir.join(format!("{name}.yaml")), config).unwrap();
    path
}

/// Writes a plugin given as a directory of source files: `files` (relative path, contents)
/// under `<name>/`, and `<name>.yaml`, as [`install_source_file`] does, with the engine of the
/// first file's language and `entry: <entry>`.
pub fn install_source_dir(
    dir: &std::path::Path,
    name: &str,
    asks_as: &str,
    files: &[(&str, &str)],
    entry: &str,
    config: &str,
) -> PathBuf {
    let root = dir.join(name);
    for (path, contents) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
    }
    let engine = if files[0].0.ends_with(".js") { "js@0.3" } else { "python@0.3" };
    let config = approving(&format!("engine: {engine}\nentry: {entry}\n{config}"), asked_by(asks_as));
    std::fs::write(dir.join(format!("{name}.yaml")), config).unwrap();
    root
}

/// A compile cache shared by the tests of this workspace, so each component compiles once.
pub fn test_compile_cache() -> PathBuf {
    plugin_dir().join("../test-compile-cache")
}

/// The host as `kubewasm dev` runs it on `client`, compiling through the tests' shared compile
/// cache: a component the tests load many times (a fixture, an engine) is compiled once, not
/// once per test. A test about how long a compile takes builds its `App` without the cache.
pub fn app(client: &kube::Client) -> kubewasm_host::app::App {
    kubewasm_host::app::App::new(client.clone(), Some(&test_compile_cache()), None).unwrap()
}

/// The bytes of a built plugin component; fails loudly, saying how to build it.
pub fn plugin_wasm(file: &str) -> Arc<[u8]> {
    let path = plugin_dir().join(file);
    match std::fs::read(&path) {
        Ok(bytes) => bytes.into(),
        Err(e) => panic!("cannot read plugin {}: {e}. Build the plugins first: `make plugins`", path.display()),
    }
}

/// [`plugin_wasm`] as the sources hand a component to the host: with its hash.
pub fn plugin_module(file: &str) -> kubewasm_host::hotload::Module {
    kubewasm_host::hotload::Module::hash_blocking(plugin_wasm(file))
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The value of the sample of metric `name` whose labels include every pair in `labels`, from
/// Prometheus text exposition.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metric_values(text, name, labels).next()
}

/// The values of every sample of metric `name` whose labels include every pair in `labels`, from
/// Prometheus text exposition.
pub fn metric_values<'a>(
    text: &'a str,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = f64> + 'a {
    text.lines().filter(|l| !l.starts_with('#')).filter_map(move |line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        let matches = metric == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        matches.then(|| value.parse().ok()).flatten()
    })
}

/// Writes `<name>.wasm` (a copy of a built fixture) and `<name>.yaml` into `dir`: `config`, with
/// every kind the fixture asks for approved besides ([`approving`]), as its operator would.
pub fn install_plugin(dir: &std::path::Path, name: &str, built: &str, config: &str) -> PathBuf {
    install_plugin_verbatim(dir, name, built, &approving(config, asked_by(built)))
}

/// What a built plugin asks for with its default settings, as its config approves it (what
/// `kubewasm check` lists); nothing for a file that is not a plugin.
fn asked_by(built: &str) -> serde_json::Value {
    let reads_cm_writes_cm = serde_json::json!({"read": ["ConfigMap"], "write": ["ConfigMap"]});
    let namespace_defaults = serde_json::json!({
        "read": ["Namespace", "ResourceQuota", "NetworkPolicy.networking.k8s.io"],
        "status": ["Namespace"],
        "own": ["ResourceQuota", "NetworkPolicy.networking.k8s.io"],
    });
    match built.trim_end_matches(".wasm") {
        "fixture_stamper" | "fixture_sleeper" | "fixture_mapper" | "fixture_legacy" | "fixture_frozen_0_2"
        | "fixture_greedy" => reads_cm_writes_cm,
        "fixture_intruder" => serde_json::json!({"read": ["ConfigMap"], "status": ["ConfigMap"], "own": ["ConfigMap"]}),
        "fixture_contract" => serde_json::json!({
            "read": ["ConfigMap", "Secret"], "status": ["ConfigMap"], "own": ["Secret"], "write": ["ConfigMap", "Namespace"],
        }),
        "configmap_sync" => serde_json::json!({
            "read": ["ConfigMapSync.examples.kubewasm.dev", "ConfigMap", "Namespace"],
            "own": ["ConfigMap"], "write": ["ConfigMapSync.examples.kubewasm.dev"],
        }),
        "fixture_desired" => serde_json::json!({
            "read": ["Fanout.desired.kubewasm.test", "ConfigMap", "Namespace"],
            "status": ["Fanout.desired.kubewasm.test"], "own": ["ConfigMap"],
        }),
        "sample_controller" | "sample_controller_py" | "sample_controller_js" | "sample_controller_go" => {
            serde_json::json!({
                "read": ["Foo.samplecontroller.k8s.io", "Deployment.apps"],
                "status": ["Foo.samplecontroller.k8s.io"], "own": ["Deployment.apps"],
            })
        }
        "cronjob" | "cronjob_py" | "cronjob_js" | "cronjob_go" => serde_json::json!({
            "read": ["CronJob.batch.tutorial.kubebuilder.io", "Job.batch"],
            "status": ["CronJob.batch.tutorial.kubebuilder.io"], "own": ["Job.batch"],
        }),
        "config_reloader" => {
            serde_json::json!({"read": ["ConfigMap", "Deployment.apps"], "write": ["Deployment.apps"]})
        }
        "contract_calls_go" => serde_json::json!({
            "read": ["ConfigMap", "Service", "Deployment.apps"], "status": ["ConfigMap"],
            "own": ["Deployment.apps"], "write": ["ConfigMap"],
        }),
        f if f.starts_with("namespace_defaults") => namespace_defaults,
        f if f.starts_with("fixture_") && f != "fixture-wrong-world" => {
            serde_json::json!({"read": ["ConfigMap"], "status": ["ConfigMap"]})
        }
        _ => serde_json::json!({}),
    }
}

/// `grants` (a config's or WasmPlugin spec's `grants` object) with what built plugin `built`
/// asks for approved besides, as its operator would.
pub fn approved(built: &str, mut grants: serde_json::Value) -> serde_json::Value {
    for (key, kinds) in asked_by(built).as_object().unwrap() {
        let list = grants.as_object_mut().unwrap().entry(key.clone()).or_insert_with(|| serde_json::json!([]));
        list.as_array_mut().unwrap().extend(kinds.as_array().unwrap().iter().cloned());
    }
    grants
}

/// The plugin config `config` (YAML) with the kinds of `asked` (`{read: [...], own: [...]}`)
/// added to its `grants` lists; `config` as it is if it is not a YAML mapping (a test of a
/// broken config).
pub fn approving(config: &str, asked: serde_json::Value) -> String {
    let parsed: Result<serde_json::Value, _> =
        serde_yaml::from_str(if config.trim().is_empty() { "{}" } else { config });
    let Ok(mut config_value @ serde_json::Value::Object(_)) = parsed else { return config.to_owned() };
    if asked.as_object().is_none_or(|a| a.is_empty()) {
        return config.to_owned();
    }
    let grants = config_value.as_object_mut().unwrap().entry("grants").or_insert_with(|| serde_json::json!({}));
    let Some(grants) = grants.as_object_mut() else { return config.to_owned() };
    for (key, kinds) in asked.as_object().unwrap() {
        let list = grants.entry(key.clone()).or_insert_with(|| serde_json::json!([]));
        if let Some(list) = list.as_array_mut() {
            list.extend(kinds.as_array().unwrap().iter().cloned());
        }
    }
    serde_yaml::to_string(&config_value).unwrap()
}

/// Built plugin `built` as plugin `name` with `config`, plus the approval of what it asks for (as
/// [`install_plugin`]), written into a directory kept until the test process ends.
pub fn fixture_file(name: &str, built: &str, config: &str) -> kubewasm_host::app::PluginFile {
    let dir = tempfile::tempdir().unwrap().keep();
    let wasm = install_plugin(&dir, name, built, config);
    kubewasm_host::app::PluginFile {
        name: name.into(),
        wasm: Some(wasm),
        config: Some(dir.join(format!("{name}.yaml"))),
    }
}

/// Writes `<name>.wasm` (a copy of a built fixture) and `<name>.yaml`, exactly `config`, into `dir`.
pub fn install_plugin_verbatim(dir: &std::path::Path, name: &str, built: &str, config: &str) -> PathBuf {
    let wasm = dir.join(format!("{name}.wasm"));
    std::fs::copy(plugin_dir().join(built), &wasm)
        .unwrap_or_else(|e| panic!("copying {built}: {e}. Run `make plugins`"));
    std::fs::write(dir.join(format!("{name}.yaml")), config).unwrap();
    wasm
}

/// Runs `command`, panicking with its output unless it succeeds; returns stdout.
pub fn run_ok(mut command: std::process::Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{command:?} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}
