//! `kubewasm test`: a plugin's reconciles run offline over fixture objects, as a plugin author
//! runs them.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

/// Two Namespaces: `team-a` gets the defaults; `quiet` opted out and still has a quota the
/// plugin made (the host's mark names it: offline, a plugin is named after its file), which it
/// removes.
const NAMESPACES: &str = "\
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata:
  name: quiet
  uid: 6f1c2b9e-0000-4000-8000-000000000001
  labels: {kubewasm.dev/no-defaults: \"true\"}
---
apiVersion: v1
kind: ResourceQuota
metadata:
  name: default-quota
  namespace: quiet
  labels: {kubewasm.dev/plugin: namespace_defaults}
  ownerReferences:
  - {apiVersion: v1, kind: Namespace, name: quiet, uid: 6f1c2b9e-0000-4000-8000-000000000001, controller: true}
spec: {hard: {pods: \"50\"}}
";

/// `kubewasm test` of built plugin `wasm`, beside a config approving what it asks for.
fn kubewasm_test(wasm: &str, args: &[&str]) -> Output {
    let file = common::fixture_file(wasm.trim_end_matches(".wasm"), wasm, "");
    kubewasm_test_path(&file.wasm.unwrap(), args)
}

fn stdout_ok(out: &Output) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "kubewasm test failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn test_prints_the_applies_deletes_and_events_a_plugin_would_make_and_checks_them_against_expect() {
    let dir = tempfile::tempdir().unwrap();
    let objects = write(dir.path(), "objects.yaml", NAMESPACES);
    let report = stdout_ok(&kubewasm_test("namespace_defaults.wasm", &["--objects", &objects]));
    let entries: serde_json::Value = serde_yaml::from_str(&report).unwrap();
    assert_eq!(entries.as_array().map(Vec::len), Some(2), "{report}");
    let (quiet, team) = (&entries[0], &entries[1]);
    assert_eq!((quiet["reconcile"].as_str(), team["reconcile"].as_str()), (Some("quiet"), Some("team-a")), "{report}");
    let delete = &quiet["writes"][0]["delete"];
    assert_eq!(quiet["writes"].as_array().map(Vec::len), Some(1), "{report}");
    assert_eq!((delete["kind"].as_str(), delete["key"].as_str()), (Some("ResourceQuota"), Some("quiet/default-quota")));
    assert!(delete["preconditions"]["uid"].is_string(), "a 0.2 delete shows its uid precondition: {report}");
    let writes = team["writes"].as_array().unwrap();
    assert_eq!(writes[0]["apply"]["kind"], "ResourceQuota", "{report}");
    assert_eq!(writes[0]["apply"]["spec"]["hard"]["pods"], "50", "{report}");
    assert_eq!(writes[1]["apply"]["kind"], "NetworkPolicy", "{report}");
    assert_eq!(writes[2]["event"]["reason"], "DefaultsApplied", "{report}");
    assert_eq!(writes[2]["event"]["regarding"]["key"], "team-a", "{report}");
    assert_eq!(team["result"], "done");

    let expected = write(dir.path(), "expected.yaml", &report);
    stdout_ok(&kubewasm_test("namespace_defaults.wasm", &["--objects", &objects, "--expect", &expected]));

    let settings = write(dir.path(), "settings.yaml", "quota: {pods: \"10\"}\n");
    let args = ["--objects", &objects, "--expect", &expected, "--settings", &settings, "--key", "team-a"];
    let out = kubewasm_test("namespace_defaults.wasm", &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a different report fails: {stderr}");
    assert!(stderr.contains("differ from"), "{stderr}");
    assert!(
        stderr.contains("-- reconcile: quiet") && stderr.contains("+          pods: '10'"),
        "a readable diff: {stderr}"
    );
}

#[test]
fn test_reconciles_the_keys_that_map_returns_for_watched_objects_and_reports_a_failed_map() {
    let dir = tempfile::tempdir().unwrap();
    let objects = write(
        dir.path(),
        "objects.yaml",
        "\
apiVersion: v1
kind: ConfigMap
metadata: {name: p, namespace: t, labels: {kubewasm.test/role: parent}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c1, namespace: t, labels: {kubewasm.test/parent: p}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c2, namespace: t, labels: {kubewasm.test/parent: ghost}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: bad, namespace: t, labels: {kubewasm.test/fail-map: \"yes\"}}
",
    );
    let wasm = common::install_plugin(dir.path(), "mapper", "fixture_mapper.wasm", "grants: {write: [ConfigMap]}\n");
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(["test", &wasm.display().to_string(), "--objects", &objects, "--compile-cache"])
        .arg(common::test_compile_cache())
        .output()
        .unwrap();
    let report = stdout_ok(&out);
    let entries: serde_json::Value = serde_yaml::from_str(&report).unwrap();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries[0]["map"], "v1 ConfigMap t/bad", "{report}");
    assert!(entries[0]["error"].as_str().unwrap().contains("trapped"), "{report}");
    let keys: Vec<&str> = entries[1..].iter().map(|e| e["reconcile"].as_str().unwrap()).collect();
    assert_eq!(keys, ["t/bad", "t/c1", "t/c2", "t/ghost", "t/p"], "t/ghost comes from map only: {report}");
    let parent = &entries[5];
    assert_eq!(parent["writes"][0]["patch"]["key"], "t/p", "{report}");
    assert_eq!(parent["writes"][0]["patch"]["body"]["metadata"]["annotations"]["kubewasm.test/children"], "c1");
}

#[test]
fn test_runs_a_crd_plugin_with_the_grants_of_its_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = common::install_plugin(
        dir.path(),
        "configmap-sync",
        "configmap_sync.wasm",
        "grants: {read: [ConfigMapSync.examples.kubewasm.dev, ConfigMap, Namespace], own: [ConfigMap], \
         write: [ConfigMapSync.examples.kubewasm.dev]}\n",
    );
    let objects = write(
        dir.path(),
        "objects.yaml",
        "\
apiVersion: examples.kubewasm.dev/v1alpha1
kind: ConfigMapSync
metadata: {name: s, generation: 1}
spec: {source: {namespace: src, name: cfg}, namespaceSelector: env=dev}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: src}
data: {k: v}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: src, labels: {env: dev}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: a, labels: {env: dev}}}
- {apiVersion: v1, kind: Namespace, metadata: {name: b}}
",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(["test", &wasm.display().to_string(), "--objects", &objects, "--compile-cache"])
        .arg(common::test_compile_cache())
        .output()
        .unwrap();
    let report = stdout_ok(&out);
    let entries: serde_json::Value = serde_yaml::from_str(&report).unwrap();
    let writes = entries[0]["writes"].as_array().unwrap();
    assert_eq!(entries[0]["reconcile"], "s", "{report}");
    assert_eq!(writes[0]["patch"]["body"]["metadata"]["finalizers"][0], "examples.kubewasm.dev/cleanup", "{report}");
    assert_eq!(writes[1]["apply"]["metadata"]["namespace"], "a", "{report}");
    assert_eq!(writes[1]["apply"]["data"]["k"], "v", "{report}");
    assert_eq!(writes[1]["force"], true, "{report}");
    assert_eq!(writes[2]["applyStatus"]["status"]["syncedCount"], 1, "{report}");
    assert_eq!(writes.len(), 3, "{report}");
}

#[test]
fn test_gives_the_python_and_javascript_builds_the_same_report_as_the_rust_one_in_desired_state_mode() {
    let dir = tempfile::tempdir().unwrap();
    let objects = write(dir.path(), "objects.yaml", NAMESPACES);
    let desired_mode = write(dir.path(), "settings.yaml", "desiredState: true\n");
    let rust =
        stdout_ok(&kubewasm_test("namespace_defaults.wasm", &["--objects", &objects, "--settings", &desired_mode]));
    let expected = write(dir.path(), "expected.yaml", &rust);
    for build in ["namespace_defaults_py.wasm", "namespace_defaults_js.wasm"] {
        // The quota is the one this build made: the host's mark names the plugin (its file).
        let stem = build.trim_end_matches(".wasm");
        let made_by_build =
            NAMESPACES.replace("kubewasm.dev/plugin: namespace_defaults}", &format!("kubewasm.dev/plugin: {stem}}}"));
        let objects = write(dir.path(), &format!("{stem}.yaml"), &made_by_build);
        let out = kubewasm_test(build, &["--objects", &objects, "--expect", &expected]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{build} differs from the Rust build:\n{stderr}");
    }
}

/// A ConfigMap `t/x` of the fixture plugins' tests, labelled for the contract fixture.
const CONFIG_MAP: &str = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: x, namespace: t, labels: {kubewasm.test/contract: \"yes\"}}
";

/// `kubewasm test` of the fixture `built`, installed in `dir` with `config`, over CONFIG_MAP.
fn fixture_test(dir: &Path, built: &str, config: &str, args: &[&str]) -> Output {
    let wasm = common::install_plugin(dir, "plugin", built, config);
    let objects = write(dir, "objects.yaml", CONFIG_MAP);
    Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("test")
        .arg(wasm)
        .args(["--objects", &objects, "--compile-cache"])
        .arg(common::test_compile_cache())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn until_settled_passes_a_plugin_whose_second_reconcile_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = "grants: {write: [ConfigMap]}\nsettings: {version: v1}\n";
    let out = fixture_test(dir.path(), "fixture_stamper.wasm", config, &["--until-settled"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("reconcile t/x settled in 2 rounds"), "{stderr}");
    let report: serde_json::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    let patch = &report[0]["writes"][0]["patch"];
    assert_eq!(patch["body"]["metadata"]["annotations"]["kubewasm.test/version"], "v1", "the first round's report");
}

#[test]
fn test_gives_the_plugin_the_time_it_is_told_so_a_condition_stamp_is_the_same_in_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = "grants: {write: [ConfigMap]}\nsettings: {version: v1, stampTime: true}\n";
    let stamp = |args: &[&str]| {
        let out = fixture_test(dir.path(), "fixture_stamper.wasm", config, args);
        let report: serde_json::Value = serde_yaml::from_slice(&out.stdout).unwrap();
        report[0]["writes"][0]["patch"]["body"]["metadata"]["annotations"]["kubewasm.test/ready-since"].clone()
    };
    assert_eq!(stamp(&["--now", "2026-01-01T00:00:00Z"]), "2026-01-01T00:00:00Z");
    assert_eq!(stamp(&["--now", "2031-07-04T12:30:00Z"]), "2031-07-04T12:30:00Z");
    let now = stamp(&[]);
    let now = now.as_str().unwrap_or_else(|| panic!("no stamp: {now}"));
    assert!(now > "2026-11-01T00:00:00Z", "without --now, the time the run starts: {now}");
}

#[test]
fn until_settled_fails_a_plugin_that_writes_a_new_value_every_reconcile_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    // The contract fixture counts its reconciles of `x` in the ConfigMap `log-x`.
    let config = "grants: {read: [Secret], write: [ConfigMap, Namespace, Secret], sensitive: {namespaces: [t]}}\nsettings: {namespace: t}\n";
    let out = fixture_test(dir.path(), "fixture_contract.wasm", config, &["--until-settled=4"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("reconcile t/x did not settle in 4 rounds"), "{stderr}");
    let (round_3, round_4) = stderr.split_once("round 4:").unwrap_or_else(|| panic!("{stderr}"));
    assert!(round_3.contains("round 3:"), "{stderr}");
    assert!(round_3.contains("apply v1 ConfigMap t/log-x: data.count: \"2\" → \"3\""), "{stderr}");
    assert!(round_4.contains("apply v1 ConfigMap t/log-x: data.count: \"3\" → \"4\""), "{stderr}");

    // Without the flag, one reconcile and no verdict on idempotence.
    let once = fixture_test(dir.path(), "fixture_contract.wasm", config, &[]);
    assert!(once.status.success(), "{}", String::from_utf8_lossy(&once.stderr));
}

/// A Fanout of `fixture-desired` copying `new` into the namespaces labelled `team=a`, and in
/// `a1` the copy `old` it made under an earlier name (its mark, a controller ownerReference).
const FANOUT: &str = "\
apiVersion: desired.kubewasm.test/v1
kind: Fanout
metadata: {name: f, uid: 0f000000-0000-4000-8000-000000000001, generation: 3}
spec: {copy: new, namespaceSelector: team=a}
---
apiVersion: v1
kind: Namespace
metadata: {name: a1, labels: {team: a}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: old
  namespace: a1
  labels: {kubewasm.dev/plugin: fixture_desired}
  ownerReferences:
  - {apiVersion: desired.kubewasm.test/v1, kind: Fanout, name: f, uid: 0f000000-0000-4000-8000-000000000001, controller: true}
data: {fanout: f}
";

#[test]
fn test_prints_a_desired_state_beside_its_writes_with_the_prune_and_settles_it() {
    let dir = tempfile::tempdir().unwrap();
    let objects = write(dir.path(), "fanout.yaml", FANOUT);
    let out = kubewasm_test("fixture_desired.wasm", &["--objects", &objects, "--until-settled"]);
    let report: serde_json::Value = serde_yaml::from_str(&stdout_ok(&out)).unwrap();
    let entry = &report[0];
    assert_eq!(entry["result"], "done", "{entry}");
    let copy = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "new", "namespace": "a1"}, "data": {"fanout": "f"}});
    assert_eq!(entry["desired"]["children"], serde_json::json!([copy]), "as the plugin returned it: {entry}");
    assert_eq!(entry["desired"]["status"], serde_json::json!({"observedGeneration": 3, "copies": 1}), "{entry}");
    let writes: Vec<String> =
        entry["writes"].as_array().unwrap().iter().map(|w| serde_yaml::to_string(w).unwrap()).collect();
    let (apply, prune) = (&entry["writes"][0]["apply"], &entry["writes"][1]["delete"]);
    assert_eq!(
        (&apply["metadata"]["name"], &apply["metadata"]["ownerReferences"][0]["name"]),
        (&"new".into(), &"f".into()),
        "{writes:?}"
    );
    assert_eq!(prune["key"], "a1/old", "the copy under its earlier name pruned: {writes:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reconcile f settled in 2 rounds"), "{stderr}");
}

/// `kubewasm check` of plugin file `plugin`: what it prints but the line naming the version.
fn check(plugin: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("check")
        .arg(plugin)
        .arg("--compile-cache")
        .arg(common::test_compile_cache())
        .output()
        .unwrap();
    let stdout = stdout_ok(&out);
    stdout.lines().filter(|l| !l.starts_with("plugin:")).collect::<Vec<_>>().join("\n")
}

#[test]
fn check_and_test_run_a_python_plugin_given_as_source_as_they_run_its_component() {
    let dir = tempfile::tempdir().unwrap();
    // Both are plugin `namespace_defaults_py`, so the host's mark on what they make is the same.
    let marked = NAMESPACES.replace("plugin: namespace_defaults}", "plugin: namespace_defaults_py}");
    let objects = write(dir.path(), "objects.yaml", &marked);
    let component = common::fixture_file("namespace_defaults_py", "namespace_defaults_py.wasm", "");
    let component = component.wasm.unwrap();
    let report = stdout_ok(&kubewasm_test("namespace_defaults_py.wasm", &["--objects", &objects]));
    assert!(report.contains("apply:") && report.contains("delete:"), "{report}");
    let expected = write(dir.path(), "expected.yaml", &report);
    let text = common::plugin_source("python/namespace-defaults/namespace_defaults.py");
    let source = common::install_source(dir.path(), "namespace_defaults_py", "namespace_defaults_py.wasm", &text, "");
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("test")
        .arg(&source)
        .args(["--objects", &objects, "--expect", &expected, "--compile-cache"])
        .arg(common::test_compile_cache())
        .output()
        .unwrap();
    assert!(out.status.success(), "the source's report differs:\n{}", String::from_utf8_lossy(&out.stderr));
    let checked = check(&source);
    assert!(checked.contains("reconciles:     v1 Namespace"), "{checked}");
    assert_eq!(checked, check(&component), "the same registration and grants");
}

#[test]
fn test_runs_a_javascript_plugin_of_several_files_given_as_its_directory_as_it_runs_the_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let objects = write(dir.path(), "objects.yaml", NAMESPACES);
    let text = common::plugin_source("js/namespace-defaults/namespace-defaults.js");
    let one = tempfile::tempdir().unwrap();
    let file = common::install_source_file(one.path(), "nd.js", "namespace_defaults_js.wasm", &text, "");
    let report = stdout_ok(&kubewasm_test_path(&file, &["--objects", &objects]));
    assert!(report.contains("apply:"), "{report}");
    let expected = write(dir.path(), "expected.yaml", &report);

    // The same plugin, its quota's name taken from a module of its own one directory down.
    let index = text.replace("quotaName: 'default-quota'", "quotaName: QUOTA_NAME").replace(
        "const [NAMESPACE, QUOTA] =",
        "import { QUOTA_NAME } from './lib/names.js';\n\nconst [NAMESPACE, QUOTA] =",
    );
    assert_eq!(index.matches("QUOTA_NAME").count(), 2, "the source changed: {text}");
    let several = tempfile::tempdir().unwrap();
    let files = [("index.js", index.as_str()), ("lib/names.js", "export const QUOTA_NAME = 'default-quota';\n")];
    let root = common::install_source_dir(several.path(), "nd", "namespace_defaults_js.wasm", &files, "index", "");
    let out = kubewasm_test_path(&root, &["--objects", &objects, "--expect", &expected]);
    assert!(out.status.success(), "the directory's report differs:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// `kubewasm test` of plugin file (or directory) `plugin`, on the tests' compile cache.
fn kubewasm_test_path(plugin: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("test")
        .arg(plugin)
        .arg("--compile-cache")
        .arg(common::test_compile_cache())
        .args(args)
        .output()
        .unwrap()
}
