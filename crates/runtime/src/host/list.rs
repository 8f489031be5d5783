//! Paged, field-selected cached lists (`cache.list` of contract 0.2): the options, the field
//! selector and the paging every [`CacheReader`](super::CacheReader) shares.
//!
//! Hand-written: kube has no client-side field selector, and the apiserver's (in
//! `k8s.io/apimachinery/pkg/fields`) is Go. Only the fields every kind supports are served
//! (`metadata.name`, `metadata.namespace`), so a selector means the same as on the API server.

use super::CallError;

/// What a paged list asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Only objects in this namespace.
    pub namespace: Option<String>,
    /// Only objects whose labels match.
    pub label_selector: Option<String>,
    /// Only objects whose fields match (see [`FieldSelector`]).
    pub field_selector: Option<String>,
    /// At most this many objects; `None` or 0: all.
    pub limit: Option<u32>,
    /// The token of the previous page.
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectList {
    /// The objects, as JSON, in namespace/name order.
    pub items: Vec<Vec<u8>>,
    /// The token of the next page; `None` if this is the last.
    pub continue_token: Option<String>,
}

/// A field the selector can test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

/// A parsed field selector: terms that must all hold (the apiserver's `fields.Selector`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(Field, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=a,metadata.namespace!=b`; `=` and `==` are equality, `!=` is
    /// inequality. Any other field is `Invalid`, as the API server answers for a field the
    /// kind does not support.
    pub fn parse(input: &str) -> Result<Self, CallError> {
        let mut terms = Vec::new();
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(CallError::Invalid(format!("field selector term `{term}` has no operator")));
            };
            let field = match field.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(CallError::Invalid(format!(
                        "field selector: `{other}` is not supported on cached reads (only metadata.name, metadata.namespace)"
                    )));
                }
            };
            terms.push((field, equal, value.trim().to_owned()));
        }
        Ok(Self(terms))
    }

    /// Whether an object with this namespace and name matches (a cluster-scoped object's
    /// namespace is the empty string, as on the API server).
    pub fn matches(&self, namespace: Option<&str>, name: &str) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = match field {
                Field::Name => name,
                Field::Namespace => namespace.unwrap_or_default(),
            };
            (actual == value) == *equal
        })
    }
}

/// The sort and continue key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn sort_key(namespace: Option<&str>, name: &str) -> String {
    kubewasm_informer::object::object_key(namespace, name)
}

/// One page of `objects` (each with its [`sort_key`]): those `keep` keeps (the caller's field
/// selector and visibility), after the continue token, sorted, at most `limit`.
pub fn page<T>(
    objects: impl IntoIterator<Item = (String, T)>,
    options: &ListOptions,
    keep: impl Fn(&T) -> bool,
    json: impl Fn(T) -> Vec<u8>,
) -> ObjectList {
    let after = options.continue_token.as_deref();
    let mut selected: Vec<(String, T)> =
        objects.into_iter().filter(|(key, o)| after.is_none_or(|a| key.as_str() > a) && keep(o)).collect();
    selected.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let limit = options.limit.filter(|l| *l > 0).map_or(usize::MAX, |l| l as usize);
    let continue_token = (selected.len() > limit).then(|| selected[limit - 1].0.clone());
    selected.truncate(limit);
    ObjectList { items: selected.into_iter().map(|(_, o)| json(o)).collect(), continue_token }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_selector_tests_name_and_namespace_with_each_operator() {
        let s = FieldSelector::parse("metadata.name=a, metadata.namespace!=kube-system").unwrap();
        assert!(s.matches(Some("default"), "a"));
        assert!(!s.matches(Some("kube-system"), "a"));
        assert!(!s.matches(Some("default"), "b"));
        let cluster = FieldSelector::parse("metadata.namespace==").unwrap();
        assert!(cluster.matches(None, "node-1"), "a cluster-scoped object's namespace is empty");
    }

    #[test]
    fn a_field_selector_on_an_unsupported_field_is_invalid_and_says_which() {
        let err = FieldSelector::parse("spec.nodeName=n1").unwrap_err();
        assert!(matches!(&err, CallError::Invalid(m) if m.contains("spec.nodeName")), "{err}");
        assert!(FieldSelector::parse("metadata.name").is_err());
    }

    #[test]
    fn pages_follow_each_other_in_key_order_until_the_last_has_no_token() {
        let objects = || ["b/2", "a/1", "c/3", "a/0", "b/1"].map(|k| (k.to_owned(), k.to_owned()));
        let mut options = ListOptions { limit: Some(2), ..ListOptions::default() };
        let mut seen = Vec::new();
        loop {
            let page = page(objects(), &options, |_| true, String::into_bytes);
            assert!(page.items.len() <= 2);
            seen.extend(page.items.into_iter().map(|b| String::from_utf8(b).unwrap()));
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        assert_eq!(seen, ["a/0", "a/1", "b/1", "b/2", "c/3"]);
        let all = page(objects(), &ListOptions::default(), |_| true, String::into_bytes);
        assert_eq!((all.items.len(), all.continue_token), (5, None), "no limit: one page");
    }
}
