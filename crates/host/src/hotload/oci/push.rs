//! Pushing a component as the standard wasm OCI artifact: an OCI image manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is the component (`application/wasm`);
//! a plugin given as source the same way, with kubewasm's media types and its source bundle.

use std::collections::BTreeMap;

use oci_client::RegistryOperation;
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use serde_json::json;

use super::{
    CONFIG_MEDIA_TYPE, Error, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, Puller, Result, SOURCE_CONFIG_MEDIA_TYPE,
    SOURCE_LAYER_MEDIA_TYPE, parse,
};

/// An artifact to push: its config and one layer, each with its media type.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// The config blob.
    pub config: Vec<u8>,
    /// The config's media type.
    pub config_media_type: String,
    /// The layer blob.
    pub layer: Vec<u8>,
    /// The layer's media type.
    pub layer_media_type: String,
    /// The layer's annotations (a signature's).
    pub layer_annotations: BTreeMap<String, String>,
}

impl Artifact {
    /// The wasm artifact of `component`. Its config names no creation time, so pushing the same
    /// bytes twice gives the same manifest digest.
    pub fn wasm(component: &[u8]) -> Self {
        let layer_digest = digest(component);
        let config = json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
        });
        Self {
            config: serde_json::to_vec(&config).expect("JSON serializes"),
            config_media_type: CONFIG_MEDIA_TYPE.to_owned(),
            layer: component.to_vec(),
            layer_media_type: LAYER_MEDIA_TYPE.to_owned(),
            layer_annotations: BTreeMap::new(),
        }
    }

    /// The source artifact of a plugin given as source: `bundle`, its files as the plugin
    /// directory reads them (`kubewasm_runtime::source::bundle`). Stable as [`wasm`](Self::wasm).
    pub fn source(bundle: &[u8]) -> Self {
        let config = json!({ "layerDigests": [digest(bundle)] });
        Self {
            config: serde_json::to_vec(&config).expect("JSON serializes"),
            config_media_type: SOURCE_CONFIG_MEDIA_TYPE.to_owned(),
            layer: bundle.to_vec(),
            layer_media_type: SOURCE_LAYER_MEDIA_TYPE.to_owned(),
            layer_annotations: BTreeMap::new(),
        }
    }

    /// The artifact of a plugin file's bytes: a source bundle's, else a component's.
    pub fn of_plugin(bytes: &[u8]) -> Self {
        if crate::plugin::source::is_bundle(bytes) { Self::source(bytes) } else { Self::wasm(bytes) }
    }

    /// The manifest's bytes, as pushed.
    pub fn manifest(&self) -> Vec<u8> {
        let descriptor = |bytes: &[u8], media_type: &str| OciDescriptor {
            media_type: media_type.to_owned(),
            digest: digest(bytes),
            size: bytes.len() as i64,
            ..Default::default()
        };
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.to_owned()),
            config: descriptor(&self.config, &self.config_media_type),
            layers: vec![OciDescriptor {
                annotations: (!self.layer_annotations.is_empty()).then(|| self.layer_annotations.clone()),
                ..descriptor(&self.layer, &self.layer_media_type)
            }],
            artifact_type: None,
            subject: None,
            annotations: None,
        };
        serde_json::to_vec(&manifest).expect("a manifest serializes")
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", crate::plugin::sha256_hex(bytes))
}

impl Puller {
    /// Pushes `artifact` to `reference` (a tag or a digest); returns the manifest's digest.
    pub async fn push(&self, reference: &str, artifact: &Artifact, auth: &RegistryAuth) -> Result<String> {
        let parsed = parse(reference)?;
        let oci = |e| Error::from_oci(reference, e);
        let client = self.client(parsed.resolve_registry(), auth);
        client.auth(&parsed, auth, RegistryOperation::Push).await.map_err(oci)?;
        for blob in [&artifact.config, &artifact.layer] {
            client.push_blob(&parsed, blob.clone(), &digest(blob)).await.map_err(oci)?;
        }
        let manifest = artifact.manifest();
        let content_type = http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE);
        client.push_manifest_raw(&parsed, manifest.clone(), content_type).await.map_err(oci)?;
        Ok(digest(&manifest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wasm_artifact_has_the_standard_media_types_and_a_stable_digest() {
        let artifact = Artifact::wasm(b"\0asm");
        let manifest: serde_json::Value = serde_json::from_slice(&artifact.manifest()).unwrap();
        assert_eq!(manifest["mediaType"], MANIFEST_MEDIA_TYPE);
        assert_eq!(manifest["config"]["mediaType"], CONFIG_MEDIA_TYPE);
        assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
        assert_eq!(manifest["layers"][0]["mediaType"], LAYER_MEDIA_TYPE);
        assert_eq!(manifest["layers"][0]["digest"], digest(b"\0asm"));
        assert_eq!(digest(&artifact.manifest()), digest(&Artifact::wasm(b"\0asm").manifest()), "reproducible");
    }
}
