//! The layering rule inside the host library: a low module imports only the modules below it.
//! Cargo enforces it between crates; this reads it from the `crate::` paths in the sources.

use std::collections::BTreeSet;
use std::path::Path;

/// Each checked module and the modules it may import (itself always). Modules not listed (the
/// controller, hot load, canary, app, CLI and the commands) sit above all of these.
const LAYERS: &[(&str, &[&str])] = &[
    ("identity", &[]),
    ("leader", &[]),
    ("shard", &["informer", "leader"]),
    ("breaker", &["plugin"]),
    ("event_sink", &["identity", "plugin"]),
    ("rbac", &["identity", "informer", "plugin"]),
    ("handover", &["informer", "plugin"]),
    ("writer", &["event_sink", "identity", "informer", "plugin"]),
];

/// The modules `source` names as `crate::<module>`.
fn imported(source: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (i, _) in source.match_indices("crate::") {
        let rest = &source[i + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            found.insert(name);
        }
    }
    found
}

/// The `.rs` files of module `name`: `src/<name>.rs` and everything under `src/<name>/`.
fn files(src: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let file = src.join(format!("{name}.rs"));
    if file.is_file() {
        out.push(file);
    }
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn no_low_module_imports_a_module_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    for (module, allowed) in LAYERS {
        let sources = files(&src, module);
        assert!(!sources.is_empty(), "module {module} has no sources: update LAYERS");
        for file in sources {
            let text = std::fs::read_to_string(&file).unwrap();
            for name in imported(&text) {
                if name != *module && !allowed.contains(&name.as_str()) {
                    upward.push(format!("{} imports crate::{name}", file.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports against the layering rule:\n{}", upward.join("\n"));
}

#[test]
fn crate_paths_are_read_from_code_and_doc_links_alike() {
    let found = imported("use crate::plugin::host::{A, B};\n/// [`X`](crate::queue::X)\nlet x = crate::informer::y;");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["informer", "plugin", "queue"]);
}
