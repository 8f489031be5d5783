//! Conversions between the generated types of each contract version and the host's own: kinds,
//! errors, registrations. A new contract version adds its conversions here.

use kube::core::GroupVersionKind;

use super::{v0_1, v0_2};
use crate::api::CallError;
use crate::registration::{EventFilter, IndexSource, IndexSpec, Predicates, Registration, WatchSpec};

impl From<v0_1::types::Gvk> for GroupVersionKind {
    fn from(g: v0_1::types::Gvk) -> Self {
        GroupVersionKind::gvk(&g.group, &g.version, &g.kind)
    }
}

impl From<&GroupVersionKind> for v0_1::types::Gvk {
    fn from(g: &GroupVersionKind) -> Self {
        v0_1::types::Gvk { group: g.group.clone(), version: g.version.clone(), kind: g.kind.clone() }
    }
}

impl From<v0_2::types::Gvk> for GroupVersionKind {
    fn from(g: v0_2::types::Gvk) -> Self {
        GroupVersionKind::gvk(&g.group, &g.version, &g.kind)
    }
}

impl From<&GroupVersionKind> for v0_2::types::Gvk {
    fn from(g: &GroupVersionKind) -> Self {
        v0_2::types::Gvk { group: g.group.clone(), version: g.version.clone(), kind: g.kind.clone() }
    }
}

impl From<CallError> for v0_1::types::Error {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotFound => Self::NotFound,
            CallError::Forbidden(m) => Self::Forbidden(m),
            CallError::Conflict(m) => Self::Conflict(m),
            CallError::Invalid(m) => Self::Invalid(m),
            CallError::Unavailable(m) => Self::Unavailable(m),
            CallError::Other(m) => Self::Other(m),
        }
    }
}

impl From<CallError> for v0_2::types::Error {
    fn from(e: CallError) -> Self {
        use v0_2::types::Error as E;
        match e {
            CallError::NotFound => E::NotFound,
            CallError::Forbidden(m) => E::Forbidden(m),
            CallError::Conflict(m) => E::Conflict(m),
            CallError::Invalid(m) => E::Invalid(m),
            CallError::Unavailable(m) => E::Unavailable(m),
            CallError::Other(m) => E::Other(m),
        }
    }
}

impl From<v0_2::types::Error> for CallError {
    fn from(e: v0_2::types::Error) -> Self {
        use v0_2::types::Error as E;
        match e {
            E::NotFound => CallError::NotFound,
            E::Forbidden(m) => CallError::Forbidden(m),
            E::Conflict(m) => CallError::Conflict(m),
            E::Invalid(m) => CallError::Invalid(m),
            E::Unavailable(m) => CallError::Unavailable(m),
            E::Other(m) => CallError::Other(m),
        }
    }
}

impl From<v0_1::Registration> for Registration {
    fn from(r: v0_1::Registration) -> Self {
        Self {
            for_kind: r.for_kind.into(),
            for_filter: EventFilter { label_selector: r.for_label_selector.clone(), ..EventFilter::default() },
            for_label_selector: r.for_label_selector,
            owns_filters: vec![EventFilter::default(); r.owns.len()],
            owns: r.owns.into_iter().map(Into::into).collect(),
            watches: r
                .watches
                .into_iter()
                .map(|w| WatchSpec {
                    kind: w.kind.into(),
                    filter: EventFilter { label_selector: w.label_selector.clone(), ..EventFilter::default() },
                    label_selector: w.label_selector,
                })
                .collect(),
            reads: r.reads.into_iter().map(Into::into).collect(),
            writes: r.writes.into_iter().map(Into::into).collect(),
            indexes: r
                .indexes
                .into_iter()
                .map(|i| IndexSpec {
                    kind: i.kind.into(),
                    name: i.name,
                    source: match i.source {
                        v0_1::IndexSource::Field(f) => IndexSource::Field(f),
                        v0_1::IndexSource::Builtin(b) => IndexSource::Builtin(b),
                    },
                })
                .collect(),
            max_concurrent: r.max_concurrent,
        }
    }
}

impl From<v0_2::EventFilter> for EventFilter {
    fn from(f: v0_2::EventFilter) -> Self {
        let p = f.predicates;
        Self {
            namespace: f.namespace,
            label_selector: f.label_selector,
            predicates: Predicates {
                generation_changed: p.contains(v0_2::Predicates::GENERATION_CHANGED),
                labels_changed: p.contains(v0_2::Predicates::LABELS_CHANGED),
                annotations_changed: p.contains(v0_2::Predicates::ANNOTATIONS_CHANGED),
            },
        }
    }
}

/// Contract 0.2: selectors are event filters; no informer is selected.
impl From<v0_2::Registration> for Registration {
    fn from(r: v0_2::Registration) -> Self {
        Self {
            for_kind: r.for_kind.into(),
            for_label_selector: None,
            for_filter: r.for_filter.into(),
            owns_filters: r.owns.iter().map(|o| o.filter.clone().into()).collect(),
            owns: r.owns.into_iter().map(|o| o.kind.into()).collect(),
            watches: r
                .watches
                .into_iter()
                .map(|w| WatchSpec { kind: w.kind.into(), label_selector: None, filter: w.filter.into() })
                .collect(),
            reads: r.reads.into_iter().map(Into::into).collect(),
            writes: r.writes.into_iter().map(Into::into).collect(),
            indexes: r
                .indexes
                .into_iter()
                .map(|i| IndexSpec {
                    kind: i.kind.into(),
                    name: i.name,
                    source: match i.source {
                        v0_2::IndexSource::Field(f) => IndexSource::Field(f),
                        v0_2::IndexSource::Builtin(b) => IndexSource::Builtin(b),
                    },
                })
                .collect(),
            max_concurrent: r.max_concurrent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_0_1_selector_is_also_its_uses_event_filter_so_the_authorizer_knows_what_is_reconciled() {
        let cm = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let legacy = v0_1::Registration {
            for_kind: (&cm).into(),
            for_label_selector: Some("app=web".into()),
            owns: vec![(&cm).into()],
            watches: vec![v0_1::Watch { kind: (&cm).into(), label_selector: Some("app=db".into()) }],
            reads: Vec::new(),
            writes: Vec::new(),
            indexes: Vec::new(),
            max_concurrent: None,
        };
        let reg = Registration::from(legacy);
        assert_eq!(reg.for_filter.label_selector.as_deref(), Some("app=web"));
        assert_eq!(reg.for_label_selector.as_deref(), Some("app=web"));
        assert_eq!(reg.watches[0].filter.label_selector.as_deref(), Some("app=db"));
    }
}
