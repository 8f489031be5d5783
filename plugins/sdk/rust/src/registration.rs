//! A builder for what a plugin registers.

use crate::bindings::{self, Index, Owned, Watch};
pub use crate::bindings::{EventFilter, Predicates, Prune};
use crate::{Gvk, gvk};

impl EventFilter {
    /// Every event of the kind.
    pub fn all() -> Self {
        EventFilter { namespace: None, label_selector: None, predicates: Predicates::empty() }
    }

    /// Only objects in `namespace`.
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only objects whose labels match `selector`.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Only updates where one of `predicates` changed (adds and deletes always pass), e.g.
    /// `Predicates::GENERATION_CHANGED | Predicates::LABELS_CHANGED`.
    #[must_use]
    pub fn predicates(mut self, predicates: Predicates) -> Self {
        self.predicates = predicates;
        self
    }
}

/// How a custom index's values are computed.
#[derive(Clone, Debug)]
pub enum IndexSource {
    /// A dotted field path, e.g. `spec.nodeName`; arrays are flattened.
    Field(String),
    /// A host built-in index function, e.g. `pod-template-configmaps`.
    Builtin(String),
}

/// What a plugin reconciles, owns, watches, reads and writes. Built by value:
/// `Registration::reconciles::<Namespace>().owns::<ResourceQuota>()`.
#[derive(Clone, Debug)]
#[must_use]
pub struct Registration(bindings::Registration);

impl Registration {
    /// Reconciles objects of `K`.
    pub fn reconciles<K: k8s_openapi::Resource>() -> Self {
        Self::reconciles_kind(gvk::<K>())
    }

    /// Reconciles objects of any kind (e.g. a CRD without a Rust type).
    pub fn reconciles_kind(kind: Gvk) -> Self {
        Self(bindings::Registration {
            for_kind: kind,
            for_filter: EventFilter::all(),
            owns: Vec::new(),
            watches: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            indexes: Vec::new(),
            max_concurrent: None,
        })
    }

    /// Only objects of the for kind matching `selector` trigger (the cache still holds all).
    pub fn selector(mut self, selector: &str) -> Self {
        self.0.for_filter.label_selector = Some(selector.into());
        self
    }

    /// Which changes of the for kind's objects trigger.
    pub fn for_filter(mut self, filter: EventFilter) -> Self {
        self.0.for_filter = filter;
        self
    }

    /// Creates and controls objects of `K`.
    pub fn owns<K: k8s_openapi::Resource>(self) -> Self {
        self.owns_with::<K>(EventFilter::all())
    }

    /// Creates and controls objects of `K`; only changes `filter` lets through trigger.
    pub fn owns_with<K: k8s_openapi::Resource>(mut self, filter: EventFilter) -> Self {
        self.0.owns.push(Owned { kind: gvk::<K>(), filter, prune: Prune::Background });
        self
    }

    /// How the owned kind `K`'s objects that a [`DesiredState`](crate::DesiredState) plugin
    /// made for a key and no longer returns are pruned: [`Prune::Background`] unless set
    /// (Metacontroller's default), [`Prune::Foreground`], or [`Prune::Never`]. Call it after
    /// [`owns`](Self::owns).
    pub fn prune<K: k8s_openapi::Resource>(mut self, prune: Prune) -> Self {
        let kind = gvk::<K>();
        let same = |g: &Gvk| (&g.group, &g.version, &g.kind) == (&kind.group, &kind.version, &kind.kind);
        for owned in self.0.owns.iter_mut().filter(|o| same(&o.kind)) {
            owned.prune = prune;
        }
        self
    }

    /// Watches `K`; changes map to keys through [`crate::Reconciler::map`].
    pub fn watches<K: k8s_openapi::Resource>(self) -> Self {
        self.watches_kind(gvk::<K>(), EventFilter::all())
    }

    /// Watches any kind; only changes `filter` lets through are mapped. The filter is this
    /// watch's own: the cache and the kind's other uses still see every object.
    pub fn watches_kind(mut self, kind: Gvk, filter: EventFilter) -> Self {
        self.0.watches.push(Watch { kind, filter });
        self
    }

    /// Also reads `K` from the cache (needs a grant).
    pub fn reads<K: k8s_openapi::Resource>(mut self) -> Self {
        self.0.reads.push(gvk::<K>());
        self
    }

    /// Also writes `K` (needs a grant).
    pub fn writes<K: k8s_openapi::Resource>(mut self) -> Self {
        self.0.writes.push(gvk::<K>());
        self
    }

    /// Also writes objects of any kind (e.g. a CRD without a Rust type; needs a grant).
    pub fn writes_kind(mut self, kind: Gvk) -> Self {
        self.0.writes.push(kind);
        self
    }

    /// Builds index `name` over `K`.
    pub fn index<K: k8s_openapi::Resource>(mut self, name: &str, source: IndexSource) -> Self {
        let source = match source {
            IndexSource::Field(f) => bindings::IndexSource::Field(f),
            IndexSource::Builtin(b) => bindings::IndexSource::Builtin(b),
        };
        self.0.indexes.push(Index { kind: gvk::<K>(), name: name.into(), source });
        self
    }

    /// Asks for this many concurrent reconciles (the operator's setting wins).
    pub fn max_concurrent(mut self, n: u32) -> Self {
        self.0.max_concurrent = Some(n);
        self
    }
}

impl From<Registration> for bindings::Registration {
    fn from(r: Registration) -> Self {
        r.0
    }
}
