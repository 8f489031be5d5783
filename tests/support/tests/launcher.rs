//! The `kubewasm-control-plane` launcher's command line.

use std::process::Command;

#[test]
fn the_launcher_prints_help_instead_of_starting_a_control_plane() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm-control-plane"))
        .arg("--help")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: kubewasm-control-plane"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no kubeconfig written, none named --help");
}

#[test]
fn the_launcher_refuses_an_unknown_option() {
    let out = Command::new(env!("CARGO_BIN_EXE_kubewasm-control-plane")).arg("--verbose").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option `--verbose`"));
}
