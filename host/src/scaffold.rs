//! `kubewasm new`: a standalone plugin project (build script, config with a settings schema,
//! offline test over fixtures) written from templates, outside this repository.
//!
//! Rust only so far: the Python and JavaScript SDKs are not packaged yet (issue 18).

use std::path::{Path, PathBuf};

/// The contract version the templates are written for (the Rust SDK's world).
pub const CONTRACT: &str = "0.2.0";

/// The Rust SDK of the checkout this binary was built from; `kubewasm new --sdk` overrides it.
const BUILT_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/sdk/rust");

/// The toolchain this repository pins (with the wasm32-wasip2 target), pinned by the project too.
const TOOLCHAIN: &str = include_str!("../../rust-toolchain.toml");

/// Why a project could not be created.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name cannot name a plugin.
    #[error("`{0}` is not a plugin name: use lowercase letters, digits and `-` (a DNS label), starting with a letter")]
    Name(String),
    /// The project directory exists and is not empty.
    #[error("{0} exists and is not empty")]
    NotEmpty(PathBuf),
    /// No SDK where it was looked for.
    #[error("no Rust SDK at {0} (pass --sdk DIR: plugins/sdk/rust of a kubewasm checkout)")]
    NoSdk(PathBuf),
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A plugin name is a DNS label (it names the WasmPlugin and the `<name>.wasm` file).
fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok { Ok(()) } else { Err(Error::Name(name.to_owned())) }
}

/// The files of a Rust plugin project named `name` using the SDK at `sdk`: (path, text, executable).
fn rust_files(name: &str, sdk: &Path) -> Vec<(String, String, bool)> {
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{sdk}}", &sdk.display().to_string())
            .replace("{{contract}}", CONTRACT)
    };
    vec![
        ("Cargo.toml".into(), fill(include_str!("scaffold/rust/Cargo.toml.tmpl")), false),
        ("rust-toolchain.toml".into(), TOOLCHAIN.to_owned(), false),
        (".gitignore".into(), fill(include_str!("scaffold/rust/gitignore.tmpl")), false),
        ("src/lib.rs".into(), fill(include_str!("scaffold/rust/lib.rs.tmpl")), false),
        (format!("{name}.yaml"), fill(include_str!("scaffold/rust/config.yaml.tmpl")), false),
        ("build.sh".into(), fill(include_str!("scaffold/rust/build.sh.tmpl")), true),
        ("tests/fixtures.yaml".into(), fill(include_str!("scaffold/rust/fixtures.yaml.tmpl")), false),
        ("tests/expected.yaml".into(), fill(include_str!("scaffold/rust/expected.yaml.tmpl")), false),
        ("tests/offline.rs".into(), fill(include_str!("scaffold/rust/offline.rs.tmpl")), false),
    ]
}

/// Creates the Rust plugin project `name` in `dir` (default `./<name>`), its SDK dependency
/// pointing at `sdk` (default: the checkout this binary was built from). Returns the directory.
pub fn new_rust(name: &str, dir: Option<&Path>, sdk: Option<&Path>) -> Result<PathBuf> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_owned);
    if dir.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::NotEmpty(dir));
    }
    let sdk = sdk.map_or_else(|| PathBuf::from(BUILT_SDK), Path::to_owned);
    let sdk = sdk.canonicalize().map_err(|_| Error::NoSdk(sdk.clone()))?;
    if !sdk.join("Cargo.toml").is_file() {
        return Err(Error::NoSdk(sdk));
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    for (file, text, executable) in rust_files(name, &sdk) {
        let path = dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, text).map_err(io(&path))?;
        if executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io(&path))?;
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::PluginConfig;

    #[test]
    fn a_plugin_name_must_be_a_dns_label() {
        assert!(check_name("my-plugin2").is_ok());
        for bad in ["", "My", "2go", "a_b", "a-", "a.b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_rust_project_names_its_files_after_the_plugin_and_its_config_passes_its_schema() {
        let files = rust_files("hello-ns", Path::new("/sdk"));
        let text = |f: &str| files.iter().find(|(p, _, _)| p == f).map(|(_, t, _)| t.clone()).unwrap();
        assert!(text("Cargo.toml").contains("name = \"hello-ns\"") && text("Cargo.toml").contains("path = \"/sdk\""));
        assert!(text("build.sh").contains("release/hello_ns.wasm") && text("build.sh").contains("cp "));
        assert!(!files.iter().any(|(_, t, _)| t.contains("{{")), "every placeholder filled");
        let config = PluginConfig::from_yaml(&text("hello-ns.yaml")).unwrap();
        assert_eq!(config.check_settings(), Ok(()));
        let typo = PluginConfig { settings: Some(serde_json::json!({"greting": "hi"})), ..config };
        assert!(typo.check_settings().is_err(), "the schema refuses a misspelled setting");
    }

    #[test]
    fn a_project_is_not_written_over_a_directory_that_has_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "").unwrap();
        let err = new_rust("p", Some(dir.path()), Some(Path::new(BUILT_SDK))).unwrap_err();
        assert!(matches!(err, Error::NotEmpty(_)), "{err}");
    }
}
