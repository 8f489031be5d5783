//! `kubewasm new`: a standalone plugin project (build script, config with a settings schema,
//! offline test over fixtures) written from templates, outside this repository.

use std::path::{Path, PathBuf};

mod vendor;

/// The languages `kubewasm new` writes projects in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// Rust, with the kubewasm Rust SDK.
    Rust,
    /// Python, with the kubewasm Python SDK: source the host runs on its Python engine, or
    /// (`--component`) a component built by componentize-py.
    Python,
    /// JavaScript, with the kubewasm JavaScript SDK: an ES module the host runs on its
    /// JavaScript engine, or (`--component`) a component bundled by rolldown and built by
    /// componentize-js.
    Js,
}

/// The contract version the templates are written for (the Rust, Python and JavaScript SDKs'
/// world, `wit/` of a project).
pub const CONTRACT: &str = "0.3.0";

/// The toolchain this repository pins (with the wasm32-wasip2 target), pinned by the project too.
const TOOLCHAIN: &str = include_str!("../../rust-toolchain.toml");

/// The world a project builds against, pinned by copying it into `wit/` (beside the vendored
/// Rust SDK, or of a Python or JavaScript project).
const WIT: &str = include_str!("../../wit/controller@0.3.0/controller.wit");

/// The Python tools this repository pins (componentize-py, flit_core; pytest for tests).
const PY_PINS: [&str; 2] =
    [include_str!("../../plugins/python/requirements.txt"), include_str!("../../plugins/python/requirements-test.txt")];

/// The JavaScript toolchain this repository pins (componentize-js, rolldown), copied byte for
/// byte, so a project's build finds the toolchain the Makefile installed under the same hash.
const JS_TOOLCHAIN: [&str; 2] =
    [include_str!("../../plugins/js/package.json"), include_str!("../../plugins/js/package-lock.json")];

/// What a project holds: the plugin's source, or a build of its component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The plugin's source and config: the host runs it on its language engine, nothing to
    /// build (Python, JavaScript).
    Source,
    /// A build script that makes a self-contained component (`<name>.wasm`).
    Component,
}

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
    #[error("no {language:?} SDK at {path} (pass --sdk: {expected})")]
    NoSdk {
        /// The project's language.
        language: Language,
        /// Where it was looked for.
        path: PathBuf,
        /// What `--sdk` may name for this language.
        expected: &'static str,
    },
    /// `--sdk` for a project given as source, which runs on the engine's SDK.
    #[error("a plugin given as source runs on the SDK its engine carries: --sdk is for --component projects")]
    SdkOfSource,
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

/// A file of a project: its path, text and whether it is executable.
type File = (String, String, bool);

/// Fills a template's placeholders.
fn fill(template: &str, name: &str, sdk: &Path) -> String {
    template
        .replace("{{plugin}}", &format!("{name}.wasm"))
        .replace("{{build_first}}", "Run ./build.sh first; ")
        .replace("{{build_hint}}", ": run ./build.sh first")
        .replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
        .replace("{{module}}", &name.replace('-', "_"))
        .replace("{{sdk}}", &sdk.display().to_string())
        .replace("{{contract}}", CONTRACT)
}

/// What every project shares: its config with the settings schema and the offline test's data.
fn common_files(name: &str) -> Vec<File> {
    let fill = |template: &str| fill(template, name, Path::new(""));
    vec![
        (format!("{name}.yaml"), fill(include_str!("scaffold/common/config.yaml.tmpl")), false),
        ("tests/fixtures.yaml".into(), fill(include_str!("scaffold/common/fixtures.yaml.tmpl")), false),
        ("tests/expected.yaml".into(), fill(include_str!("scaffold/common/expected.yaml.tmpl")), false),
    ]
}

/// The files of a Rust plugin project named `name` using the SDK at `sdk`.
fn rust_files(name: &str, sdk: &Path) -> Vec<File> {
    let fill = |template: &str| fill(template, name, sdk);
    let mut files = vec![
        ("Cargo.toml".into(), fill(include_str!("scaffold/rust/Cargo.toml.tmpl")), false),
        ("rust-toolchain.toml".into(), TOOLCHAIN.to_owned(), false),
        (".gitignore".into(), fill(include_str!("scaffold/rust/gitignore.tmpl")), false),
        ("src/lib.rs".into(), fill(include_str!("scaffold/rust/lib.rs.tmpl")), false),
        ("build.sh".into(), fill(include_str!("scaffold/rust/build.sh.tmpl")), true),
        ("tests/offline.rs".into(), fill(include_str!("scaffold/rust/offline.rs.tmpl")), false),
    ];
    files.extend(common_files(name));
    files
}

/// The files of a Python plugin project named `name` installing the SDK package `sdk`.
fn python_files(name: &str, sdk: &Path) -> Vec<File> {
    let fill = |template: &str| fill(template, name, sdk);
    let pins: Vec<&str> =
        PY_PINS.iter().flat_map(|f| f.lines()).filter(|l| !l.trim().is_empty() && !l.starts_with('#')).collect();
    let requirements =
        fill(include_str!("scaffold/python/requirements.txt.tmpl")).replace("{{pins}}", &pins.join("\n"));
    let module = name.replace('-', "_");
    let mut files = vec![
        ("requirements.txt".into(), requirements, false),
        ("wit/controller.wit".into(), WIT.to_owned(), false),
        (".gitignore".into(), fill(include_str!("scaffold/python/gitignore.tmpl")), false),
        (format!("src/{module}.py"), fill(include_str!("scaffold/python/plugin.py.tmpl")), false),
        ("build.sh".into(), fill(include_str!("scaffold/python/build.sh.tmpl")), true),
        ("tests/test_offline.py".into(), fill(include_str!("scaffold/python/test_offline.py.tmpl")), false),
    ];
    files.extend(common_files(name));
    files
}

/// The engine a plugin given as source in `language` runs on (its config's `engine:`); `None`:
/// the language is only built into components.
fn engine_of(language: Language) -> Option<&'static str> {
    match language {
        Language::Rust => None,
        Language::Python => Some("python@0.3"),
        Language::Js => Some("js@0.3"),
    }
}

/// The files of a `language` plugin project named `name` given as source: `<name>.py` or
/// `<name>.js` beside its config, which names the engine the host runs it on, and its offline
/// test; nothing to build, no SDK to install (the engine carries it).
fn source_files(language: Language, name: &str, engine: &str) -> Vec<File> {
    let (plugin, source, ignored, test) = match language {
        Language::Js => (
            format!("{name}.js"),
            include_str!("scaffold/js/plugin.js.tmpl"),
            "/.kubewasm/\n",
            ("tests/offline.test.mjs", include_str!("scaffold/js/offline.test.mjs.tmpl")),
        ),
        _ => (
            format!("{name}.py"),
            include_str!("scaffold/python/plugin.py.tmpl"),
            "/.kubewasm/\n__pycache__/\n.pytest_cache/\n",
            ("tests/test_offline.py", include_str!("scaffold/python/test_offline.py.tmpl")),
        ),
    };
    let fill = |template: &str| {
        let unbuilt =
            template.replace("{{plugin}}", &plugin).replace("{{build_first}}", "").replace("{{build_hint}}", "");
        fill(&unbuilt, name, Path::new(""))
    };
    let mut files = vec![
        (plugin.clone(), fill(source), false),
        (".gitignore".into(), ignored.to_owned(), false),
        (test.0.into(), fill(test.1), false),
    ];
    if language == Language::Js {
        // `npm test` runs the offline test; nothing to install.
        let package = serde_json::json!({
            "name": name, "version": "0.1.0", "private": true, "type": "module",
            "description": format!("kubewasm plugin {name}, run from source on the host's {engine} engine"),
            "scripts": { "test": "node --test" },
        });
        files.push(("package.json".into(), format!("{package:#}\n"), false));
    }
    for (path, text, executable) in common_files(name) {
        let text = match path == format!("{name}.yaml") {
            // The engine first: what the source runs on.
            true => text.replacen(&format!("{name}.wasm"), &plugin, 1).replacen(
                '\n',
                &format!("\nengine: {engine:<24} # the engine the host runs its source on\n"),
                1,
            ),
            false => text,
        };
        files.push((path, text, executable));
    }
    files
}

/// The files of a JavaScript plugin project named `name` depending on the SDK package `sdk`.
fn js_files(name: &str, sdk: &Path) -> Vec<File> {
    let fill = |template: &str| fill(template, name, sdk);
    let mut files = vec![
        ("package.json".into(), fill(include_str!("scaffold/js/package.json.tmpl")), false),
        ("toolchain/package.json".into(), JS_TOOLCHAIN[0].to_owned(), false),
        ("toolchain/package-lock.json".into(), JS_TOOLCHAIN[1].to_owned(), false),
        ("wit/controller.wit".into(), WIT.to_owned(), false),
        (".gitignore".into(), fill(include_str!("scaffold/js/gitignore.tmpl")), false),
        (format!("src/{name}.js"), fill(include_str!("scaffold/js/plugin.js.tmpl")), false),
        ("build.sh".into(), fill(include_str!("scaffold/js/build.sh.tmpl")), true),
        ("tests/offline.test.mjs".into(), fill(include_str!("scaffold/js/offline.test.mjs.tmpl")), false),
    ];
    files.extend(common_files(name));
    files
}

/// Checks the SDK `--sdk` named for a `language` project. Rust takes the crate's directory;
/// Python its source directory (with `pyproject.toml`), a wheel or an sdist; JavaScript its
/// directory (with `package.json`) or the tarball `npm pack` makes.
fn locate_sdk(language: Language, sdk: &Path) -> Result<PathBuf> {
    let (manifest, packages, expected): (&str, &[&str], _) = match language {
        Language::Rust => ("Cargo.toml", &[], "plugins/sdk/rust of a kubewasm checkout"),
        Language::Python => (
            "pyproject.toml",
            &[".whl", ".tar.gz"],
            "plugins/sdk/python of a kubewasm checkout, or the wheel or sdist `make sdk-packages` builds",
        ),
        Language::Js => (
            "package.json",
            &[".tgz"],
            "plugins/sdk/js of a kubewasm checkout, or the tarball `make sdk-packages` packs",
        ),
    };
    let path = sdk.to_owned();
    let missing = |path: PathBuf| Error::NoSdk { language, path, expected };
    let path = path.canonicalize().map_err(|_| missing(path.clone()))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let package = path.is_file() && packages.iter().any(|ext| name.ends_with(ext));
    if package || path.join(manifest).is_file() { Ok(path) } else { Err(missing(path)) }
}

/// Creates the `language` plugin project `name` in `dir` (default `./<name>`), building with the
/// SDK `sdk` (see `locate_sdk`), by default a copy of the one this binary carries in the
/// project's `vendor/kubewasm-sdk/`: a project holds no path to a checkout. Returns the
/// directory.
pub fn new(language: Language, name: &str, dir: Option<&Path>, sdk: Option<&Path>, form: Form) -> Result<PathBuf> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_owned);
    if dir.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::NotEmpty(dir));
    }
    let files = match (engine_of(language), form, sdk) {
        (Some(engine), Form::Source, None) => source_files(language, name, engine),
        (Some(_), Form::Source, Some(_)) => return Err(Error::SdkOfSource),
        (_, _, sdk) => component_files(language, name, sdk)?,
    };
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    for (file, text, executable) in files {
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

/// The files of a `language` project that builds a component with the SDK `sdk` (default: a
/// vendored copy of the one this binary carries).
fn component_files(language: Language, name: &str, sdk: Option<&Path>) -> Result<Vec<File>> {
    Ok(match sdk {
        Some(sdk) => {
            let sdk = locate_sdk(language, sdk)?;
            match language {
                Language::Rust => rust_files(name, &sdk),
                Language::Python => python_files(name, &sdk),
                Language::Js => js_files(name, &sdk),
            }
        }
        // Relative to the project, which its build scripts run from.
        None => match language {
            Language::Rust => [rust_files(name, Path::new(vendor::DIR)), vendor::rust()].concat(),
            Language::Python => [python_files(name, &Path::new(".").join(vendor::DIR)), vendor::python()].concat(),
            Language::Js => [js_files(name, &Path::new(".").join(vendor::DIR)), vendor::js()].concat(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubewasm_host::plugin::PluginConfig;

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
        assert!(text("build.sh").contains("$profile/hello_ns.wasm") && text("build.sh").contains("cp "));
        assert!(text("Cargo.toml").contains("[profile.quick]"), "the profile `build.sh --quick` names");
        assert!(!files.iter().any(|(_, t, _)| t.contains("{{")), "every placeholder filled");
        let config = PluginConfig::from_yaml(&text("hello-ns.yaml")).unwrap();
        assert_eq!(config.check_settings(), Ok(()));
        assert!(config.grants.write.is_empty(), "least privilege: only the ConfigMaps it controls");
        assert_eq!(config.grants.own, ["ConfigMap".parse().unwrap()].into(), "its owned kind, approved");
        assert!(text("src/lib.rs").contains("deny_unknown_fields"), "settings are strict, as in every SDK");
        let typo = PluginConfig { settings: Some(serde_json::json!({"greting": "hi"})), ..config };
        assert!(typo.check_settings().is_err(), "the schema refuses a misspelled setting");
    }

    #[test]
    fn the_python_project_pins_the_repository_tools_and_builds_from_the_installed_sdk() {
        let files = python_files("hello-ns", Path::new("/d/kubewasm_sdk-0.3.0-py3-none-any.whl"));
        let text = |f: &str| files.iter().find(|(p, _, _)| p == f).map(|(_, t, _)| t.clone()).unwrap();
        for pin in ["componentize-py==", "flit_core==", "pytest=="] {
            assert!(text("requirements.txt").lines().any(|l| l.starts_with(pin)), "{pin}");
        }
        let build = text("build.sh");
        assert!(build.contains(r#"SDK="/d/kubewasm_sdk-0.3.0-py3-none-any.whl""#), "{build}");
        assert!(
            build.contains("-p .kubewasm/site -p src hello_ns") && build.contains("-o hello-ns.wasm.tmp"),
            "{build}"
        );
        assert!(
            text("src/hello_ns.py").contains("@reconciler(") && text("tests/test_offline.py").contains("hello-ns.wasm")
        );
        assert!(text("wit/controller.wit").contains("package kubewasm:controller@0.3.0;"), "the WIT is pinned");
        assert!(!files.iter().any(|(_, t, _)| t.contains("{{")), "every placeholder filled");
        assert_eq!(PluginConfig::from_yaml(&text("hello-ns.yaml")).unwrap().check_settings(), Ok(()));
    }

    #[test]
    fn a_source_project_is_its_source_beside_a_config_naming_the_engine_and_nothing_to_build() {
        let dir = tempfile::tempdir().unwrap();
        for (language, plugin, test, extra, engine, marker) in [
            (Language::Python, "hello-ns.py", "tests/test_offline.py", None, "python@0.3", "@reconciler("),
            (Language::Js, "hello-ns.js", "tests/offline.test.mjs", Some("package.json"), "js@0.3", "reconciler("),
        ] {
            let project = new(language, "hello-ns", Some(&dir.path().join(plugin)), None, Form::Source).unwrap();
            let mut names: Vec<_> =
                walk(&project).into_iter().map(|p| p.strip_prefix(&project).unwrap().to_owned()).collect();
            names.sort();
            let mut expected =
                vec![".gitignore", plugin, "hello-ns.yaml", "tests/expected.yaml", "tests/fixtures.yaml", test];
            expected.extend(extra);
            expected.sort();
            assert_eq!(names, expected.into_iter().map(PathBuf::from).collect::<Vec<_>>(), "no build, SDK or WIT");
            let text = |f: &str| std::fs::read_to_string(project.join(f)).unwrap();
            let config = PluginConfig::from_yaml(&text("hello-ns.yaml")).unwrap();
            assert_eq!(config.engine.as_ref().map(ToString::to_string).as_deref(), Some(engine));
            assert_eq!(config.check_settings(), Ok(()));
            assert!(
                text("hello-ns.yaml").starts_with(&format!("# The config of plugin hello-ns ({plugin}, beside it)"))
            );
            assert!(text(plugin).contains(marker));
            let test = text(test);
            assert!(test.contains(plugin) && !test.contains("build.sh") && !test.contains("{{"), "{test}");
            let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk/python");
            let err = new(language, "p", Some(&dir.path().join("q")), Some(&sdk), Form::Source).unwrap_err();
            assert!(matches!(err, Error::SdkOfSource), "{err}");
        }
    }

    /// Every file under `dir`.
    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut dirs = vec![dir.to_owned()];
        let mut files = Vec::new();
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() { dirs.push(path) } else { files.push(path) }
            }
        }
        files
    }

    #[test]
    fn the_js_project_carries_the_repository_toolchain_byte_for_byte_and_depends_on_the_sdk() {
        let files = js_files("hello-ns", Path::new("/d/kubewasm-sdk-0.3.0.tgz"));
        let text = |f: &str| files.iter().find(|(p, _, _)| p == f).map(|(_, t, _)| t.clone()).unwrap();
        let package: serde_json::Value = serde_json::from_str(&text("package.json")).unwrap();
        assert_eq!(package["dependencies"]["kubewasm-sdk"], "file:/d/kubewasm-sdk-0.3.0.tgz");
        assert_eq!(package["scripts"]["test"], "node --test");
        // The same bytes hash to the toolchain directory the Makefile installed (js-<hash>).
        assert_eq!(text("toolchain/package.json"), include_str!("../../plugins/js/package.json"));
        assert_eq!(text("toolchain/package-lock.json"), include_str!("../../plugins/js/package-lock.json"));
        assert!(
            text("src/hello-ns.js").contains("from 'kubewasm-sdk'")
                && text("build.sh").contains("-o ../hello-ns.wasm.tmp")
        );
        assert!(text("tests/offline.test.mjs").contains("hello-ns.wasm"));
        assert!(!files.iter().any(|(_, t, _)| t.contains("{{")), "every placeholder filled");
        assert_eq!(PluginConfig::from_yaml(&text("hello-ns.yaml")).unwrap().check_settings(), Ok(()));
    }

    #[test]
    fn every_projects_offline_test_passes_a_compile_cache_the_project_ignores() {
        let sdk = Path::new("/sdk");
        for (files, test) in [
            (rust_files("p", sdk), "tests/offline.rs"),
            (python_files("p", sdk), "tests/test_offline.py"),
            (js_files("p", sdk), "tests/offline.test.mjs"),
        ] {
            let text = |f: &str| files.iter().find(|(p, _, _)| p == f).map(|(_, t, _)| t.clone()).unwrap();
            let test = text(test);
            assert!(test.contains("'--compile-cache'") || test.contains("\"--compile-cache\""), "{test}");
            assert!(
                test.contains("KUBEWASM_COMPILE_CACHE") && test.contains(".kubewasm/compile-cache")
                    || test.contains("\".kubewasm\" / \"compile-cache\""),
                "{test}"
            );
            assert!(text(".gitignore").lines().any(|l| l == "/.kubewasm/"), "the cache is not committed");
        }
    }

    #[test]
    fn an_sdk_is_its_languages_source_directory_or_package() {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk");
        for (language, dir) in [(Language::Rust, "rust"), (Language::Python, "python"), (Language::Js, "js")] {
            assert!(locate_sdk(language, &checkout.join(dir)).is_ok(), "{language:?}: a checkout's SDK");
        }
        let rust = checkout.join("rust");
        assert!(matches!(locate_sdk(Language::Python, &rust), Err(Error::NoSdk { .. })));
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("kubewasm_sdk-0.3.0-py3-none-any.whl");
        std::fs::write(&wheel, "").unwrap();
        assert!(locate_sdk(Language::Python, &wheel).is_ok());
        assert!(locate_sdk(Language::Js, &wheel).is_err(), "a wheel is no npm package");
        assert!(locate_sdk(Language::Js, &dir.path().join("absent.tgz")).is_err());
    }

    #[test]
    fn a_project_made_without_sdk_carries_a_copy_and_no_absolute_path() {
        let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().display().to_string();
        for language in [Language::Rust, Language::Python, Language::Js] {
            let dir = tempfile::tempdir().unwrap();
            let project = new(language, "p", Some(&dir.path().join("p")), None, Form::Component).unwrap();
            let mut vendored = 0;
            for path in walk(&project) {
                vendored += usize::from(path.starts_with(project.join(vendor::DIR)));
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(!text.contains(&checkout), "{language:?}: {} names the checkout", path.display());
            }
            assert!(vendored >= 3, "{language:?}: the SDK is in vendor/");
        }
    }

    #[test]
    fn a_project_is_not_written_over_a_directory_that_has_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "").unwrap();
        let err = new(Language::Rust, "p", Some(dir.path()), None, Form::Component).unwrap_err();
        assert!(matches!(err, Error::NotEmpty(_)), "{err}");
    }
}
