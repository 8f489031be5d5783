//! Cosign's encrypted private key (`cosign.key`), opened with its password for signing.
//!
//! The PEM (`ENCRYPTED SIGSTORE PRIVATE KEY`, or `ENCRYPTED COSIGN PRIVATE KEY` before cosign
//! 2.1) holds JSON: an scrypt KDF with its parameters and salt, a NaCl secretbox nonce and the
//! ciphertext of the PKCS#8 DER key. Only this format is written here; scrypt and secretbox are
//! RustCrypto's.

use base64::Engine as _;
use crypto_secretbox::aead::{Aead as _, KeyInit as _};
use serde::Deserialize;

/// The PEM labels cosign writes (2.1 and later, and before).
const LABELS: [&str; 2] = ["ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY"];
/// Largest scrypt work factor accepted: cosign writes 2^16; 2^20 is 1 GiB of memory.
const MAX_LOG_N: u8 = 20;

/// Why a cosign key does not open.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not cosign's format (PEM label, base64 or JSON), or a KDF or cipher it does not use.
    #[error("not a cosign encrypted key: {0}")]
    Format(String),
    /// The password does not open it (or the key was altered).
    #[error("the password does not decrypt the cosign key")]
    Password,
}

#[derive(Deserialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Deserialize)]
#[allow(non_snake_case)]
struct KdfParams {
    N: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

/// Whether `pem` is a cosign encrypted key.
pub fn is_cosign_key(pem: &str) -> bool {
    LABELS.iter().any(|label| pem.contains(&format!("-----BEGIN {label}-----")))
}

/// The PKCS#8 DER private key of cosign key `pem`, decrypted with `password`.
pub fn decrypt(pem: &str, password: &str) -> Result<Vec<u8>, Error> {
    let format = |m: &str| Error::Format(m.to_owned());
    let body: String = pem
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN "))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END "))
        .collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    let json = b64.decode(body).map_err(|_| format("the PEM body is not base64"))?;
    let key: Encrypted = serde_json::from_slice(&json).map_err(|e| Error::Format(e.to_string()))?;
    if key.kdf.name != "scrypt" || key.cipher.name != "nacl/secretbox" {
        return Err(Error::Format(format!("KDF `{}`, cipher `{}`", key.kdf.name, key.cipher.name)));
    }
    let KdfParams { N: n, r, p } = key.kdf.params;
    let log_n = n.checked_ilog2().filter(|l| n.is_power_of_two() && *l <= u32::from(MAX_LOG_N));
    let log_n = log_n.ok_or_else(|| format("scrypt N is not a power of two up to 2^20"))? as u8;
    let params = scrypt::Params::new(log_n, r, p).map_err(|e| Error::Format(e.to_string()))?;
    let salt = b64.decode(&key.kdf.salt).map_err(|_| format("the salt is not base64"))?;
    let mut secret = [0u8; 32];
    scrypt::scrypt(password.as_bytes(), &salt, &params, &mut secret).map_err(|e| Error::Format(e.to_string()))?;
    let nonce = b64.decode(&key.cipher.nonce).map_err(|_| format("the nonce is not base64"))?;
    let nonce: [u8; 24] = nonce.try_into().map_err(|_| format("the nonce is not 24 bytes"))?;
    let ciphertext = b64.decode(&key.ciphertext).map_err(|_| format("the ciphertext is not base64"))?;
    let secretbox = crypto_secretbox::XSalsa20Poly1305::new(&secret.into());
    secretbox.decrypt(&nonce.into(), ciphertext.as_slice()).map_err(|_| Error::Password)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made by `COSIGN_PASSWORD=fixture-password cosign generate-key-pair` (cosign v2.6.5), with
    /// the `cosign.pub` of the signature fixture in `signature.rs`.
    const COSIGN_KEY: &str = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnsibmFtZSI6InNjcnlwdCIsInBhcmFtcyI6eyJOIjo2NTUzNiwiciI6\nOCwicCI6MX0sInNhbHQiOiJoYzVkS2dQWHZUajkxY3p0UVFncWVoNlVTdDJEN0U5\nRnQ2VTJhK2xvbTAwPSJ9LCJjaXBoZXIiOnsibmFtZSI6Im5hY2wvc2VjcmV0Ym94\nIiwibm9uY2UiOiJ0eEVCNTRUdm5FWTA2VVk4RldQTGhXdktyMW5SMEVrQyJ9LCJj\naXBoZXJ0ZXh0IjoiSVhYc0hVb2gyNDlZSXRlMHBmT0I3UGNqSDIxaFZZSVlvejRn\ndVNESVo5YVFaK0twN1VybjgrRFh4VHRoWkp4eFBwK1JEamhsVXFSSEd6MHk4OFRx\nVXU3NXpXV0lnNEpDMjVaaG5PeGg2U29xTWhyM21DNE5oNkphZk5pVG84WU52UWQ4\nQ2xuNzRxZm1Xekl5RkdDNFBRTW5BY2NtQ0NKYmR5WDRCQjIyR3ZuRTJmZjhtL0hU\naklyNjlENjFDY0FqMVFGNmI1L3pwTkdJRGc9PSJ9\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----";

    #[test]
    fn a_cosign_key_opens_with_its_password_and_not_with_another() {
        assert!(is_cosign_key(COSIGN_KEY));
        let der = decrypt(COSIGN_KEY, "fixture-password").unwrap();
        assert!(!der.is_empty());
        assert!(matches!(decrypt(COSIGN_KEY, "wrong"), Err(Error::Password)));
        assert!(matches!(decrypt("-----BEGIN X-----\nnope\n-----END X-----", "p"), Err(Error::Format(_))));
    }

    #[test]
    fn the_opened_cosign_key_signs_for_the_cosign_pub_made_with_it() {
        use crate::hotload::oci::signature::{PublicKey, SigningKey, tests::COSIGN_PUB};
        let key = SigningKey::from_pem(COSIGN_KEY, Some("fixture-password")).unwrap();
        assert_eq!(key.public_key(), PublicKey::from_pem(COSIGN_PUB, "cosign.pub").unwrap());
    }
}
