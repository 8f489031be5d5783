//! Errors of the informer layer.

use kube::core::GroupVersionKind;

use super::selector::SelectorError;

/// Errors of the informer layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An object body could not be (de)serialized.
    #[error("object JSON: {0}")]
    Serialize(serde_json::Error),
    /// An object without `metadata.name` cannot be keyed.
    #[error("object has no metadata.name")]
    MissingName,
    /// A label selector string did not parse.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// `by_index` and friends named an index that is not registered.
    #[error("index {0:?} does not exist")]
    IndexNotFound(String),
    /// `add_indexers` named an index that already exists.
    #[error("index {0:?} already exists")]
    IndexExists(String),
    /// Discovery does not know the kind (also after re-running it).
    #[error("kind {} {}/{} is not served: {source}", .gvk.kind, .gvk.group, .gvk.version)]
    KindNotFound {
        /// The kind asked for.
        gvk: GroupVersionKind,
        /// What discovery answered.
        #[source]
        source: Box<kube::Error>,
    },
    /// A namespace scope was asked for a cluster-scoped kind.
    #[error("kind {} is cluster-scoped; it cannot be watched in namespace {namespace:?}", .gvk.kind)]
    ClusterScoped {
        /// The kind asked for.
        gvk: GroupVersionKind,
        /// The namespace asked for.
        namespace: String,
    },
    /// Registering a metric failed (usually: a second factory on the same registry).
    #[error("registering informer metrics: {0}")]
    Metrics(prometheus::Error),
    /// The informer stopped before it synced.
    #[error("informer stopped before its cache synced")]
    Stopped,
}

impl Error {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Serialize(_) => "serialize",
            Self::MissingName => "missing_name",
            Self::Selector(_) => "selector",
            Self::IndexNotFound(_) => "index_not_found",
            Self::IndexExists(_) => "index_exists",
            Self::KindNotFound { .. } => "kind_not_found",
            Self::ClusterScoped { .. } => "cluster_scoped",
            Self::Metrics(_) => "metrics",
            Self::Stopped => "stopped",
        }
    }
}

/// Result with the informer [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
