//! Compact label storage for cached objects and label selector matching over it.
//!
//! A `BTreeMap<String, String>` costs a ~540-byte node plus two allocations per label; cached
//! objects instead keep their labels in one string, `k1=v1\nk2=v2`, sorted by key. Neither `=`
//! nor a newline can occur in a label key or value, so the encoding is unambiguous.

use std::{collections::BTreeMap, fmt};

use kube::core::{Expression, Selector};

/// An object's labels in one allocation; lookups scan (objects carry a handful of labels).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<str>);

impl Labels {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether label `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// `(key, value)` pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs().filter_map(|p| p.split_once('='))
    }

    /// `key=value` strings, sorted by key (the values of the `label` index).
    pub fn pairs(&self) -> impl Iterator<Item = &str> {
        self.0.split('\n').filter(|p| !p.is_empty())
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.pairs().count()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The labels as a map, e.g. for kube-core's `SelectorExt::matches`.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    /// Heap bytes held.
    pub fn heap_size(&self) -> usize {
        self.0.len()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        let joined: Vec<String> = map.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        Self(joined.join("\n").into_boxed_str())
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The requirements of a selector, to match many objects without re-cloning it.
pub fn requirements(selector: &Selector) -> Vec<Expression> {
    selector.clone().into_iter().collect()
}

/// Whether `labels` satisfy every requirement (apimachinery semantics, as kube-core's
/// `SelectorExt` on a map).
pub fn matches(requirements: &[Expression], labels: &Labels) -> bool {
    requirements.iter().all(|r| match r {
        Expression::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
        Expression::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
        Expression::Equal(k, value) => labels.get(k) == Some(value.as_str()),
        Expression::NotEqual(k, value) => labels.get(k) != Some(value.as_str()),
        Expression::Exists(k) => labels.contains_key(k),
        Expression::DoesNotExist(k) => !labels.contains_key(k),
    })
}

#[cfg(test)]
mod tests {
    use kube::core::SelectorExt;
    use proptest::prelude::*;

    use super::*;
    use crate::selector::parse_label_selector;

    #[test]
    fn labels_round_trip_sorted_by_key() {
        let map = BTreeMap::from([("b".to_owned(), "2".to_owned()), ("a/x".to_owned(), String::new())]);
        let labels = Labels::from(map.clone());
        assert_eq!(labels.pairs().collect::<Vec<_>>(), ["a/x=", "b=2"]);
        assert_eq!(labels.get("a/x"), Some(""));
        assert_eq!(labels.get("a"), None);
        assert_eq!(labels.len(), 2);
        assert_eq!(labels.to_map(), map);
        assert!(Labels::default().is_empty());
    }

    proptest! {
        #[test]
        fn matching_agrees_with_kube_core_on_a_map(
            map in proptest::collection::btree_map("[ab]", "[xy]{0,1}", 0..3),
            selector in proptest::sample::select(vec![
                "a=x", "a!=x", "a in (x,y)", "a notin (x)", "a", "!a", "a=,b", "b in (,y)", "a=x,!b",
            ]),
        ) {
            let parsed = parse_label_selector(selector).unwrap();
            let labels = Labels::from(map.clone());
            prop_assert_eq!(matches(&requirements(&parsed), &labels), parsed.matches(&map));
        }
    }
}
