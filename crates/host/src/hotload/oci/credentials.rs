//! Registry credentials from a `kubernetes.io/dockerconfigjson` Secret in the host's own
//! namespace: the entry for the module's registry becomes the pull's basic auth.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// The Secret type a pull secret must have.
pub const SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The key holding its JSON.
const KEY: &str = ".dockerconfigjson";

/// Why a pull secret gives no credentials.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Secret could not be read (absent, or the host may not read it).
    #[error("pull secret {namespace}/{name}: {source}")]
    Unreadable {
        /// Its namespace (the host's).
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Not a dockerconfigjson Secret, or its JSON does not parse.
    #[error("pull secret {name}: {message}")]
    Invalid {
        /// Its name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// It has no entry for the module's registry.
    #[error("pull secret {name} has no credentials for registry {registry}")]
    NoEntry {
        /// Its name.
        name: String,
        /// The registry.
        registry: String,
    },
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
}

/// The credentials `secret` holds for `registry` (`host[:port]`). An entry is matched by its
/// host and port with any `https://` prefix and path dropped, as docker's config file is read.
pub fn auth_for(secret: &Secret, registry: &str) -> Result<RegistryAuth, Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let invalid = |message: String| Error::Invalid { name: name.clone(), message };
    if secret.type_.as_deref() != Some(SECRET_TYPE) {
        return Err(invalid(format!("type is {:?}, not {SECRET_TYPE}", secret.type_.as_deref().unwrap_or(""))));
    }
    let json = secret.data.as_ref().and_then(|d| d.get(KEY)).ok_or_else(|| invalid(format!("no `{KEY}` key")))?;
    let config: DockerConfig = serde_json::from_slice(&json.0).map_err(|e| invalid(e.to_string()))?;
    let host = |key: &str| {
        let key = key.trim_start_matches("https://").trim_start_matches("http://");
        key.split('/').next().unwrap_or(key).to_owned()
    };
    let entry = config
        .auths
        .iter()
        .find(|(key, _)| host(key) == registry)
        .map(|(_, entry)| entry)
        .ok_or_else(|| Error::NoEntry { name: name.clone(), registry: registry.to_owned() })?;
    match (&entry.username, &entry.password, &entry.auth) {
        (Some(user), Some(password), _) => Ok(RegistryAuth::Basic(user.clone(), password.clone())),
        (_, _, Some(auth)) => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth)
                .map_err(|e| invalid(format!("`auth` is not base64: {e}")))?;
            let decoded = String::from_utf8(decoded).map_err(|_| invalid("`auth` is not UTF-8".into()))?;
            let (user, password) =
                decoded.split_once(':').ok_or_else(|| invalid("`auth` is not `user:password`".into()))?;
            Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()))
        }
        _ => Err(invalid(format!("the entry for {registry} has neither username/password nor auth"))),
    }
}

/// Reads the pull secret `name` from `namespace` (the host's own) with the host's client.
pub async fn read(client: &kube::Client, namespace: &str, name: &str) -> Result<Secret, Error> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    api.get(name).await.map_err(|source| Error::Unreadable {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    fn secret(type_: &str, json: serde_json::Value) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta { name: Some("pull".into()), ..Default::default() },
            type_: Some(type_.into()),
            data: Some([(KEY.to_owned(), ByteString(json.to_string().into_bytes()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_entry_for_the_registry_gives_basic_auth_from_either_form() {
        let s = secret(
            SECRET_TYPE,
            serde_json::json!({"auths": {
                "https://r.example:5000/v1/": {"username": "u", "password": "p"},
                "other.example": {"auth": base64::engine::general_purpose::STANDARD.encode("me:secret")},
            }}),
        );
        assert_eq!(auth_for(&s, "r.example:5000").unwrap(), RegistryAuth::Basic("u".into(), "p".into()));
        assert_eq!(auth_for(&s, "other.example").unwrap(), RegistryAuth::Basic("me".into(), "secret".into()));
        assert!(matches!(auth_for(&s, "third.example"), Err(Error::NoEntry { .. })));
    }

    #[test]
    fn a_secret_of_another_type_is_refused() {
        let s = secret("Opaque", serde_json::json!({"auths": {}}));
        assert!(matches!(auth_for(&s, "r"), Err(Error::Invalid { .. })));
    }
}
