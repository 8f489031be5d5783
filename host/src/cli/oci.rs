//! The OCI flags of `kubewasm run` and the `kubewasm push` command.

use std::path::{Path, PathBuf};

use clap::Args;
use oci_client::secrets::RegistryAuth;

use kubewasm_host::hotload::oci::push::Artifact;
use kubewasm_host::hotload::oci::signature::SigningKey;
use kubewasm_host::hotload::oci::{Options, Puller};

/// `kubewasm run`'s registry flags.
#[derive(Debug, Clone, Args)]
pub struct OciArgs {
    /// Directory for pulled OCI modules (by digest), so restarts do not pull again; default:
    /// `oci/` in the compile cache, else none.
    #[arg(long, env = "KUBEWASM_OCI_CACHE")]
    pub oci_cache: Option<PathBuf>,
    /// PEM file of CA certificates trusted for registries beside the system's (private registries).
    #[arg(long, env = "KUBEWASM_OCI_CA_FILE")]
    pub oci_ca_file: Option<PathBuf>,
    /// Seconds between resolutions of a WasmPlugin's unpinned OCI tag (its
    /// `refreshIntervalSeconds` overrides it).
    #[arg(long, env = "KUBEWASM_OCI_REFRESH_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..))]
    pub oci_refresh_seconds: u64,
    /// Registries (`host:port`) spoken to over plain HTTP, comma-separated (a registry on
    /// localhost in development); every other registry is HTTPS.
    #[arg(long, env = "KUBEWASM_OCI_INSECURE_REGISTRIES", value_delimiter = ',')]
    pub oci_insecure_registries: Vec<String>,
    /// Require every OCI module to carry a cosign signature by the key its WasmPlugin names
    /// (`spec.module.oci.signature`): a module without a key or a valid signature is refused and
    /// the version serving keeps serving. Keyed and offline: no transparency log or CA.
    #[arg(long, env = "KUBEWASM_OCI_REQUIRE_SIGNATURE")]
    pub oci_require_signature: bool,
}

impl OciArgs {
    /// The puller options these flags ask for; `compile_cache` is the host's compile cache.
    pub fn options(&self, compile_cache: Option<&Path>) -> std::io::Result<Options> {
        let ca_pem = self.oci_ca_file.as_ref().map(std::fs::read).transpose()?;
        let cache_dir = self.oci_cache.clone().or_else(|| compile_cache.map(|c| c.join("oci")));
        Ok(Options {
            cache_dir,
            ca_pem,
            insecure_registries: self.oci_insecure_registries.clone(),
            max_layer_bytes: None,
            require_signature: self.oci_require_signature,
        })
    }
}

/// `kubewasm push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component to push.
    pub plugin: PathBuf,
    /// Where: `registry/repository:tag`.
    pub reference: String,
    /// User name for the registry (with `--password-stdin` or `KUBEWASM_REGISTRY_PASSWORD`);
    /// default: anonymous.
    #[arg(long, env = "KUBEWASM_REGISTRY_USER")]
    pub user: Option<String>,
    /// The password, read from the environment.
    #[arg(long, env = "KUBEWASM_REGISTRY_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// PEM file of CA certificates to trust beside the system's.
    #[arg(long, env = "KUBEWASM_OCI_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Push over plain HTTP (a registry on localhost).
    #[arg(long)]
    pub insecure: bool,
    /// Sign the pushed manifest with this ECDSA P-256 private key and push the signature as
    /// `cosign sign --key` does, to the digest's `sha256-<hex>.sig` tag: cosign's encrypted
    /// `cosign.key` (its password in `COSIGN_PASSWORD`, as cosign reads it), or an unencrypted
    /// PKCS#8 or SEC1 PEM (`kubewasm generate-key`, openssl).
    #[arg(long, env = "KUBEWASM_SIGN_KEY")]
    pub sign_key: Option<PathBuf>,
}

/// `kubewasm generate-key`.
#[derive(Debug, Args)]
pub struct GenerateKeyArgs {
    /// Where to write `<prefix>.key` (the private key, PKCS#8 PEM, mode 0600) and `<prefix>.pub`
    /// (the public key a WasmPlugin names).
    #[arg(long, default_value = "kubewasm")]
    pub output_prefix: PathBuf,
}

/// Pushes the component as the wasm OCI artifact; returns the reference pinned by its digest.
pub async fn push(args: &PushArgs) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let wasm = std::fs::read(&args.plugin).with_context(|| format!("reading {}", args.plugin.display()))?;
    let ca_pem = args.ca_file.as_ref().map(std::fs::read).transpose().context("reading --ca-file")?;
    let parsed = kubewasm_host::hotload::oci::parse(&args.reference)?;
    let registry = parsed.resolve_registry().to_owned();
    let insecure_registries = if args.insecure { vec![registry] } else { Vec::new() };
    let puller = Puller::new(&Options { ca_pem, insecure_registries, ..Default::default() });
    let auth = match (&args.user, &args.password) {
        (Some(user), Some(password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        (Some(_), None) => anyhow::bail!("--user needs KUBEWASM_REGISTRY_PASSWORD"),
        _ => RegistryAuth::Anonymous,
    };
    let key = match &args.sign_key {
        Some(path) => {
            let pem = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let password = std::env::var("COSIGN_PASSWORD").ok();
            Some(SigningKey::from_pem(&pem, password.as_deref())?)
        }
        None => None,
    };
    let digest = puller.push(&args.reference, &Artifact::wasm(&wasm), &auth).await?;
    if let Some(key) = &key {
        puller.push_signature(&args.reference, &digest, key, &auth).await?;
    }
    Ok(format!("{}/{}@{digest}", parsed.registry(), parsed.repository()))
}

/// Writes a new key pair to `<prefix>.key` and `<prefix>.pub`; returns their paths. An existing
/// file is not overwritten.
pub fn generate_key(args: &GenerateKeyArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
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
