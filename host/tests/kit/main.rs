//! The operator's kit against the real tools: the Helm chart (deploy/helm/kubewasm) with `helm`
//! (lint, template beside kustomize, install, upgrade, uninstall on a real kube-apiserver), its
//! alerting rules with `promtool`, and every metric the dashboard and rules name on a running
//! host. A binary of its own, beside `all`: it needs `make helm promtool` besides the control
//! plane and the plugins. One file: `cargo test -p kubewasm --test kit chart::`.

#[path = "../common/mod.rs"]
mod common;

mod alerts;
mod chart;
mod metrics;

use std::path::{Path, PathBuf};
use std::process::Command;

use kubewasm_testenv::Tool;

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    common::examples::deploy_dir().join("helm/kubewasm")
}

/// The dashboard and the rules files the chart ships (its `files/`).
pub fn chart_file(name: &str) -> PathBuf {
    chart_dir().join("files").join(name)
}

/// `helm` with a private home (no repositories, no cache of the machine's user), or `None` when
/// it is not built and CI is not set.
pub fn helm(home: &Path) -> Option<Command> {
    let binary = Tool::Helm.locate_or_skip()?;
    let mut command = Command::new(binary);
    for (var, dir) in [("HELM_CONFIG_HOME", "config"), ("HELM_CACHE_HOME", "cache"), ("HELM_DATA_HOME", "data")] {
        command.env(var, home.join(dir));
    }
    Some(command)
}

/// Every object of a multi-document YAML stream (`helm template`, `kubectl kustomize`), as JSON;
/// empty documents are skipped.
pub fn objects(yaml: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(yaml)
        .filter_map(|doc| serde_json::Value::deserialize(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}
