//! Downloading a WasmPlugin module from an HTTP(S) URL pinned by sha256: bounded in size and
//! time, redirects followed, and the bytes rejected unless their digest is the pinned one.

use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Largest module accepted (Python and JS components are tens of MiB).
pub const MAX_MODULE_BYTES: usize = 256 << 20;
/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 5;

/// Why a module could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL does not parse, or is not http(s).
    #[error("invalid module URL `{0}`")]
    Url(String),
    /// The server answered with an error status.
    #[error("GET {url}: HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// Connection, TLS or body error.
    #[error("GET {url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// No answer in time.
    #[error("GET {0}: timed out")]
    Timeout(String),
    /// The downloaded bytes are not the pinned ones.
    #[error("the module at {url} has sha256 {got}, but the WasmPlugin pins {expected}")]
    DigestMismatch {
        /// The URL.
        url: String,
        /// Pinned digest.
        expected: String,
        /// Digest of what was downloaded.
        got: String,
    },
}

/// Downloads `url` and checks that its sha256 is `sha256` (lowercase hex).
pub async fn fetch(url: &str, sha256: &str, timeout: Duration) -> Result<Vec<u8>, FetchError> {
    tokio::time::timeout(timeout, get(url)).await.map_err(|_| FetchError::Timeout(url.to_owned()))?.and_then(|bytes| {
        let got = crate::plugin::sha256_hex(&bytes);
        if got == sha256.to_ascii_lowercase() {
            Ok(bytes)
        } else {
            Err(FetchError::DigestMismatch { url: url.to_owned(), expected: sha256.to_owned(), got })
        }
    })
}

async fn get(url: &str) -> Result<Vec<u8>, FetchError> {
    let transport = |message: String| FetchError::Transport { url: url.to_owned(), message };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| transport(format!("no TLS roots: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let mut uri: http::Uri = url.parse().map_err(|_| FetchError::Url(url.to_owned()))?;
    for _ in 0..=MAX_REDIRECTS {
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(FetchError::Url(uri.to_string()));
        }
        let response = client.get(uri.clone()).await.map_err(|e| transport(format!("{e:#}")))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers().get(http::header::LOCATION).and_then(|l| l.to_str().ok());
            let location = location.ok_or_else(|| transport(format!("HTTP {status} without a Location")))?;
            uri = resolve(&uri, location).ok_or_else(|| FetchError::Url(location.to_owned()))?;
            continue;
        }
        if !status.is_success() {
            return Err(FetchError::Status { url: uri.to_string(), status: status.as_u16() });
        }
        let body = Limited::new(response.into_body(), MAX_MODULE_BYTES);
        let bytes = body.collect().await.map_err(|e| transport(format!("{e}")))?;
        return Ok(bytes.to_bytes().to_vec());
    }
    Err(transport(format!("more than {MAX_REDIRECTS} redirects")))
}

/// A redirect target: absolute, or a path on the same server.
fn resolve(base: &http::Uri, location: &str) -> Option<http::Uri> {
    let target: http::Uri = location.parse().ok()?;
    if target.scheme().is_some() {
        return Some(target);
    }
    let mut parts = base.clone().into_parts();
    parts.path_and_query = Some(location.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_absolute_and_relative_locations() {
        let base: http::Uri = "https://example.com/a/b.wasm".parse().unwrap();
        assert_eq!(resolve(&base, "/c.wasm").unwrap().to_string(), "https://example.com/c.wasm");
        assert_eq!(resolve(&base, "http://other/x").unwrap().to_string(), "http://other/x");
    }

    #[tokio::test]
    async fn a_non_http_url_is_refused_before_any_request() {
        let err = fetch("ftp://example.com/x.wasm", "00", Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(err, FetchError::Url(_)), "{err}");
    }
}
