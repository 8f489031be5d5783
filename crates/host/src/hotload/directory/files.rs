//! The plugin directory's files: which are plugins, from one read per pass, and their bytes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::oci;
use super::source_dir::{self, is_source_dir, is_source_path};

/// A plugin file found in the plugin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginFile {
    /// Plugin name: the file name without `.wasm` (or `.py`, `.js`; a source directory's name).
    pub name: String,
    /// The component, or the plugin's source file (`<name>.py`, `.js`) or source directory
    /// (`<name>/`); `None` for a config file naming an OCI module instead.
    pub wasm: Option<PathBuf>,
    /// Its config file, if there is one (`<name>.yaml`, `.yml` or `.json`).
    pub config: Option<PathBuf>,
}

/// The extensions of a config file, in the order one is preferred when several are there.
const CONFIG_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Every `*.wasm` in `dir` with its config file, every `*.py` and `*.js` that has one, every
/// subdirectory holding source files that has one (a `.wasm` wins over a source of the same
/// name, a directory over a file, the file of its engine's language over another), and every
/// config file without either that names a `module`, sorted by name. Hidden files (`.x.wasm`,
/// editors' and `kubectl cp`'s temporaries) are skipped; so are other config files without a
/// plugin, as before.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PluginFile>> {
    list(dir).map(|listing| listing.files)
}

/// What one read of the plugin directory found.
pub(super) struct Listing {
    /// The plugin files, as [`plugin_files`] gives them.
    pub files: Vec<PluginFile>,
    /// The names whose config file, alone, was empty or not YAML when it was read: a file being
    /// written in place, not one that stopped naming a plugin. Decided from the same read that
    /// left the name out of `files`, since a second read may find the file written whole.
    pub being_written: BTreeSet<String>,
}

/// Reads `dir` once: its plugin files and the config files being written (see [`Listing`]).
pub(super) fn list(dir: &Path) -> std::io::Result<Listing> {
    let mut being_written = BTreeSet::new();
    let mut found = Vec::new();
    let mut configs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            // A directory is a plugin only with its config beside it and source files in it.
            if let Some(config) = config_beside(&path).filter(|_| is_source_dir(&path)) {
                let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
                found.push(PluginFile { name, wasm: Some(path), config: Some(config) });
            }
            continue;
        }
        if !path.is_file() {
            continue;
        }
        let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "wasm") || is_source_path(&path) {
            let config = config_beside(&path);
            // A source file is a plugin only with its config beside it (which names its engine):
            // a helper module or a build script in the directory is not one.
            if config.is_none() && is_source_path(&path) {
                continue;
            }
            found.push(PluginFile { name, wasm: Some(path), config });
        } else if let Some(rank) = CONFIG_EXTENSIONS.iter().position(|e| path.extension().is_some_and(|x| x == *e)) {
            configs.push((name, rank, path));
        }
    }
    configs.sort();
    for (name, _, path) in configs {
        if found.iter().any(|f| f.name == name) {
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) if oci::names_module(&text) => found.push(PluginFile { name, wasm: None, config: Some(path) }),
            Ok(text) if !text.trim().is_empty() && serde_yaml::from_str::<serde_yaml::Value>(&text).is_ok() => {}
            // Empty, not YAML (yet), or gone or unreadable since it was listed: the next pass decides.
            _ => {
                being_written.insert(name);
            }
        }
    }
    // Of the files of one name, the first by `rank` stays.
    found.sort_by_cached_key(|f| (f.name.clone(), rank(f), f.wasm.clone()));
    found.dedup_by(|later, first| later.name == first.name);
    Ok(Listing { files: found, being_written })
}

/// Where a plugin file ranks among the files of its name, the first staying: its component, then
/// its source directory, then its source file in the language of the engine its config names,
/// then any other.
fn rank(file: &PluginFile) -> u8 {
    match file.wasm.as_deref() {
        Some(path) if path.is_dir() => 1,
        Some(path) if is_source_path(path) => match engine_extension(file.config.as_deref()) {
            Some(ext) if path.extension().is_some_and(|e| e == ext) => 2,
            _ => 3,
        },
        _ => 0,
    }
}

/// The source file extension of the engine `config` names (`engine: python@0.3` → `py`).
fn engine_extension(config: Option<&Path>) -> Option<&'static str> {
    let text = std::fs::read_to_string(config?).ok()?;
    let value: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
    let engine: crate::plugin::source::EngineRef = value.get("engine")?.as_str()?.parse().ok()?;
    source_dir::extension_of(&engine.language)
}

/// A plugin file's bytes as the runtime takes them: a component's as they are, a source file's
/// as a bundle of that one file, a source directory's as the bundle of its source files (see
/// `kubewasm_runtime::source`).
pub fn read_plugin(path: &Path) -> std::io::Result<Vec<u8>> {
    if path.is_dir() {
        return source_dir::read_source_dir(path);
    }
    let contents = std::fs::read(path)?;
    if !is_source_path(path) {
        return Ok(contents);
    }
    let file_name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    Ok(crate::plugin::source::bundle(&[crate::plugin::source::SourceFile { path: file_name, contents }]))
}

/// The config file beside component `wasm` (`<name>.yaml`, else `.yml`, else `.json`), if any.
pub fn config_beside(wasm: &Path) -> Option<PathBuf> {
    CONFIG_EXTENSIONS.iter().map(|ext| wasm.with_extension(ext)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotload::directory::read_config_and_module;

    #[test]
    fn a_config_without_a_component_is_a_plugin_only_when_it_names_a_module() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pulled.yaml"), "module: {oci: {ref: r.example/p:v1}}\n").unwrap();
        std::fs::write(dir.path().join("notes.yaml"), "limits: {deadlineMs: 5000}\n").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "module: {oci: {ref: r.example/p:v1}}\n").unwrap();
        std::fs::write(dir.path().join("both.wasm"), b"wasm").unwrap();
        std::fs::write(dir.path().join("both.yaml"), "module: {oci: {ref: r.example/p:v1}}\n").unwrap();
        let files = plugin_files(dir.path()).unwrap();
        let names: Vec<_> = files.iter().map(|f| (f.name.as_str(), f.wasm.is_some())).collect();
        assert_eq!(names, [("both", true), ("pulled", false)]);
        let (_, module) = read_config_and_module(&files[1]).unwrap();
        assert_eq!(module.unwrap().reference, "r.example/p:v1");
        let both = read_config_and_module(&files[0]).unwrap_err();
        assert!(format!("{both:#}").contains("keep one"), "{both:#}");
    }

    #[test]
    fn a_config_the_listing_read_empty_or_not_yaml_is_being_written_even_if_whole_by_the_time_the_pass_decides() {
        let dir = tempfile::tempdir().unwrap();
        let pulled = dir.path().join("pulled.yaml");
        std::fs::write(&pulled, "").unwrap();
        std::fs::write(dir.path().join("broken.yaml"), "module: {oci: [\n").unwrap();
        std::fs::write(dir.path().join("notes.yaml"), "limits: {deadlineMs: 5000}\n").unwrap();
        std::fs::write(dir.path().join("both.wasm"), b"wasm").unwrap();
        std::fs::write(dir.path().join("both.yaml"), "").unwrap();
        let listing = list(dir.path()).unwrap();
        // Written whole after the listing, as `std::fs::write` does after its truncate.
        std::fs::write(&pulled, "module: {oci: {ref: r.example/p:v1}}\n").unwrap();
        let names: Vec<_> = listing.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["both"]);
        let being_written: Vec<_> = listing.being_written.iter().map(String::as_str).collect();
        assert_eq!(being_written, ["broken", "pulled"], "a whole config naming no module is not one being written");
    }

    #[test]
    fn a_directory_of_source_files_is_a_plugin_with_its_config_beside_it_and_before_a_file_of_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["several/util", "unconfigured", "empty", "target/debug"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join("several/main.py"), "import util.names\n").unwrap();
        std::fs::write(root.join("several/util/names.py"), "N = 1\n").unwrap();
        std::fs::write(root.join("several.py"), "x = 1\n").unwrap();
        std::fs::write(root.join("several.yaml"), "engine: python@0.3\nentry: main\n").unwrap();
        std::fs::write(root.join("unconfigured/main.py"), "x = 1\n").unwrap();
        std::fs::write(root.join("empty.yaml"), "engine: python@0.3\n").unwrap();
        std::fs::write(root.join("target/debug/build.js"), "x\n").unwrap();
        std::fs::write(root.join("target.yaml"), "limits: {deadlineMs: 5000}\n").unwrap();
        std::fs::write(root.join("target.wasm"), b"wasm").unwrap();

        let files = plugin_files(root).unwrap();
        let found: Vec<_> = files.iter().map(|f| (f.name.as_str(), f.wasm.as_ref().unwrap().is_dir())).collect();
        assert_eq!(found, [("several", true), ("target", false)], "a component wins over a directory of its name");
        let bundle = read_plugin(files[0].wasm.as_ref().unwrap()).unwrap();
        let paths: Vec<_> = crate::plugin::source::unbundle(&bundle).unwrap().into_iter().map(|f| f.path).collect();
        assert_eq!(paths, ["main.py", "util/names.py"]);
    }

    #[test]
    fn of_two_source_files_of_one_name_the_one_in_its_engines_language_is_the_plugin() {
        let dir = tempfile::tempdir().unwrap();
        for (name, engine) in [("a", "python@0.3"), ("b", "js@0.3")] {
            std::fs::write(dir.path().join(format!("{name}.py")), "x = 1\n").unwrap();
            std::fs::write(dir.path().join(format!("{name}.js")), "export const x = 1;\n").unwrap();
            std::fs::write(dir.path().join(format!("{name}.yaml")), format!("engine: {engine}\n")).unwrap();
        }
        let files = plugin_files(dir.path()).unwrap();
        let found: Vec<_> = files.iter().map(|f| f.wasm.as_ref().unwrap().file_name().unwrap().to_owned()).collect();
        assert_eq!(found, ["a.py", "b.js"]);
    }

    #[test]
    fn a_python_file_is_a_plugin_only_with_its_config_and_a_component_of_its_name_wins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("defaults.py"), "x = 1\n").unwrap();
        std::fs::write(dir.path().join("defaults.yaml"), "engine: python@0.3\n").unwrap();
        std::fs::write(dir.path().join("helpers.py"), "y = 2\n").unwrap();
        std::fs::write(dir.path().join("both.py"), "z = 3\n").unwrap();
        std::fs::write(dir.path().join("both.wasm"), b"wasm").unwrap();
        std::fs::write(dir.path().join("both.yaml"), "limits: {deadlineMs: 5000}\n").unwrap();
        let files = plugin_files(dir.path()).unwrap();
        let found: Vec<_> =
            files.iter().map(|f| (f.name.as_str(), f.wasm.as_ref().unwrap().extension().unwrap().to_owned())).collect();
        assert_eq!(found, [("both", "wasm".into()), ("defaults", "py".into())], "helpers.py has no config");
    }

    #[test]
    fn a_javascript_file_is_a_plugin_only_with_its_config_and_a_component_of_its_name_wins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("defaults.js"), "export const x = 1;\n").unwrap();
        std::fs::write(dir.path().join("defaults.yaml"), "engine: js@0.3\n").unwrap();
        std::fs::write(dir.path().join("helpers.js"), "export const y = 2;\n").unwrap();
        std::fs::write(dir.path().join("both.js"), "export const z = 3;\n").unwrap();
        std::fs::write(dir.path().join("both.wasm"), b"wasm").unwrap();
        std::fs::write(dir.path().join("both.yaml"), "limits: {deadlineMs: 5000}\n").unwrap();
        let files = plugin_files(dir.path()).unwrap();
        let found: Vec<_> =
            files.iter().map(|f| (f.name.as_str(), f.wasm.as_ref().unwrap().extension().unwrap().to_owned())).collect();
        assert_eq!(found, [("both", "wasm".into()), ("defaults", "js".into())], "helpers.js has no config");
        let bundle = read_plugin(&dir.path().join("defaults.js")).unwrap();
        let files = crate::plugin::source::unbundle(&bundle).unwrap();
        assert_eq!(files[0].path, "defaults.js", "the source goes to its engine under its own file name");
    }
}
