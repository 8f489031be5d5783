//! Event filters: one use of a kind (for, an owned kind, a watch) sees only the events its
//! contract-0.2 `event-filter` lets through (controller-runtime's predicates), while the
//! informer, the cache and the kind's other uses see every event.

use std::sync::Arc;

use kube::core::Expression;
use serde_json::Value;

use crate::informer::labels;
use crate::informer::{CachedObject, ResourceEventHandler};
use crate::plugin::registration::{EventFilter, Predicates};

/// A parsed [`EventFilter`], checked per event without allocating (label requirements are
/// matched on the cached, already parsed labels).
pub(crate) struct Filter {
    namespace: Option<String>,
    requirements: Option<Vec<Expression>>,
    predicates: Predicates,
}

impl Filter {
    /// The filter, or `None` if it lets every event through (so none is installed). The
    /// registration's selectors were validated at load.
    pub(crate) fn new(filter: &EventFilter) -> Option<Self> {
        if filter.is_empty() {
            return None;
        }
        let requirements = filter.label_selector.as_deref().map(|s| {
            let selector = crate::informer::parse_label_selector(s).unwrap_or_default();
            labels::requirements(&selector)
        });
        Some(Self { namespace: filter.namespace.clone(), requirements, predicates: filter.predicates })
    }

    /// Whether `obj` is in the filter's namespace and matches its label selector.
    pub(crate) fn selects(&self, obj: &CachedObject) -> bool {
        self.namespace.as_deref().is_none_or(|ns| obj.namespace() == Some(ns))
            && self.requirements.as_deref().is_none_or(|r| labels::matches(r, &obj.meta().labels))
    }

    /// Whether an update passes: either state is selected (so leaving the selection is seen)
    /// and, with predicates set, one of their changes happened.
    fn passes_update(&self, old: &CachedObject, new: &CachedObject) -> bool {
        if !(self.selects(new) || self.selects(old)) {
            return false;
        }
        let p = &self.predicates;
        if p.is_empty() {
            return true;
        }
        (p.generation_changed && old.meta().generation != new.meta().generation)
            || (p.labels_changed && old.meta().labels != new.meta().labels)
            || (p.annotations_changed && annotations(old) != annotations(new))
    }
}

/// `metadata.annotations` of a cached object; parsed only for a filter that asks (annotations
/// are not kept in the cache's parsed metadata, to keep it small).
fn annotations(obj: &CachedObject) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Partial {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        annotations: Option<Value>,
    }
    serde_json::from_slice::<Partial>(obj.json()).ok().and_then(|p| p.metadata.annotations)
}

/// A handler that passes on only the events its filter lets through.
pub(crate) struct Filtered<H> {
    pub(crate) filter: Filter,
    pub(crate) inner: H,
}

impl<H: ResourceEventHandler> ResourceEventHandler for Filtered<H> {
    fn on_add(&self, obj: Arc<CachedObject>, initial: bool) {
        if self.filter.selects(&obj) {
            self.inner.on_add(obj, initial);
        }
    }
    fn on_update(&self, old: Arc<CachedObject>, new: Arc<CachedObject>) {
        if self.filter.passes_update(&old, &new) {
            self.inner.on_update(old, new);
        }
    }
    fn on_delete(&self, obj: Arc<CachedObject>, unknown: bool) {
        if self.filter.selects(&obj) {
            self.inner.on_delete(obj, unknown);
        }
    }
}

/// Adds `handler` to `informer`, behind `filter` if it filters anything.
pub(crate) fn add_filtered(
    informer: &crate::informer::Informer,
    filter: Option<&EventFilter>,
    handler: impl ResourceEventHandler,
) -> crate::informer::HandlerRegistration {
    match filter.and_then(Filter::new) {
        Some(filter) => informer.add_event_handler(Filtered { filter, inner: handler }),
        None => informer.add_event_handler(handler),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(ns: &str, labels: &str, generation: i64, annotations: &str) -> Arc<CachedObject> {
        let json = format!(
            r#"{{"metadata":{{"name":"a","namespace":"{ns}","generation":{generation},"labels":{{{labels}}},"annotations":{{{annotations}}}}}}}"#
        );
        Arc::new(CachedObject::from_json(json.into_bytes()).unwrap())
    }

    fn filter(namespace: Option<&str>, selector: Option<&str>, predicates: Predicates) -> Filter {
        let spec =
            EventFilter { namespace: namespace.map(Into::into), label_selector: selector.map(Into::into), predicates };
        Filter::new(&spec).expect("a filter that filters")
    }

    #[test]
    fn a_filter_selects_by_namespace_and_labels() {
        let f = filter(Some("a"), Some("app=web"), Predicates::default());
        assert!(f.selects(&object("a", r#""app":"web""#, 1, "")));
        assert!(!f.selects(&object("b", r#""app":"web""#, 1, "")), "another namespace");
        assert!(!f.selects(&object("a", r#""app":"db""#, 1, "")), "other labels");
    }

    #[test]
    fn generation_changed_passes_spec_changes_and_drops_status_only_updates() {
        let f = filter(None, None, Predicates { generation_changed: true, ..Predicates::default() });
        assert!(f.passes_update(&object("a", "", 1, ""), &object("a", "", 2, "")));
        assert!(!f.passes_update(&object("a", "", 2, ""), &object("a", "", 2, "")), "status-only or resync");
    }

    #[test]
    fn predicates_are_or_ed_so_a_label_change_passes_beside_generation_changed() {
        let both = Predicates { generation_changed: true, labels_changed: true, ..Predicates::default() };
        let f = filter(None, None, both);
        assert!(f.passes_update(&object("a", r#""x":"1""#, 1, ""), &object("a", r#""x":"2""#, 1, "")));
        let notes = filter(None, None, Predicates { annotations_changed: true, ..Predicates::default() });
        assert!(notes.passes_update(&object("a", "", 1, r#""n":"1""#), &object("a", "", 1, r#""n":"2""#)));
        assert!(!notes.passes_update(&object("a", "", 1, r#""n":"1""#), &object("a", "", 2, r#""n":"1""#)));
    }

    #[test]
    fn an_update_that_leaves_the_selection_still_passes() {
        let f = filter(None, Some("app=web"), Predicates::default());
        assert!(f.passes_update(&object("a", r#""app":"web""#, 1, ""), &object("a", r#""app":"db""#, 1, "")));
        assert!(!f.passes_update(&object("a", r#""app":"db""#, 1, ""), &object("a", r#""app":"x""#, 1, "")));
    }

    #[test]
    fn an_empty_filter_installs_nothing() {
        assert!(Filter::new(&EventFilter::default()).is_none());
    }
}
