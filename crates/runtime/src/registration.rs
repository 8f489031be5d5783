//! What a plugin's `describe()` asks of the host, as host types, validated.

use crate::api::Propagation;
use kube::core::GroupVersionKind;

/// Which updates of an object trigger (contract 0.2's `predicates`): an update passes if any
/// set flag's change happened; with none set, every update passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Predicates {
    /// `metadata.generation` changed.
    pub generation_changed: bool,
    /// `metadata.labels` changed.
    pub labels_changed: bool,
    /// `metadata.annotations` changed.
    pub annotations_changed: bool,
}

impl Predicates {
    /// Whether no predicate is set (every update passes).
    pub fn is_empty(&self) -> bool {
        !(self.generation_changed || self.labels_changed || self.annotations_changed)
    }
}

/// Which events of one use of a kind trigger (contract 0.2's `event-filter`), applied in the
/// trigger only: the cache and other uses of the kind see every object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventFilter {
    /// Only objects in this namespace.
    pub namespace: Option<String>,
    /// Only objects whose labels match.
    pub label_selector: Option<String>,
    /// Which updates trigger.
    pub predicates: Predicates,
}

impl EventFilter {
    /// Whether it lets every event through (then no filter is installed).
    pub fn is_empty(&self) -> bool {
        self.namespace.is_none() && self.label_selector.is_none() && self.predicates.is_empty()
    }
}

/// As `kubewasm check` prints it: `namespace N; labels SELECTOR; updates changing generation,
/// labels` (each part only when set; empty when the filter lets everything through).
impl std::fmt::Display for EventFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(ns) = &self.namespace {
            parts.push(format!("namespace {ns}"));
        }
        if let Some(selector) = &self.label_selector {
            parts.push(format!("labels {selector}"));
        }
        let p = &self.predicates;
        let changed: Vec<&str> = [
            (p.generation_changed, "generation"),
            (p.labels_changed, "labels"),
            (p.annotations_changed, "annotations"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
        if !changed.is_empty() {
            parts.push(format!("updates changing {}", changed.join(" or ")));
        }
        f.write_str(&parts.join("; "))
    }
}

/// A kind watched through the plugin's `map` export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// Kind to watch.
    pub kind: GroupVersionKind,
    /// Contract 0.1: the label selector the kind's informer is opened with, where every use of
    /// the kind has it (else the whole kind is cached); it is also `filter`'s. Always `None` for
    /// 0.2, whose selectors are event filters only.
    pub label_selector: Option<String>,
    /// Which changes are mapped.
    pub filter: EventFilter,
}

/// How the values of a custom index are computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexSource {
    /// A dotted field path into the object; arrays are flattened.
    Field(String),
    /// An index function built into the host, by name.
    Builtin(String),
}

/// A custom index over a cached kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexSpec {
    /// Kind to index.
    pub kind: GroupVersionKind,
    /// Name of the index, as used in `cache.by-index`.
    pub name: String,
    /// How values are computed.
    pub source: IndexSource,
}

/// A plugin's registration: what it reconciles, owns, watches, reads and writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The kind reconciled; each object is one key.
    pub for_kind: GroupVersionKind,
    /// Contract 0.1: the label selector `for_kind`'s informer is opened with, where every use of
    /// the kind has it (an owned or read kind is cached whole); it is also `for_filter`'s, so
    /// the trigger and the authorizer apply it whatever the informer holds. Always `None` for 0.2.
    pub for_label_selector: Option<String>,
    /// Which changes of `for_kind` objects enqueue their key, and which objects the plugin
    /// reconciles.
    pub for_filter: EventFilter,
    /// Kinds created and controlled by the plugin.
    pub owns: Vec<GroupVersionKind>,
    /// The filter of each owned kind, in the order of `owns` (0.2; empty filters for 0.1).
    pub owns_filters: Vec<EventFilter>,
    /// How each owned kind's objects the plugin no longer wants are pruned, in the order of
    /// `owns` (0.3's `owned.prune`; `None` never prunes, as for 0.1 and 0.2, whose reconciles
    /// return no desired state).
    pub owns_prune: Vec<Option<Propagation>>,
    /// Other kinds whose changes map to keys.
    pub watches: Vec<WatchSpec>,
    /// Further kinds read from the cache.
    pub reads: Vec<GroupVersionKind>,
    /// Further kinds written.
    pub writes: Vec<GroupVersionKind>,
    /// Custom indexes.
    pub indexes: Vec<IndexSpec>,
    /// Concurrent reconciles the plugin asks for.
    pub max_concurrent: Option<u32>,
}

/// A registration that cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid registration: {0}")]
pub struct InvalidRegistration(pub String);

impl Registration {
    /// A registration reconciling `for_kind` and nothing else.
    pub fn new(for_kind: GroupVersionKind) -> Self {
        Self {
            for_kind,
            for_label_selector: None,
            for_filter: EventFilter::default(),
            owns: Vec::new(),
            owns_filters: Vec::new(),
            owns_prune: Vec::new(),
            watches: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            indexes: Vec::new(),
            max_concurrent: None,
        }
    }

    /// Every kind the plugin can read: for, owns, watches, reads.
    pub fn readable_kinds(&self) -> impl Iterator<Item = &GroupVersionKind> {
        std::iter::once(&self.for_kind).chain(&self.owns).chain(self.watches.iter().map(|w| &w.kind)).chain(&self.reads)
    }

    /// Checks what the host cannot serve; the message names the field.
    pub fn validate(&self) -> Result<(), InvalidRegistration> {
        let bad = |what: &str, g: &GroupVersionKind| {
            let group_ok = g.group.is_empty() || (g.group != "core" && crate::api::address::is_subdomain(&g.group));
            (g.version.is_empty() || !crate::api::address::is_kind(&g.kind) || !group_ok).then(|| {
                InvalidRegistration(format!(
                    "{what} is not a kind the API server could serve (an empty version, a kind not in \
                     CamelCase, or the group `core`): {g:?}"
                ))
            })
        };
        if let Some(e) = bad("for-kind", &self.for_kind) {
            return Err(e);
        }
        for g in self.readable_kinds().chain(&self.writes).chain(self.indexes.iter().map(|i| &i.kind)) {
            if let Some(e) = bad("a kind", g) {
                return Err(e);
            }
        }
        if self.indexes.len() > MAX_INDEXES {
            return Err(InvalidRegistration(format!(
                "{} custom indexes; a plugin may register at most {MAX_INDEXES}",
                self.indexes.len()
            )));
        }
        for index in &self.indexes {
            if index.name.is_empty() || matches!(index.name.as_str(), "namespace" | "label" | "controller-owner") {
                return Err(InvalidRegistration(format!("index name `{}` is empty or built in", index.name)));
            }
            if let IndexSource::Builtin(name) = &index.source
                && !BUILTIN_INDEXES.contains(&name.as_str())
            {
                return Err(InvalidRegistration(format!(
                    "index `{}` uses unknown built-in `{name}`; known: {}",
                    index.name,
                    BUILTIN_INDEXES.join(", ")
                )));
            }
        }
        let filters =
            std::iter::once(&self.for_filter).chain(&self.owns_filters).chain(self.watches.iter().map(|w| &w.filter));
        for filter in filters {
            if let Some(selector) = &filter.label_selector {
                kubewasm_informer::parse_label_selector(selector)
                    .map_err(|e| InvalidRegistration(format!("label selector `{selector}`: {e}")))?;
            }
        }
        if self.max_concurrent == Some(0) {
            return Err(InvalidRegistration("max-concurrent must be at least 1".into()));
        }
        Ok(())
    }
}

/// Custom indexes one plugin may register. Protects the informers other plugins share: each
/// index computes its values from every object of its kind under the store's write lock, on
/// every event, so a plugin with hundreds of indexes slows every plugin watching that kind. 8:
/// the example plugins use at most one; client-go has no cap, but its indexers belong to one
/// controller.
pub const MAX_INDEXES: usize = 8;

/// Index functions built into the host that plugins can name in `index-source.builtin`.
pub const BUILTIN_INDEXES: &[&str] = &["pod-template-configmaps"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_with_an_unknown_builtin_index_is_invalid_and_says_which() {
        let mut reg = Registration::new(GroupVersionKind::gvk("apps", "v1", "Deployment"));
        reg.indexes.push(IndexSpec {
            kind: GroupVersionKind::gvk("apps", "v1", "Deployment"),
            name: "refs".into(),
            source: IndexSource::Builtin("nope".into()),
        });
        let err = reg.validate().unwrap_err();
        assert!(err.0.contains("unknown built-in `nope`"), "{err}");
    }

    #[test]
    fn a_registration_with_more_indexes_than_the_cap_is_invalid_and_says_the_cap() {
        let kind = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let index = |i: usize| IndexSpec {
            kind: kind.clone(),
            name: format!("i{i}"),
            source: IndexSource::Field("data.k".into()),
        };
        let mut reg = Registration::new(kind.clone());
        reg.indexes = (0..MAX_INDEXES).map(index).collect();
        assert!(reg.validate().is_ok(), "the cap itself is allowed");
        reg.indexes.push(index(MAX_INDEXES));
        let err = reg.validate().unwrap_err();
        assert!(err.0.contains(&format!("at most {MAX_INDEXES}")), "{err}");
    }

    #[test]
    fn a_registration_with_an_empty_kind_is_invalid() {
        let reg = Registration::new(GroupVersionKind::gvk("", "v1", ""));
        assert!(reg.validate().is_err());
        assert!(Registration::new(GroupVersionKind::gvk("", "v1", "Namespace")).validate().is_ok());
    }
}
