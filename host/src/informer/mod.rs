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
//! # async fn demo(client: kube::Client) -> kubewasm::informer::Result<()> {
//! use kubewasm::informer::{Notification, SharedInformerFactory};
//! let factory = SharedInformerFactory::new(client, &prometheus::Registry::new())?;
//! let gvk = kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap");
//! let informer = factory.informer_for(&gvk).await?;
//! let _registration = informer.add_event_handler(|n: Notification| println!("{n:?}"));
//! informer.wait_for_sync().await?;
//! let cm = informer.store().get_by_key("default/kube-root-ca.crt");
//! # Ok(()) }
//! ```

mod error;
pub mod factory;
pub mod handler;
pub mod index;
pub mod metrics;
pub mod object;
pub mod reflector;
pub mod selector;
pub mod shared_informer;
pub mod store;

pub use error::{Error, Result};
pub use factory::{InformerParams, SharedInformerFactory};
pub use handler::{Notification, ResourceEventHandler};
pub use index::{CONTROLLER_OWNER_INDEX, IndexFunc, Indexers, LABEL_INDEX, NAMESPACE_INDEX};
pub use object::{CachedObject, ObjectMeta, OwnerRef};
pub use reflector::{ListStrategy, ReflectorConfig};
pub use selector::parse_label_selector;
pub use shared_informer::{HandlerRegistration, Informer};
pub use store::Store;
