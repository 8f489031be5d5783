//! `kubewasm push`: a component (or a plugin's source) pushed to an OCI registry as an artifact, optionally signed as cosign signs.

use std::path::PathBuf;

use clap::Args;
use oci_client::secrets::RegistryAuth;

use kubewasm_host::hotload::oci::push::Artifact;
use kubewasm_host::hotload::oci::signature::SigningKey;
use kubewasm_host::hotload::oci::{Options, Puller};

/// `kubewasm push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component to push (the standard wasm artifact), or a plugin's source (`<name>.py`,
    /// `<name>.js`, or a directory `<name>/` of them: kubewasm's source artifact, served by a
    /// WasmPlugin or plugin file that names its `engine`).
    pub plugin: PathBuf,
    /// Where: `registry/repository:tag`.
    pub reference: String,
    /// User name for the registry (its password in `KUBEWASM_REGISTRY_PASSWORD`); default:
    /// anonymous.
    #[arg(long, env = "KUBEWASM_REGISTRY_USER")]
    pub user: Option<String>,
    /// The password of `--user`. Prefer the environment variable: a flag's value shows in the
    /// process list.
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

impl PushArgs {
    /// Pushes (and signs) and prints the reference pinned by digest.
    pub async fn execute(self) -> anyhow::Result<()> {
        println!("{}", push(&self).await?);
        Ok(())
    }
}

/// Pushes the component as the wasm OCI artifact, or a plugin given as source as kubewasm's
/// source artifact; returns the reference pinned by its digest.
async fn push(args: &PushArgs) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let plugin = crate::offline::plugin_bytes(&args.plugin)?;
    let ca_pem = args.ca_file.as_ref().map(std::fs::read).transpose().context("reading --ca-file")?;
    let parsed = kubewasm_host::hotload::oci::parse(&args.reference)?;
    let registry = parsed.resolve_registry().to_owned();
    let insecure_registries = if args.insecure { vec![registry] } else { Vec::new() };
    let puller = Puller::new(&Options { ca_pem, insecure_registries, ..Default::default() });
    let auth = match (&args.user, &args.password) {
        (Some(user), Some(password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        (Some(_), None) => anyhow::bail!("--user needs a password: KUBEWASM_REGISTRY_PASSWORD (or --password)"),
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
    let digest = puller.push(&args.reference, &Artifact::of_plugin(&plugin), &auth).await?;
    if let Some(key) = &key {
        puller.push_signature(&args.reference, &digest, key, &auth).await?;
    }
    Ok(format!("{}/{}@{digest}", parsed.registry(), parsed.repository()))
}
