//! Where the kube-apiserver, etcd and kubectl binaries are found.

use std::path::{Path, PathBuf};

/// The Kubernetes version `tests/control-plane/build.sh` builds by default: the one k8s-openapi's
/// `latest` feature maps to in the workspace's k8s-openapi 0.29 (`v1_37`).
pub const DEFAULT_K8S_VERSION: &str = "1.37.2";

/// The three binaries a control plane needs.
#[derive(Debug, Clone)]
pub(crate) struct Binaries {
    pub(crate) apiserver: PathBuf,
    pub(crate) etcd: PathBuf,
    pub(crate) kubectl: PathBuf,
}

impl Binaries {
    /// `$KUBEBUILDER_ASSETS` when set (the envtest convention), else the cache of
    /// `tests/control-plane/build.sh`: `$KUBEWASM_K8S_CACHE` or `$XDG_CACHE_HOME/kubewasm/k8s` or
    /// `~/.cache/kubewasm/k8s`, then `$KUBEWASM_K8S_VERSION` (default [`DEFAULT_K8S_VERSION`]).
    pub(crate) fn locate() -> Result<Self, String> {
        Self::in_dir(&asset_dir())
    }

    /// The binaries in `dir`, or a message naming the missing ones and how to build them.
    fn in_dir(dir: &Path) -> Result<Self, String> {
        let bins = Self { apiserver: dir.join("kube-apiserver"), etcd: dir.join("etcd"), kubectl: dir.join("kubectl") };
        let missing: Vec<&str> =
            [(&bins.apiserver, "kube-apiserver"), (&bins.etcd, "etcd"), (&bins.kubectl, "kubectl")]
                .into_iter()
                .filter(|(p, _)| !is_executable(p))
                .map(|(_, n)| n)
                .collect();
        if missing.is_empty() { Ok(bins) } else { Err(missing_message(dir, &missing)) }
    }
}

fn asset_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let root = std::env::var_os("KUBEWASM_K8S_CACHE")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()).map(|d| PathBuf::from(d).join("kubewasm/k8s"))
        })
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubewasm/k8s")))
        .unwrap_or_else(|| PathBuf::from(".cache/kubewasm/k8s"));
    let version = std::env::var("KUBEWASM_K8S_VERSION").ok().filter(|v| !v.is_empty());
    root.join(version.as_deref().unwrap_or(DEFAULT_K8S_VERSION))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

fn missing_message(dir: &Path, missing: &[&str]) -> String {
    format!(
        "kubewasm-testenv: no real control plane: {} missing in {}.\n\
         Build them once (Go and the Go module proxy are enough; cold it takes minutes):\n    \
         make control-plane        # or: tests/control-plane/build.sh\n\
         or point KUBEBUILDER_ASSETS at a directory holding kube-apiserver, etcd and kubectl.\n\
         These tests are SKIPPED locally without them and FAIL when CI=true.",
        missing.join(", "),
        dir.display()
    )
}

/// Whether we run in CI (`CI=true` or `CI=1`), where missing binaries fail instead of skipping.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").map(|v| v.eq_ignore_ascii_case("true") || v == "1").unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::Binaries;

    #[test]
    fn missing_binaries_are_named_with_how_to_build_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("etcd"), "not executable").unwrap();
        let message = Binaries::in_dir(dir.path()).unwrap_err();
        assert!(message.contains("kube-apiserver, etcd, kubectl missing"), "{message}");
        assert!(message.contains("make control-plane"), "{message}");
        assert!(message.contains("tests/control-plane/build.sh"), "{message}");
        assert!(message.contains("KUBEBUILDER_ASSETS"), "{message}");
    }
}
