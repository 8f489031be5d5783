//! `kubewasm new`: a plugin project outside this repository, in Rust, Python or JavaScript.

use std::path::PathBuf;

use clap::Args;

use crate::scaffold::{self, Form, Language};

/// `kubewasm new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The project's language.
    pub language: Language,
    /// The plugin's name (a DNS label): it names the crate, module or package, `<name>.py` or
    /// `<name>.wasm`, and `<name>.yaml`.
    pub name: String,
    /// Python and JavaScript: a project that builds a self-contained component (`build.sh`, the
    /// SDK vendored or `--sdk`), instead of the plugin's source, which the host runs on its
    /// language engine with nothing to build. A Rust project always builds one.
    #[arg(long)]
    pub component: bool,
    /// Where to create the project (must be absent or empty); default `./<name>`.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The SDK a `--component` project builds with (a source plugin runs on its engine's); default: a copy of the one this binary carries, written
    /// into the project's `vendor/kubewasm-sdk/` (no path outside the project). Rust: the
    /// crate's directory (a path dependency). Python: the
    /// SDK's directory, or the wheel or sdist `make sdk-packages` builds (build.sh installs it
    /// with pip). JavaScript: the SDK's directory, or the tarball `make sdk-packages` packs (a
    /// `file:` dependency).
    #[arg(long, env = "KUBEWASM_SDK")]
    pub sdk: Option<PathBuf>,
}

impl NewArgs {
    /// Writes the project and says how to build and test it.
    pub fn execute(self) -> anyhow::Result<()> {
        let form = match self.component || self.language == Language::Rust {
            true => Form::Component,
            false => Form::Source,
        };
        let dir = scaffold::new(self.language, &self.name, self.dir.as_deref(), self.sdk.as_deref(), form)?;
        let (d, name) = (dir.display(), &self.name);
        let test = |plugin: &str| {
            format!("`kubewasm test {d}/{plugin} --objects {d}/tests/fixtures.yaml --expect {d}/tests/expected.yaml`")
        };
        let source = match self.language {
            Language::Js => format!("{name}.js"),
            _ => format!("{name}.py"),
        };
        match form {
            Form::Source => {
                println!(
                    "created {d}: nothing to build; test with {}, serve with `kubewasm dev --plugins {d}`",
                    test(&source)
                );
            }
            Form::Component => {
                println!("created {d}: build with {d}/build.sh, test with {}", test(&format!("{name}.wasm")));
            }
        }
        Ok(())
    }
}
