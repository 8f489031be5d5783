//! Shared informers: one List+Watch per kind and selector, an indexed local cache, and
//! event handlers that never miss a final state (client-go `tools/cache`).
//!
//! ```text
//! SharedInformerFactory ── informer(gvk, params) ──▶ Informer (shared, ref-counted)
//!                                                   ├─ reflector: kube-runtime watcher → Store
//!                                                   └─ handlers: one dedup'ing buffer each
//! ```

mod error;
pub mod index;
pub mod object;
pub mod selector;
pub mod store;

pub use error::{Error, Result};
pub use index::{CONTROLLER_OWNER_INDEX, IndexFunc, Indexers, LABEL_INDEX, NAMESPACE_INDEX};
pub use object::{CachedObject, ObjectMeta, OwnerRef};
pub use selector::parse_label_selector;
pub use store::Store;
