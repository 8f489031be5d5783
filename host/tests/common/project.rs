//! An author's project: `kubewasm` installed as `make install` leaves it, and a project it made
//! outside the checkout, built with the project's own `build.sh`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::run_ok;

/// `kubewasm` as an author has it after `make install`: this build's binary copied into a `bin/`
/// outside the checkout, first on `$PATH`, and the engines `make engines` built into
/// `lib/kubewasm/engines` beside it. Commands get no `$KUBEWASM` and no variable naming
/// the checkout (cargo gives this test `CARGO_MANIFEST_DIR` and the like), so a project's test
/// runner finds the binary on the PATH or not at all, and a build cannot reach the checkout.
pub struct Installed {
    _root: tempfile::TempDir,
    bin: PathBuf,
    path: OsString,
}

impl Installed {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        outside_the_checkout(root.path());
        let bin = root.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        place(Path::new(env!("CARGO_BIN_EXE_kubewasm")), &bin.join("kubewasm"));
        let built = engine_dir();
        let engines = root.path().join("lib/kubewasm/engines");
        std::fs::create_dir_all(&engines).unwrap();
        let copied = std::fs::read_dir(&built).into_iter().flatten().flatten().map(|entry| entry.path());
        let copied = copied.filter(|p| p.extension().is_some_and(|e| e == "wasm"));
        let copied: Vec<_> = copied.map(|p| std::fs::copy(&p, engines.join(p.file_name().unwrap())).unwrap()).collect();
        assert!(!copied.is_empty(), "no engine in {}: run `make engines`", built.display());
        let rest = std::env::var_os("PATH").unwrap_or_default();
        let outside = std::env::split_paths(&rest).filter(|dir| !dir.starts_with(checkout()));
        let dirs = std::iter::once(bin.clone()).chain(outside);
        Self { path: std::env::join_paths(dirs).unwrap(), bin, _root: root }
    }

    /// Puts a copy of another `program` beside `kubewasm` on this PATH (a tool the author
    /// installed too, e.g. `kubewasm-go-component`).
    pub fn add(&self, program: &Path) {
        place(program, &self.bin.join(program.file_name().unwrap()));
    }

    /// `program` as the author runs it: from `cwd`, with this `kubewasm` on the PATH (a bare
    /// `program` is looked up on that PATH too) and no `$KUBEWASM`.
    pub fn command(&self, program: impl AsRef<OsStr>, cwd: &Path) -> Command {
        outside_the_checkout(cwd);
        let mut command = Command::new(program);
        command.current_dir(cwd).env("PATH", &self.path).env_remove("KUBEWASM");
        let checkout = checkout().display().to_string();
        for (name, value) in std::env::vars_os() {
            if name != "PATH" && value.to_string_lossy().contains(&checkout) {
                command.env_remove(name);
            }
        }
        command
    }
}

/// Puts program `from` at `to`: a hard link, else a copy. A copy is written through a file
/// descriptor that a child forked meanwhile by another test's thread holds until it execs, and
/// running the copy then fails with "Text file busy"; a link writes nothing.
fn place(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

/// The engines `make engines` built: `$KUBEWASM_ENGINE_DIR`, else `engines` in the target dir.
pub fn engine_dir() -> PathBuf {
    std::env::var_os("KUBEWASM_ENGINE_DIR")
        .map_or_else(|| Path::new(env!("CARGO_BIN_EXE_kubewasm")).parent().unwrap().join("../engines"), PathBuf::from)
}

/// The checkout this test binary was built from.
pub fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn outside_the_checkout(dir: &Path) {
    let dir = dir.canonicalize().unwrap();
    assert!(!dir.starts_with(checkout().canonicalize().unwrap()), "{} is inside the checkout", dir.display());
}

/// Where the Rust projects of these tests build (`$CARGO_TARGET_DIR` for their `build.sh`): one
/// dir, so the SDK and k8s-openapi compile for wasm32-wasip2 once (minutes cold on 2 cores).
pub fn rust_target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("new-e2e-target")
}

/// A `language` project named `name`, as an author has it: made by the installed `kubewasm new`
/// (with `flags`, e.g. `--component`) in one temporary directory, then copied into another (as a clone elsewhere would be) and the
/// original removed, so nothing in it can lean on where it was made. Returns the copy (kept
/// alive by the guard).
pub fn scaffold(kubewasm: &Installed, language: &str, name: &str, flags: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let made = tempfile::tempdir().unwrap();
    let project = made.path().join(name);
    let dir = project.display().to_string();
    let new = || {
        let mut new = kubewasm.command("kubewasm", made.path());
        new.args(["new", language, name, "--dir", &dir]).args(flags);
        new
    };
    let created = run_ok(new());
    assert!(created.contains("test with `kubewasm test"), "{created}");
    names_no_checkout(&project);
    assert!(!new().output().unwrap().status.success(), "a project is never written over");
    let clone = tempfile::tempdir().unwrap();
    let mut cp = Command::new("cp");
    cp.arg("-R").arg(&project).arg(clone.path());
    run_ok(cp);
    drop(made);
    let project = clone.path().join(name);
    (clone, project)
}

/// Runs `project`'s `build.sh` from the project as its author does; a Rust project builds
/// offline into [`rust_target_dir`]. Asserts that it wrote `<name>.wasm`.
pub fn build(kubewasm: &Installed, project: &Path, name: &str) {
    build_with(kubewasm, project, name, &[]);
}

/// [`build`] with `args` to `build.sh` (`--quick`: a Rust project's quick profile).
pub fn build_with(kubewasm: &Installed, project: &Path, name: &str, args: &[&str]) {
    let mut build = kubewasm.command(project.join("build.sh"), project);
    build.args(args);
    if project.join("Cargo.toml").is_file() {
        build.arg("--offline").env("CARGO_TARGET_DIR", rust_target_dir());
    }
    run_ok(build);
    assert!(project.join(format!("{name}.wasm")).is_file(), "build.sh wrote {name}.wasm");
}

/// Asserts that no file of the freshly made `project` names the checkout: it builds from the
/// SDK copy in its `vendor/` (a project given as source builds nothing and carries no SDK), so
/// it can be committed and built anywhere.
pub fn names_no_checkout(project: &Path) {
    let checkout = checkout().display().to_string();
    for file in files_under(project) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains(&checkout), "{} names the checkout {checkout}", file.display());
    }
    let built = project.join("build.sh").is_file();
    assert_eq!(project.join("vendor/kubewasm-sdk").is_dir(), built, "the SDK is vendored where it is built");
}

/// Every file under `dir`, recursively, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { dirs.push(path) } else { files.push(path) }
        }
    }
    files.sort();
    files
}

/// Where the Makefile installs the Python and JavaScript toolchains (and build.sh looks).
pub fn tools_dir() -> PathBuf {
    std::env::var_os("KUBEWASM_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/kubewasm/tools"))
}

/// The componentize-py venv `make py-plugins sdk-test` installed; panics, saying how to get it.
pub fn python_toolchain() -> PathBuf {
    let pins = include_str!("../../../plugins/python/requirements.txt");
    let version = pins.lines().find_map(|l| l.strip_prefix("componentize-py==")).expect("componentize-py pinned");
    let venv = tools_dir().join(format!("componentize-py-{version}"));
    for tool in ["componentize-py", "pytest"] {
        assert!(
            venv.join("bin").join(tool).is_file(),
            "no {tool} in {}: install the Python toolchain with `make py-plugins sdk-test` (`make test` does)",
            venv.display()
        );
    }
    venv
}

/// The JavaScript toolchain `make js-plugins` installed (named by its lock file's hash, which a
/// `kubewasm new js` project carries byte for byte); panics, saying how to get it.
pub fn js_toolchain() -> PathBuf {
    use sha2::Digest as _;
    let manifests =
        [include_str!("../../../plugins/js/package.json"), include_str!("../../../plugins/js/package-lock.json")];
    let hash = hex::encode(sha2::Sha256::digest(manifests.concat()));
    let dir = tools_dir().join(format!("js-{}", &hash[..16]));
    assert!(
        dir.join(".installed").is_file(),
        "no JavaScript toolchain in {}: install it with `make js-plugins` (`make test` does)",
        dir.display()
    );
    dir
}
