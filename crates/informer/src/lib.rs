//! Shared informers: one List+Watch per kind and selector, an indexed local cache, and
//! event handlers that never miss a final state (client-go `tools/cache`).
//!
//! ```text
//! SharedInformerFactory ── informer(gvk, params) ──▶ Informer (shared, ref-counted)
//!                                                   ├─ Reflector: kube-runtime watcher → Store
//!                                                   └─ handlers: one dedup'ing buffer each
//! ```
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> kubewasm_informer::Result<()> {
//! use kubewasm_informer::{Notification, SharedInformerFactory};
//! let factory = SharedInformerFactory::new(client, &prometheus::Registry::new())?;
//! let gvk = kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap");
//! let informer = factory.informer_for(&gvk).await?;
//! let _registration = informer.add_event_handler(|n: Notification| println!("{n:?}"));
//! informer.wait_for_sync().await?;
//! let cm = informer.store().get_by_key("default/kube-root-ca.crt");
//! # Ok(()) }
//! ```
//!
//! Guarantees a consumer can build on:
//! - Keep the [`Informer`] or the [`HandlerRegistration`]: the watch stops when the last of them
//!   is dropped. Asking the factory again for the same kind and params returns the same informer.
//! - A handler first gets an `Add` (with `is_in_initial_list`) for every object already cached,
//!   then every change; per key in order. A slow handler never blocks the watch: its pending
//!   notifications coalesce per key (old = what it last saw, new = latest).
//! - `Delete { final_state_unknown: true }` means the object vanished while the watch was down
//!   (found on relist), or was replaced by a new object of the same name before the handler
//!   caught up; `obj` is then the last state the cache (or the handler) knew.
//! - Reads (`get_by_key`, `list_selected`, `by_index`) are local, lock a `RwLock` briefly and
//!   return `Arc<CachedObject>`; [`CachedObject::json`] is the body exactly as cached.
//!
//! A crate of its own, below the plugin runtime and the host: it depends on no other kubewasm
//! crate, and `kubewasm-host` re-exports it as `kubewasm_host::informer`. Start reading at
//! [`SharedInformerFactory`], then [`Informer`], the reflector (`reflector.rs`) and the
//! [`Store`]; `shard/` holds the hash ranges a sharded replica caches and its shard gate.

pub mod discovery;
pub mod enqueue;
mod error;
pub mod factory;
pub mod handler;
pub mod index;
pub mod key;
pub mod labels;
pub mod metrics;
pub mod object;
pub mod raw;
pub mod reflector;
pub mod selector;
pub mod shard;
pub mod shared_informer;
pub mod store;
pub mod uid;

pub use discovery::Discovery;
pub use enqueue::Enqueue;
pub use error::{Error, Result};
pub use factory::{InformerParams, SharedInformerFactory};
pub use handler::{Notification, ResourceEventHandler};
pub use index::{CONTROLLER_OWNER_INDEX, IndexFunc, Indexers, LABEL_INDEX, NAMESPACE_INDEX};
pub use key::{InvalidKey, ObjectKey};
pub use labels::Labels;
pub use object::{CachedObject, ObjectMeta, OwnerRef};
pub use reflector::{ListStrategy, ReflectorConfig};
pub use selector::parse_label_selector;
pub use shared_informer::{HandlerRegistration, Informer};
pub use store::Store;
pub use uid::Uid;
