//! `kubewasm new`: a plugin project outside this repository, in Rust, Python or JavaScript.

use std::path::PathBuf;

use clap::Args;

use crate::scaffold::{self, Language};

/// `kubewasm new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The project's language.
    pub language: Language,
    /// The plugin's name (a DNS label): it names the crate, module or package, `<name>.wasm` and
    /// `<name>.yaml`.
    pub name: String,
    /// Where to create the project (must be absent or empty); default `./<name>`.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The SDK the project builds with; default: a copy of the one this binary carries, written
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
        let dir = scaffold::new(self.language, &self.name, self.dir.as_deref(), self.sdk.as_deref())?;
        println!(
            "created {}: build with {0}/build.sh, test with `kubewasm test {0}/{1}.wasm --objects {0}/tests/fixtures.yaml --expect {0}/tests/expected.yaml`",
            dir.display(),
            self.name
        );
        Ok(())
    }
}
