//! The SDKs this binary carries: `kubewasm new` copies the one of a project's language into
//! the project (`vendor/kubewasm-sdk/`), so the project builds on any machine, with no path to
//! the checkout `kubewasm` was built from, and pins the SDK it was made with.

use super::{File, WIT};

/// The workspace's versions of the Rust SDK's dependencies, for its standalone manifest (the
/// SDK's own `Cargo.toml` inherits them from the workspace, which a project does not have).
const RUST_MANIFEST: &str = r#"# The kubewasm Rust SDK, contract 0.3 (wit/), vendored by `kubewasm new`.
[package]
name = "kubewasm-sdk"
description = "Write kubewasm reconcile plugins in Rust: typed cache reads, apply helpers, one trait"
version = "0.3.0"
edition = "2024"
license = "Apache-2.0"
publish = false

[dependencies]
k8s-openapi = { version = "0.29", default-features = false, features = ["std", "latest"] }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
wit-bindgen = "0.61"
"#;

/// Where the Rust SDK's `wit_bindgen::generate!` finds the world in the checkout, and in a copy.
const RUST_WIT_PATH: (&str, &str) = (r#"path: "../../../wit/controller@0.3.0","#, r#"path: "wit","#);

/// The Rust SDK's sources, by path below `plugins/sdk/rust/`.
const RUST: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../plugins/sdk/rust/README.md")),
    ("src/cache.rs", include_str!("../../../plugins/sdk/rust/src/cache.rs")),
    ("src/client.rs", include_str!("../../../plugins/sdk/rust/src/client.rs")),
    ("src/conditions.rs", include_str!("../../../plugins/sdk/rust/src/conditions.rs")),
    ("src/desired.rs", include_str!("../../../plugins/sdk/rust/src/desired.rs")),
    ("src/error.rs", include_str!("../../../plugins/sdk/rust/src/error.rs")),
    ("src/events.rs", include_str!("../../../plugins/sdk/rust/src/events.rs")),
    ("src/finalizer.rs", include_str!("../../../plugins/sdk/rust/src/finalizer.rs")),
    ("src/lib.rs", include_str!("../../../plugins/sdk/rust/src/lib.rs")),
    ("src/log.rs", include_str!("../../../plugins/sdk/rust/src/log.rs")),
    ("src/registration.rs", include_str!("../../../plugins/sdk/rust/src/registration.rs")),
];

/// The Python SDK's package sources, by path below `plugins/sdk/python/`.
const PYTHON: &[(&str, &str)] = &[
    ("pyproject.toml", include_str!("../../../plugins/sdk/python/pyproject.toml")),
    ("README.md", include_str!("../../../plugins/sdk/python/README.md")),
    ("kubewasm/__init__.py", include_str!("../../../plugins/sdk/python/kubewasm/__init__.py")),
    ("kubewasm/cache.py", include_str!("../../../plugins/sdk/python/kubewasm/cache.py")),
    ("kubewasm/client.py", include_str!("../../../plugins/sdk/python/kubewasm/client.py")),
    ("kubewasm/conditions.py", include_str!("../../../plugins/sdk/python/kubewasm/conditions.py")),
    ("kubewasm/events.py", include_str!("../../../plugins/sdk/python/kubewasm/events.py")),
    ("kubewasm/finalizers.py", include_str!("../../../plugins/sdk/python/kubewasm/finalizers.py")),
    ("kubewasm/log.py", include_str!("../../../plugins/sdk/python/kubewasm/log.py")),
];

/// The JavaScript SDK's package files (its `package.json` `files`), below `plugins/sdk/js/`.
const JS: &[(&str, &str)] = &[
    ("package.json", include_str!("../../../plugins/sdk/js/package.json")),
    ("README.md", include_str!("../../../plugins/sdk/js/README.md")),
    ("kubewasm.js", include_str!("../../../plugins/sdk/js/kubewasm.js")),
    ("conditions.js", include_str!("../../../plugins/sdk/js/conditions.js")),
];

/// The directory of a project the SDK is copied into.
pub const DIR: &str = "vendor/kubewasm-sdk";

fn under(files: &[(&str, &str)]) -> Vec<File> {
    files.iter().map(|(path, text)| (format!("{DIR}/{path}"), (*text).to_owned(), false)).collect()
}

/// The Rust SDK as a crate of its own: a manifest without the workspace's inheritance, and the
/// world beside it.
pub fn rust() -> Vec<File> {
    let mut files = under(RUST);
    for (path, text, _) in &mut files {
        if path.ends_with("src/lib.rs") {
            *text = text.replace(RUST_WIT_PATH.0, RUST_WIT_PATH.1);
        }
    }
    files.push((format!("{DIR}/Cargo.toml"), RUST_MANIFEST.to_owned(), false));
    files.push((format!("{DIR}/wit/controller.wit"), WIT.to_owned(), false));
    files
}

/// The Python SDK's package.
pub fn python() -> Vec<File> {
    under(PYTHON)
}

/// The JavaScript SDK's package.
pub fn js() -> Vec<File> {
    under(JS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of `dir` (below the repository's `plugins/sdk/`) matching `keep`, relative.
    fn sources(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk").join(dir);
        let mut found = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let rel = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    dirs.push(path);
                } else if keep(&rel) {
                    found.push(rel);
                }
            }
        }
        found.sort();
        found
    }

    fn names(files: &[(&str, &str)]) -> Vec<String> {
        let mut names: Vec<String> = files.iter().map(|(p, _)| (*p).to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_binary_carries_every_source_file_of_each_sdk() {
        assert_eq!(names(RUST), sources("rust", |p| p.ends_with(".rs") || p == "README.md"));
        assert_eq!(names(PYTHON), sources("python", |p| !p.starts_with("tests/") && !p.contains("__pycache__")));
        let package: serde_json::Value = serde_json::from_str(JS[0].1).unwrap();
        let mut listed: Vec<String> = package["files"].as_array().unwrap().iter().map(|f| f.to_string()).collect();
        listed.push("\"package.json\"".into());
        let mut carried: Vec<String> = names(JS).into_iter().map(|n| format!("\"{n}\"")).collect();
        listed.sort();
        carried.sort();
        assert_eq!(carried, listed, "the npm package's files");
    }

    #[test]
    fn the_vendored_rust_sdk_builds_on_its_own_against_the_world_beside_it() {
        let files = rust();
        let lib = &files.iter().find(|(p, _, _)| p.ends_with("src/lib.rs")).unwrap().1;
        assert!(lib.contains(RUST_WIT_PATH.1) && !lib.contains(RUST_WIT_PATH.0), "the world's path is rewritten");
        assert!(files.iter().any(|(p, t, _)| p.ends_with("wit/controller.wit") && t.contains("@0.3.0")));
        let manifest = &files.iter().find(|(p, _, _)| p.ends_with("Cargo.toml")).unwrap().1;
        assert!(!manifest.contains("workspace"), "{manifest}");
        let workspace = include_str!("../../../Cargo.toml");
        for dep in [
            r#"k8s-openapi = { version = "0.29", default-features = false, features = ["std", "latest"] }"#,
            r#"serde = { version = "1", features = ["derive"] }"#,
            r#"serde_json = "1""#,
            r#"wit-bindgen = "0.61""#,
        ] {
            assert!(manifest.contains(dep) && workspace.contains(dep), "the workspace's version: {dep}");
        }
    }
}
