//! Write kubewasm reconcile plugins in Rust (contract `kubewasm:controller@0.3.0`).
//!
//! A plugin is a type implementing [`DesiredState`] (it says what should exist; the host applies,
//! prunes and skips unchanged writes), exported with [`export_desired_state!`], or [`Reconciler`]
//! (it writes itself), exported with [`export_reconciler!`]; built with `cargo build --target
//! wasm32-wasip2`. It reads the host's informer cache with
//! [`cache`], writes with [`client`], reports with [`events`] and [`log`], and gets the operator's
//! settings with [`settings`]. Objects are k8s-openapi types, or `serde_json::Value` for kinds
//! without one (CRDs). Controller helpers: [`finalizer`] (add/remove around a cleanup, with
//! preconditions), [`conditions`] (`meta.SetStatusCondition` semantics), [`is_controlled_by`],
//! and [`Error::terminal`] / [`Error::requeue_after`] for errors that must not back off.
//!
//! ```ignore
//! use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
//! use kubewasm_sdk::{Action, Reconciler, Registration, Request, Result};
//!
//! struct Hello;
//! impl Reconciler for Hello {
//!     fn describe() -> Registration {
//!         Registration::reconciles::<Namespace>().owns::<ConfigMap>()
//!     }
//!     fn reconcile(req: Request) -> Result<Action> {
//!         let Some(ns) = kubewasm_sdk::cache::get::<Namespace>(None, &req.name)? else { return Ok(Action::Done) };
//!         let mut cm = ConfigMap::default();
//!         cm.metadata.name = Some("hello".into());
//!         cm.metadata.namespace = Some(req.name.clone());
//!         cm.metadata.owner_references = Some(vec![kubewasm_sdk::controller_reference(&ns)]);
//!         kubewasm_sdk::client::apply(&cm)?;
//!         Ok(Action::Done)
//!     }
//! }
//! kubewasm_sdk::export_reconciler!(Hello);
//! ```

#[doc(hidden)]
// The generated functions take a WIT function's parameters one by one, flattened by the
// canonical ABI: the count is the contract's, not a choice here.
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "controller",
        path: "../../../wit/controller@0.3.0",
        pub_export_macro: true,
        export_macro_name: "__export_controller",
        default_bindings_module: "kubewasm_sdk::bindings",
    });
}

pub mod cache;
pub mod client;
pub mod conditions;
mod desired;
mod error;
pub mod events;
pub mod finalizer;
/// [`finalizer`] under the name Python's SDK uses (`kubewasm.finalizers`), so the helper is
/// found by either name.
pub use finalizer as finalizers;
pub mod log;
mod registration;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::de::DeserializeOwned;

pub use bindings::kubewasm::controller::types::{Gvk, ObjectKey, ObjectRef};
pub use desired::{Desired, DesiredState};
pub use error::{Error, Result};
pub use registration::{EventFilter, IndexSource, Predicates, Prune, Registration};

/// The kind of a k8s-openapi type.
pub fn gvk<K: k8s_openapi::Resource>() -> Gvk {
    Gvk { group: K::GROUP.into(), version: K::VERSION.into(), kind: K::KIND.into() }
}

/// One key to reconcile.
#[derive(Clone, Debug)]
pub struct Request {
    /// Namespace of the object (`None` for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
    /// Failures in a row before this attempt (0 on a first try).
    pub attempt: u32,
}

/// What the host does after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until something changes.
    Done,
    /// Reconcile again after this long.
    RequeueAfter(Duration),
}

/// A reconciler. Every call runs in a fresh instance: keep no state between calls.
pub trait Reconciler {
    /// What the plugin reconciles, owns, watches, reads and writes. Called once at load.
    fn describe() -> Registration;
    /// Reconciles one key. An `Err` is retried with backoff, unless it is
    /// [`Error::terminal`] (not retried) or [`Error::requeue_after`] (retried after its delay).
    fn reconcile(request: Request) -> Result<Action>;
    /// For a change to `object` of a watched `kind`, the keys to reconcile. Default: none. An
    /// `Err` retries the change with backoff (a few times, then it is dropped and counted).
    fn map(kind: Gvk, object: &[u8]) -> Result<Vec<ObjectKey>> {
        let _ = (kind, object);
        Ok(Vec::new())
    }
}

/// The operator's settings for this plugin, deserialized (missing fields take `T`'s defaults
/// if `T` uses `#[serde(default)]`).
pub fn settings<T: DeserializeOwned>() -> Result<T> {
    serde_json::from_slice(&bindings::kubewasm::controller::config::settings())
        .map_err(|e| Error::Json(format!("settings: {e}")))
}

/// An ownerReference making `owner` the controller of an object (`controller` and
/// `blockOwnerDeletion` set), so the host's Owns trigger and Kubernetes' garbage collector
/// follow it.
pub fn controller_reference<K>(owner: &K) -> OwnerReference
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
{
    let meta = owner.metadata();
    OwnerReference {
        api_version: K::API_VERSION.into(),
        kind: K::KIND.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `object` is controlled by `owner`: it has an ownerReference with `controller: true`
/// and `owner`'s uid (apimachinery's `metav1.IsControlledBy`). The uid, not the name, so an
/// object left by a deleted owner of the same name is not taken over.
pub fn is_controlled_by<K, O>(object: &K, owner: &O) -> bool
where
    K: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    O: k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
{
    let Some(uid) = owner.metadata().uid.as_deref() else { return false };
    let refs = object.metadata().owner_references.iter().flatten();
    refs.filter(|r| r.controller == Some(true)).any(|r| r.uid == uid)
}

/// [`is_controlled_by`] for untyped JSON objects (e.g. CRDs without a Rust type).
pub fn is_controlled_by_json(object: &serde_json::Value, owner: &serde_json::Value) -> bool {
    let Some(uid) = owner.pointer("/metadata/uid").and_then(serde_json::Value::as_str) else { return false };
    let refs = object.pointer("/metadata/ownerReferences").and_then(serde_json::Value::as_array);
    refs.into_iter().flatten().any(|r| {
        r.get("controller").and_then(serde_json::Value::as_bool) == Some(true)
            && r.get("uid").and_then(serde_json::Value::as_str) == Some(uid)
    })
}

/// A reference to `object` for [`events`].
pub fn object_ref<K>(object: &K) -> ObjectRef
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
{
    let meta = object.metadata();
    ObjectRef {
        kind: gvk::<K>(),
        key: ObjectKey { namespace: meta.namespace.clone(), name: meta.name.clone().unwrap_or_default() },
    }
}

/// [`controller_reference`] for an untyped JSON object (a custom resource without a Rust type,
/// read with `cache::get_as::<serde_json::Value>`): `Json` if it has no `apiVersion`, `kind`, `metadata.name` or
/// `metadata.uid`.
pub fn controller_reference_json(owner: &serde_json::Value) -> Result<OwnerReference> {
    let field = |pointer: &str| json_str(owner, pointer);
    Ok(OwnerReference {
        api_version: field("/apiVersion")?,
        kind: field("/kind")?,
        name: field("/metadata/name")?,
        uid: field("/metadata/uid")?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// [`object_ref`] for an untyped JSON object: `Json` if it has no `apiVersion`, `kind` or
/// `metadata.name`.
pub fn object_ref_json(object: &serde_json::Value) -> Result<ObjectRef> {
    let api_version = json_str(object, "/apiVersion")?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let kind = Gvk { group: group.to_owned(), version: version.to_owned(), kind: json_str(object, "/kind")? };
    let namespace = object.pointer("/metadata/namespace").and_then(serde_json::Value::as_str).map(str::to_owned);
    Ok(ObjectRef { kind, key: ObjectKey { namespace, name: json_str(object, "/metadata/name")? } })
}

/// The string at `pointer` in `object`, or a `Json` error naming the field.
fn json_str(object: &serde_json::Value, pointer: &str) -> Result<String> {
    object
        .pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Error::Json(format!("the object has no {}", pointer[1..].replace('/', "."))))
}

#[doc(hidden)]
pub mod __private {
    use super::*;

    pub fn describe<R: Reconciler>() -> bindings::Registration {
        R::describe().into()
    }

    pub fn reconcile<R: Reconciler>(
        r: bindings::Request,
    ) -> core::result::Result<bindings::Reconciled, bindings::ReconcileError> {
        match R::reconcile(request(r)) {
            Ok(action) => Ok(bindings::Reconciled { desired: None, action: action_of(action) }),
            Err(e) => Err(e.into_reconcile_error()),
        }
    }

    pub fn desired<D: DesiredState>(
        r: bindings::Request,
    ) -> core::result::Result<bindings::Reconciled, bindings::ReconcileError> {
        let desired = D::desired(request(r)).and_then(|d| d.map(Desired::into_parts).transpose());
        match desired {
            Ok(None) => Ok(bindings::Reconciled { desired: None, action: bindings::Action::Done }),
            Ok(Some((state, action))) => Ok(bindings::Reconciled { desired: Some(state), action: action_of(action) }),
            Err(e) => Err(e.into_reconcile_error()),
        }
    }

    fn request(r: bindings::Request) -> Request {
        Request { namespace: r.key.namespace, name: r.key.name, attempt: r.attempt }
    }

    fn action_of(action: Action) -> bindings::Action {
        match action {
            Action::Done => bindings::Action::Done,
            Action::RequeueAfter(d) => bindings::Action::RequeueAfter(millis(d)),
        }
    }

    pub fn map<R: Reconciler>(
        kind: Gvk,
        object: &[u8],
    ) -> core::result::Result<Vec<ObjectKey>, bindings::kubewasm::controller::types::Error> {
        R::map(kind, object).map_err(Error::into_host_error)
    }

    pub fn describe_desired<D: DesiredState>() -> bindings::Registration {
        D::describe().into()
    }

    pub fn map_desired<D: DesiredState>(
        kind: Gvk,
        object: &[u8],
    ) -> core::result::Result<Vec<ObjectKey>, bindings::kubewasm::controller::types::Error> {
        D::map(kind, object).map_err(Error::into_host_error)
    }

    pub(crate) fn millis(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Exports a [`Reconciler`] as the plugin's `describe`, `reconcile` and `map`.
#[macro_export]
macro_rules! export_reconciler {
    ($reconciler:ty) => {
        $crate::__export_guest!(describe, reconcile, map, $reconciler);
    };
}

/// Exports a [`DesiredState`] as the plugin's `describe`, `reconcile` and `map`.
#[macro_export]
macro_rules! export_desired_state {
    ($plugin:ty) => {
        $crate::__export_guest!(describe_desired, desired, map_desired, $plugin);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_guest {
    ($describe:ident, $reconcile:ident, $map:ident, $plugin:ty) => {
        #[doc(hidden)]
        pub struct __KubewasmGuest;
        impl $crate::bindings::Guest for __KubewasmGuest {
            fn describe() -> $crate::bindings::Registration {
                $crate::__private::$describe::<$plugin>()
            }
            fn reconcile(
                request: $crate::bindings::Request,
            ) -> ::core::result::Result<$crate::bindings::Reconciled, $crate::bindings::ReconcileError> {
                $crate::__private::$reconcile::<$plugin>(request)
            }
            fn map(
                kind: $crate::Gvk,
                object: ::std::vec::Vec<u8>,
            ) -> ::core::result::Result<
                ::std::vec::Vec<$crate::ObjectKey>,
                $crate::bindings::kubewasm::controller::types::Error,
            > {
                $crate::__private::$map::<$plugin>(kind, &object)
            }
        }
        $crate::bindings::__export_controller!(__KubewasmGuest with_types_in $crate::bindings);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> serde_json::Value {
        serde_json::json!({"apiVersion": "example.dev/v1", "kind": "Tenant",
            "metadata": {"name": "acme", "uid": "u-1"}})
    }

    #[test]
    fn a_json_custom_resource_makes_the_same_controller_reference_as_a_typed_object() {
        let reference = controller_reference_json(&tenant()).unwrap();
        assert_eq!(
            (reference.api_version.as_str(), reference.kind.as_str(), reference.name.as_str(), reference.uid.as_str()),
            ("example.dev/v1", "Tenant", "acme", "u-1")
        );
        assert_eq!((reference.controller, reference.block_owner_deletion), (Some(true), Some(true)));
        let child = serde_json::json!({"metadata": {"ownerReferences": [serde_json::to_value(&reference).unwrap()]}});
        assert!(is_controlled_by_json(&child, &tenant()));
    }

    #[test]
    fn a_json_object_ref_splits_its_api_version_and_keeps_its_namespace() {
        let cluster_scoped = object_ref_json(&tenant()).unwrap();
        assert_eq!((cluster_scoped.kind.group.as_str(), cluster_scoped.kind.version.as_str()), ("example.dev", "v1"));
        assert_eq!((cluster_scoped.key.namespace, cluster_scoped.key.name.as_str()), (None, "acme"));
        let core =
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}});
        let core = object_ref_json(&core).unwrap();
        assert_eq!((core.kind.group.as_str(), core.key.namespace.as_deref()), ("", Some("a")));
    }

    #[test]
    fn a_json_object_without_a_uid_or_kind_is_an_error_naming_the_field() {
        let mut no_uid = tenant();
        no_uid["metadata"].as_object_mut().unwrap().remove("uid");
        let err = controller_reference_json(&no_uid).unwrap_err();
        assert!(matches!(&err, Error::Json(m) if m.contains("metadata.uid")), "{err:?}");
        let err = object_ref_json(&serde_json::json!({"apiVersion": "v1"})).unwrap_err();
        assert!(matches!(&err, Error::Json(m) if m.contains("kind")), "{err:?}");
    }
}
