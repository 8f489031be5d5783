//! The `kubewasm` binary's offline commands, run as a user runs them.

use crate::common;

use std::process::Command;

#[test]
fn check_prints_kinds_as_a_manifest_names_them_and_logs_without_colour_to_a_pipe() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("check")
        .arg(common::install_plugin(cache.path(), "namespace-defaults", "namespace_defaults.wasm", ""))
        .arg("--compile-cache")
        .arg(cache.path())
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "check failed: {stderr}");
    assert!(stdout.contains("reconciles:     v1 Namespace\n"), "{stdout}");
    assert!(stdout.contains("owns:           v1 ResourceQuota, networking.k8s.io/v1 NetworkPolicy\n"), "{stdout}");
    assert!(!stdout.contains("GroupVersionKind"), "{stdout}");
    assert!(stderr.contains("plugin loaded"), "the load is logged: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no colour escapes when stderr is not a terminal: {stderr:?}");
    assert!(std::fs::read_dir(cache.path()).unwrap().next().is_some(), "--compile-cache was used");
}

#[test]
fn the_examples_overlay_holds_each_plugins_rbac_exactly_as_kubewasm_rbac_prints_it() {
    let dir = tempfile::tempdir().unwrap();
    common::examples::install_examples(dir.path());
    for name in ["namespace-defaults", "config-reloader", "configmap-sync"] {
        let mut rbac = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
        rbac.args(["--log", "warn", "rbac"]).arg(dir.path().join(format!("{name}.wasm")));
        let printed = common::run_ok(rbac);
        let committed = common::examples::deploy_dir().join(format!("overlays/examples/identities/{name}.yaml"));
        let committed = std::fs::read_to_string(&committed).unwrap();
        assert_eq!(
            printed, committed,
            "deploy/overlays/examples/identities/{name}.yaml is stale: regenerate it with `kubewasm rbac`"
        );
    }
}

#[test]
fn kubewasm_rbac_reads_a_wasm_plugin_manifest_as_the_plugins_config_and_name() {
    let dir = tempfile::tempdir().unwrap();
    common::examples::install_examples(dir.path());
    let config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.path().join("namespace-defaults.yaml")).unwrap()).unwrap();
    let mut spec = config;
    spec["module"] = serde_yaml::from_str("configMap: {name: modules, key: namespace-defaults.wasm}").unwrap();
    let manifest = serde_yaml::to_string(&serde_json::json!({
        "apiVersion": "kubewasm.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": { "name": "namespace-defaults" },
        "spec": spec,
    }))
    .unwrap();
    let manifest_path = dir.path().join("wasmplugin.yaml");
    std::fs::write(&manifest_path, manifest).unwrap();
    // Under another file name, so the name can only come from the manifest.
    std::fs::copy(dir.path().join("namespace-defaults.wasm"), dir.path().join("module.wasm")).unwrap();
    let mut rbac = Command::new(env!("CARGO_BIN_EXE_kubewasm"));
    rbac.args(["--log", "warn", "rbac"]).arg(dir.path().join("module.wasm")).arg("--config").arg(&manifest_path);
    let printed = common::run_ok(rbac);
    let committed = common::examples::deploy_dir().join("overlays/examples/identities/namespace-defaults.yaml");
    assert_eq!(printed, std::fs::read_to_string(committed).unwrap());
}

/// `kubewasm check` on a copy of the contract fixture in a directory of its own, with `config`
/// as its `contract.yaml` (none if `None`): (success, stdout, stderr).
fn check_contract(config: Option<&str>) -> (bool, String, String) {
    check_fixture("fixture_contract.wasm", "contract", config)
}

/// `kubewasm check` on a copy of the fixture `built` named `name` in a directory of its own, with
/// `config` as its `<name>.yaml` (none if `None`): (success, stdout, stderr).
fn check_fixture(built: &str, name: &str, config: Option<&str>) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join(format!("{name}.wasm"));
    std::fs::copy(common::plugin_dir().join(built), &wasm).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.path().join(format!("{name}.yaml")), config).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(["--log", "warn", "check"])
        .arg(&wasm)
        .arg("--compile-cache")
        .arg(common::test_compile_cache())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).replace(&dir.path().display().to_string(), "DIR");
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// What the contract fixture asks for, approved.
const CONTRACT_GRANTS: &str = "grants: {read: [ConfigMap, Secret], own: [Secret], write: [ConfigMap, Namespace], \
                               sensitive: {namespaces: [team]}}\n";

#[test]
fn check_prints_each_kinds_event_filter_beside_it() {
    let config = format!("{CONTRACT_GRANTS}settings: {{namespace: team, predicates: [generation, labels]}}\n");
    let (ok, stdout, stderr) = check_contract(Some(&config));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(
            "reconciles:     v1 ConfigMap (namespace team; labels kubewasm.test/contract=yes; updates changing generation or labels)\n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("owns:           v1 Secret (namespace team)\n"), "{stdout}");
    assert!(
        stdout.contains("watches:        v1 Secret (namespace team; labels kubewasm.test/watched=yes)\n"),
        "{stdout}"
    );
}

#[test]
fn a_missing_grant_names_the_config_file_and_the_grants_to_add_to_it() {
    let (ok, _, stderr) = check_contract(Some("settings: {namespace: team}\n"));
    assert!(!ok);
    assert!(stderr.contains("DIR/contract.yaml"), "the config file is to blame, not the component: {stderr}");
    let asked = "has not approved: read ConfigMap, read Secret, own Secret, write ConfigMap, write Namespace;";
    assert!(stderr.contains(asked), "each once, and no status approval a write approval covers: {stderr}");
    assert!(
        stderr.contains(
            "add to its config `grants: {read: [ConfigMap, Secret], own: [Secret], write: [ConfigMap, Namespace]}`"
        ),
        "{stderr}"
    );
    let (ok, _, stderr) = check_contract(None);
    assert!(!ok && stderr.contains("DIR/contract.yaml (absent: create it beside DIR/contract.wasm)"), "{stderr}");
}

#[test]
fn a_setting_the_schema_refuses_is_blamed_on_the_config_file_and_named_by_its_pointer() {
    let schema =
        "settingsSchema: {type: object, properties: {namespace: {type: string}}, additionalProperties: false}\n";
    let (ok, _, stderr) = check_contract(Some(&format!("{CONTRACT_GRANTS}settings: {{namespce: team}}\n{schema}")));
    assert!(!ok);
    assert!(stderr.contains("DIR/contract.yaml"), "{stderr}");
    assert!(stderr.contains("/namespce: not a setting the schema allows"), "{stderr}");
}

#[test]
fn an_unknown_config_field_is_reported_once() {
    let (ok, _, stderr) = check_contract(Some("setings: {}\n"));
    assert!(!ok);
    assert_eq!(stderr.matches("unknown field `setings`").count(), 1, "{stderr}");
}

#[test]
fn a_relative_compile_cache_is_taken_from_the_working_directory() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(["--log", "warn", "check"])
        .arg(common::install_plugin(work.path(), "namespace-defaults", "namespace_defaults.wasm", ""))
        .args(["--compile-cache", "relative/cache"])
        .current_dir(work.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_dir(work.path().join("relative/cache")).unwrap().next().is_some(), "the cache was filled");
}

/// A hostile plugin that reconciles Nodes (so writes their status) and registers writes of an
/// admission webhook and a ClusterRoleBinding: each is a dangerous kind.
const SELF_DECLARED: &str = "settings:\n  for: {version: v1, kind: Node}\n  writes:\n    \
    - {group: admissionregistration.k8s.io, version: v1, kind: ValidatingWebhookConfiguration}\n    \
    - {group: rbac.authorization.k8s.io, version: v1, kind: ClusterRoleBinding}\n";

#[test]
fn a_plugin_declaring_dangerous_kinds_is_refused_at_load_with_every_approval_to_paste() {
    // Sorted by group, then kind.
    let approvals = "read: [Node], status: [Node], write: [ValidatingWebhookConfiguration.admissionregistration.k8s.io, \
                     ClusterRoleBinding.rbac.authorization.k8s.io]";
    let dangerous = "dangerous: [Node, ValidatingWebhookConfiguration.admissionregistration.k8s.io, \
                     ClusterRoleBinding.rbac.authorization.k8s.io]";
    let (ok, _, stderr) = check_fixture("fixture_hostile.wasm", "hostile", Some(SELF_DECLARED));
    assert!(!ok, "a plugin with no grants loaded owning dangerous kinds: {stderr}");
    assert!(stderr.contains("DIR/hostile.yaml"), "the config file is to blame: {stderr}");
    assert!(stderr.contains(&format!("`grants: {{{approvals}, {dangerous}}}`")), "{stderr}");
    let (ok, _, stderr) =
        check_fixture("fixture_hostile.wasm", "hostile", Some(&format!("grants: {{{approvals}}}\n{SELF_DECLARED}")));
    assert!(!ok && stderr.contains(&format!("`grants: {{{dangerous}}}`")), "write alone is not enough: {stderr}");
}

#[test]
fn check_prints_the_dangerous_kinds_a_plugin_was_approved_to_write() {
    let kinds = "[Node, ValidatingWebhookConfiguration.admissionregistration.k8s.io, \
                 ClusterRoleBinding.rbac.authorization.k8s.io]";
    let grants = format!(
        "grants:\n  read: [Node]\n  status: [Node]\n  write: {}\n  dangerous: {kinds}\n",
        kinds.replacen("Node, ", "", 1)
    );
    let (ok, stdout, stderr) =
        check_fixture("fixture_hostile.wasm", "hostile", Some(&format!("{grants}{SELF_DECLARED}")));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(
            "dangerous kinds it may write (approved): Node, \
             ValidatingWebhookConfiguration.admissionregistration.k8s.io, ClusterRoleBinding.rbac.authorization.k8s.io\n"
        ),
        "{stdout}"
    );
    let (ok, stdout, stderr) = check_contract(Some(CONTRACT_GRANTS));
    assert!(ok && stdout.contains("dangerous kinds it may write (approved): -\n"), "{stderr}{stdout}");
}

#[test]
fn a_compile_cache_on_a_noexec_file_system_serves_its_compiled_files_read_into_memory() {
    // A file system mounted `noexec` refuses to map code: the compiled file is read instead of
    // being found unloadable, deleted and compiled again on every load. The mount is made in a
    // user and mount namespace of the test's own (`unshare`), so no privilege is needed.
    let dir = tempfile::tempdir().unwrap();
    let plugin = common::install_plugin(dir.path(), "namespace-defaults", "namespace_defaults.wasm", "");
    let cache = dir.path().join("noexec-cache");
    std::fs::create_dir(&cache).unwrap();
    let script = r#"mount -t tmpfs -o noexec tmpfs "$1" && grep -q " $1 tmpfs .*noexec" /proc/self/mounts \
        && "$2" check "$3" --compile-cache "$1" && "$2" check "$3" --compile-cache "$1""#;
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"])
        .arg(&cache)
        .arg(env!("CARGO_BIN_EXE_kubewasm"))
        .arg(&plugin)
        .output()
        .expect("unshare (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "two checks on a noexec compile cache: {stderr}");
    assert_eq!(stderr.matches("plugin loaded").count(), 2, "{stderr}");
    assert!(!stderr.contains("not loadable"), "a compiled file was refused and compiled again: {stderr}");
}
