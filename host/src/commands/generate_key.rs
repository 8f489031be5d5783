//! `kubewasm generate-key`: an ECDSA P-256 key pair for `push --sign-key` and a WasmPlugin's signature key.

use std::path::{Path, PathBuf};

use clap::Args;

use kubewasm_host::hotload::oci::signature::SigningKey;

/// `kubewasm generate-key`.
#[derive(Debug, Args)]
pub struct GenerateKeyArgs {
    /// Where to write `<prefix>.key` (the private key, PKCS#8 PEM, mode 0600) and `<prefix>.pub`
    /// (the public key a WasmPlugin names).
    #[arg(long, default_value = "kubewasm")]
    pub output_prefix: PathBuf,
}

impl GenerateKeyArgs {
    /// Writes the pair and says where.
    pub fn execute(self) -> anyhow::Result<()> {
        let (private, public) = generate_key(&self)?;
        println!("wrote {} (private) and {} (public)", private.display(), public.display());
        Ok(())
    }
}

/// Writes a new key pair to `<prefix>.key` and `<prefix>.pub`; returns their paths. An existing
/// file is not overwritten.
fn generate_key(args: &GenerateKeyArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let key = SigningKey::generate();
    let with = |ext: &str| {
        let mut path = args.output_prefix.clone().into_os_string();
        path.push(ext);
        PathBuf::from(path)
    };
    let (private, public) = (with(".key"), with(".pub"));
    let open = |path: &Path, mode: u32| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    };
    open(&private, 0o600)?.write_all(key.to_pem().as_bytes())?;
    open(&public, 0o644)?.write_all(key.public_key().to_pem().as_bytes())?;
    Ok((private, public))
}
