//! The `kubewasm` binary's offline commands, run as a user runs them.

mod common;

use std::process::Command;

#[test]
fn check_prints_kinds_as_a_manifest_names_them_and_logs_without_colour_to_a_pipe() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("check")
        .arg(common::plugin_dir().join("namespace_defaults.wasm"))
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
