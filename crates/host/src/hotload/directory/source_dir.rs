//! A plugin given as a directory of source files: `<name>/`, configured by `<name>.yaml` beside
//! it, whose `.py` or `.js` files are the plugin's modules (its config's `entry:` names the one
//! to import when there are several).

use std::path::Path;

use crate::plugin::source::{SourceFile, bundle};

/// The extensions of a plugin given as source: Python and JavaScript.
const SOURCE_EXTENSIONS: [&str; 2] = ["py", "js"];

/// The source files' extension of an engine's `language` (`python` → `py`).
pub fn extension_of(language: &str) -> Option<&'static str> {
    match language {
        "python" => Some("py"),
        "js" => Some("js"),
        _ => None,
    }
}

/// Directories inside a plugin's directory that are never its source: byte-code caches and a
/// JavaScript project's installed packages (a plugin on the engine imports only the SDK and its
/// own files). Hidden entries (`.git`, editors' temporaries) are skipped too.
const NOT_SOURCE: [&str; 2] = ["__pycache__", "node_modules"];

/// Whether `path` names a source file: `.py` or `.js`.
pub fn is_source_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| SOURCE_EXTENSIONS.iter().any(|s| e == *s))
}

/// Whether `dir` is a directory holding at least one source file (at any depth).
pub fn is_source_dir(dir: &Path) -> bool {
    dir.is_dir() && walk(dir).any(|entry| entry.is_ok_and(|e| is_source_file(&e)))
}

/// The bundle of the source files under `dir` (paths relative to it, `/`-separated): what the
/// runtime takes, as for a single source file. An error if there is none.
pub fn read_source_dir(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut files = Vec::new();
    for entry in walk(dir) {
        let entry = entry?;
        if !is_source_file(&entry) {
            continue;
        }
        let relative = entry.path().strip_prefix(dir).map_err(std::io::Error::other)?;
        let parts: Vec<_> = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect();
        files.push(SourceFile { path: parts.join("/"), contents: std::fs::read(entry.path())? });
    }
    if files.is_empty() {
        let message = format!("{} holds no .py or .js file", dir.display());
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, message));
    }
    Ok(bundle(&files))
}

/// The entries under `dir`, in a stable order, without the skipped ones; links to directories
/// are not followed (a link to a file is read as the file).
fn walk(dir: &Path) -> impl Iterator<Item = walkdir::Result<walkdir::DirEntry>> {
    let skipped = |e: &walkdir::DirEntry| {
        let name = e.file_name().to_string_lossy();
        e.depth() > 0 && (name.starts_with('.') || (e.file_type().is_dir() && NOT_SOURCE.contains(&name.as_ref())))
    };
    walkdir::WalkDir::new(dir).sort_by_file_name().into_iter().filter_entry(move |e| !skipped(e))
}

fn is_source_file(entry: &walkdir::DirEntry) -> bool {
    is_source_path(entry.path()) && entry.path().is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::source::unbundle;

    #[test]
    fn a_source_directory_is_its_python_and_js_files_by_relative_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("util/__pycache__")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("node_modules/x")).unwrap();
        std::fs::write(root.join("main.py"), "import util.names\n").unwrap();
        std::fs::write(root.join("util/__init__.py"), "").unwrap();
        std::fs::write(root.join("util/names.py"), "N = 1\n").unwrap();
        std::fs::write(root.join("util/__pycache__/names.cpython-312.pyc"), "x").unwrap();
        std::fs::write(root.join("util/__pycache__/stale.py"), "x").unwrap();
        std::fs::write(root.join(".git/hook.py"), "x").unwrap();
        std::fs::write(root.join("node_modules/x/index.js"), "x").unwrap();
        std::fs::write(root.join(".#main.py"), "x").unwrap();
        std::fs::write(root.join("README.md"), "x").unwrap();

        assert!(is_source_dir(root));
        let files = unbundle(&read_source_dir(root).unwrap()).unwrap();
        let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["main.py", "util/__init__.py", "util/names.py"]);
        assert_eq!(files[2].contents, b"N = 1\n");
    }

    #[test]
    fn a_directory_without_source_is_not_a_plugin_and_reading_it_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("__pycache__")).unwrap();
        std::fs::write(dir.path().join("__pycache__/a.py"), "x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        assert!(!is_source_dir(dir.path()));
        assert!(!is_source_dir(&dir.path().join("notes.txt")), "a file is not a source directory");
        let err = read_source_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("holds no .py or .js file"), "{err}");
    }
}
