//! Certificates, keys and tokens of a test control plane, made with rcgen.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// The files the apiserver reads and the secrets clients present, all under one directory.
#[derive(Debug)]
pub(crate) struct Pki {
    /// The CA that signed the serving certificate (PEM file).
    pub(crate) ca_file: PathBuf,
    /// The CA certificate in DER, as `kube::Config::root_cert` wants it.
    pub(crate) ca_der: Vec<u8>,
    /// Serving certificate and key (PEM files), SANs `127.0.0.1` and `localhost`.
    pub(crate) serving_cert_file: PathBuf,
    pub(crate) serving_key_file: PathBuf,
    /// Service-account token signing key (private, PEM) and its public half (PEM).
    pub(crate) sa_signing_key_file: PathBuf,
    pub(crate) sa_public_key_file: PathBuf,
    /// `--token-auth-file`: the admin and the restricted user.
    pub(crate) token_file: PathBuf,
    pub(crate) admin_token: String,
    pub(crate) restricted_token: String,
}

/// Name of the user in `system:masters`.
pub(crate) const ADMIN_USER: &str = "admin";
/// Name of the user without any group beyond `system:authenticated`.
pub(crate) const RESTRICTED_USER: &str = "restricted";

impl Pki {
    /// Generates everything into `dir` (which must exist).
    pub(crate) fn generate(dir: &Path) -> anyhow::Result<Self> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name.push(DnType::CommonName, "kubewasm-testenv CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut serving = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let sa_key = KeyPair::generate()?;
        let admin_token = random_token()?;
        let restricted_token = random_token()?;

        let write = |name: &str, contents: &str| -> anyhow::Result<PathBuf> {
            let path = dir.join(name);
            fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        Ok(Self {
            ca_file: write("ca.crt", &ca.pem())?,
            ca_der: ca.der().to_vec(),
            serving_cert_file: write("apiserver.crt", &serving_cert.pem())?,
            serving_key_file: write("apiserver.key", &serving_key.serialize_pem())?,
            sa_signing_key_file: write("sa-signer.key", &sa_key.serialize_pem())?,
            sa_public_key_file: write("sa-signer.pub", &sa_key.public_key_pem())?,
            // token,user,uid,"group1,group2"
            token_file: write(
                "tokens.csv",
                &format!(
                    "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
                     {restricted_token},{RESTRICTED_USER},{RESTRICTED_USER}\n"
                ),
            )?,
            admin_token,
            restricted_token,
        })
    }
}

/// 32 hex characters from the kernel's CSPRNG.
fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(&mut fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A short random lowercase-hex suffix, for unique names.
pub(crate) fn random_suffix() -> String {
    random_token().map(|t| t[..6].to_owned()).unwrap_or_else(|_| format!("{:06x}", std::process::id()))
}
