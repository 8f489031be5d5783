//! The operator tools the chart and alert tests run, `helm` and `promtool`, found where
//! `tests/helm/build.sh` and `tests/promtool/build.sh` cache them (as the registry is found).

use std::path::PathBuf;

/// The Helm version `tests/helm/build.sh` builds by default.
pub const DEFAULT_HELM_VERSION: &str = "4.3.1";
/// The Prometheus module version (`v0.316.0` is Prometheus 3.16.0) whose promtool
/// `tests/promtool/build.sh` builds by default.
pub const DEFAULT_PROMTOOL_VERSION: &str = "0.316.0";

/// A tool built from its Go module and cached by version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// The Helm CLI (`helm.sh/helm/v4/cmd/helm`).
    Helm,
    /// Prometheus' rule checker and rule unit-test runner.
    Promtool,
}

impl Tool {
    /// The binary's name, its cache directory's and its variables' (`KUBEWASM_<NAME>_VERSION`,
    /// `KUBEWASM_<NAME>_CACHE`).
    pub fn name(self) -> &'static str {
        match self {
            Tool::Helm => "helm",
            Tool::Promtool => "promtool",
        }
    }

    fn default_version(self) -> &'static str {
        match self {
            Tool::Helm => DEFAULT_HELM_VERSION,
            Tool::Promtool => DEFAULT_PROMTOOL_VERSION,
        }
    }

    /// `$KUBEWASM_<NAME>_CACHE` or `$XDG_CACHE_HOME/kubewasm/<name>` or
    /// `~/.cache/kubewasm/<name>`, then `$KUBEWASM_<NAME>_VERSION`, then the binary: where its
    /// build script puts it.
    pub fn path(self) -> PathBuf {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let upper = self.name().to_ascii_uppercase();
        let root = env(&format!("KUBEWASM_{upper}_CACHE"))
            .map(PathBuf::from)
            .or_else(|| env("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("kubewasm").join(self.name())))
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache/kubewasm").join(self.name())))
            .unwrap_or_else(|| PathBuf::from(".cache/kubewasm").join(self.name()));
        let version = std::env::var(format!("KUBEWASM_{upper}_VERSION")).ok().filter(|v| !v.is_empty());
        root.join(version.as_deref().unwrap_or(self.default_version())).join(self.name())
    }

    /// The binary, or `None` (skipped, with a message on stderr) when it is not built; in CI
    /// (`CI=true`) a missing binary panics instead.
    pub fn locate_or_skip(self) -> Option<PathBuf> {
        let path = self.path();
        if crate::binaries::is_executable(&path) {
            return Some(path);
        }
        let message = format!(
            "kubewasm-testenv: no {name} at {}.\nBuild it once with `make {name}` (or tests/{name}/build.sh). \
             Tests that run it are SKIPPED locally without it and FAIL when CI=true.",
            path.display(),
            name = self.name()
        );
        assert!(!crate::binaries::in_ci(), "{message}");
        crate::to_real_stderr(&message);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Tool;

    #[test]
    fn each_tool_is_looked_for_in_a_directory_of_its_version() {
        if std::env::var_os("KUBEWASM_HELM_VERSION").is_some()
            || std::env::var_os("KUBEWASM_PROMTOOL_VERSION").is_some()
        {
            return;
        }
        let (helm, promtool) = (Tool::Helm.path(), Tool::Promtool.path());
        assert!(helm.ends_with(format!("{}/helm", super::DEFAULT_HELM_VERSION)), "{}", helm.display());
        assert!(promtool.ends_with(format!("{}/promtool", super::DEFAULT_PROMTOOL_VERSION)), "{}", promtool.display());
    }
}
