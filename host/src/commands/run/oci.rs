//! `kubewasm run`'s registry flags, for WasmPlugins whose module is an OCI artifact.

use std::path::{Path, PathBuf};

use clap::Args;

use kubewasm_host::hotload::oci::Options;

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
