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
/// selector and visibility), after the continue token, sorted, at most `limit`, and at most
/// `max_bytes` of JSON (`len` of each, summed before `json` copies any): a page asked with a
/// limit ends early at the bound (the API server too may return fewer than `limit`, with a
/// token); one asked without a limit, or whose first object alone is larger, is refused as
/// [`too_large`], `what` naming the read.
pub fn page<T>(
    objects: impl IntoIterator<Item = (String, T)>,
    options: &ListOptions,
    keep: impl Fn(&T) -> bool,
    len: impl Fn(&T) -> usize,
    json: impl Fn(T) -> Vec<u8>,
    max_bytes: usize,
    what: impl FnOnce() -> String,
) -> Result<ObjectList, CallError> {
    let after = options.continue_token.as_deref();
    let mut selected: Vec<(String, T)> =
        objects.into_iter().filter(|(key, o)| after.is_none_or(|a| key.as_str() > a) && keep(o)).collect();
    selected.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let limited = options.limit.filter(|l| *l > 0);
    let limit = limited.map_or(usize::MAX, |l| l as usize);
    let mut more = selected.len() > limit;
    selected.truncate(limit);
    let mut total = 0usize;
    let fits = selected.iter().take_while(|(_, o)| {
        total = total.saturating_add(len(o));
        total <= max_bytes
    });
    let fits = fits.count();
    if fits < selected.len() {
        if limited.is_none() || fits == 0 {
            let bytes =
                if fits == 0 { total } else { selected.iter().map(|(_, o)| len(o)).fold(0, usize::saturating_add) };
            return Err(too_large(&what(), bytes, max_bytes));
        }
        selected.truncate(fits);
        more = true;
    }
    let continue_token = selected.last().filter(|_| more).map(|(key, _)| key.clone());
    Ok(ObjectList { items: selected.into_iter().map(|(_, o)| json(o)).collect(), continue_token })
}

/// The JSON of `objects`, if together they are at most `max_bytes` (`len` of each, summed
/// before `json` copies any); else [`too_large`], `what` naming the read. Bounds what one cached
/// read copies into host memory for a plugin, which no memory limit of the plugin counts.
pub fn copy_within<T>(
    objects: &[T],
    len: impl Fn(&T) -> usize,
    json: impl Fn(&T) -> Vec<u8>,
    max_bytes: usize,
    what: impl FnOnce() -> String,
) -> Result<Vec<Vec<u8>>, CallError> {
    let bytes = objects.iter().map(len).fold(0, usize::saturating_add);
    if bytes > max_bytes {
        return Err(too_large(&what(), bytes, max_bytes));
    }
    Ok(objects.iter().map(json).collect())
}

/// The error of a cached read (`what`: "cache.list of ConfigMap") that would copy `bytes`, more
/// than the `max_bytes` the plugin's memory limit leaves it.
pub fn too_large(what: &str, bytes: usize, max_bytes: usize) -> CallError {
    CallError::Invalid(format!(
        "{what} would copy {}, more than the {} the plugin's memory limit leaves it; page it (contract 0.2 list with a limit) or select fewer",
        size(bytes),
        size(max_bytes)
    ))
}

/// `bytes` as a person reads it: "80.0 MiB", "12 KiB", "300 bytes".
fn size(bytes: usize) -> String {
    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;
    match bytes {
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b if b >= KIB => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
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
            let page =
                page(objects(), &options, |_| true, String::len, String::into_bytes, usize::MAX, String::new).unwrap();
            assert!(page.items.len() <= 2);
            seen.extend(page.items.into_iter().map(|b| String::from_utf8(b).unwrap()));
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        assert_eq!(seen, ["a/0", "a/1", "b/1", "b/2", "c/3"]);
        let all = page(
            objects(),
            &ListOptions::default(),
            |_| true,
            String::len,
            String::into_bytes,
            usize::MAX,
            String::new,
        );
        let all = all.unwrap();
        assert_eq!((all.items.len(), all.continue_token), (5, None), "no limit: one page");
    }

    fn what() -> String {
        "cache.list of ConfigMap".to_owned()
    }

    #[test]
    fn a_list_of_more_bytes_than_the_bound_is_refused_before_any_copy() {
        let objects = ["aaaa", "bbbb", "cccc"];
        let copied = std::cell::Cell::new(0);
        let copy = |o: &&str| {
            copied.set(copied.get() + 1);
            o.as_bytes().to_vec()
        };
        let err = copy_within(&objects, |o| o.len(), copy, 11, what).unwrap_err();
        assert_eq!(copied.get(), 0, "nothing was copied");
        let CallError::Invalid(message) = err else { panic!("{err:?}") };
        assert_eq!(
            message,
            "cache.list of ConfigMap would copy 12 bytes, more than the 11 bytes the plugin's memory limit leaves it; \
             page it (contract 0.2 list with a limit) or select fewer"
        );
        assert_eq!(copy_within(&objects, |o| o.len(), copy, 12, what).unwrap().len(), 3, "at the bound: copied");
    }

    #[test]
    fn a_limited_page_ends_early_at_the_bound_and_an_unlimited_one_over_it_is_refused() {
        let objects = || ["a/0", "a/1", "b/0", "b/1"].map(|k| (k.to_owned(), k.to_owned()));
        let bounded = |limit, after: Option<&str>| {
            let options = ListOptions { limit, continue_token: after.map(str::to_owned), ..ListOptions::default() };
            page(objects(), &options, |_| true, String::len, String::into_bytes, 7, what)
        };
        let first = bounded(Some(3), None).unwrap();
        assert_eq!(first.items, [b"a/0".to_vec(), b"a/1".to_vec()], "two of 3 bytes fit in 7");
        assert_eq!(first.continue_token.as_deref(), Some("a/1"));
        let last = bounded(Some(3), Some("a/1")).unwrap();
        assert_eq!((last.items.len(), last.continue_token), (2, None));
        let err = bounded(None, None).unwrap_err();
        assert!(matches!(&err, CallError::Invalid(m) if m.contains("would copy 12 bytes")), "{err}");
        let one = page(
            objects(),
            &ListOptions { limit: Some(1), ..ListOptions::default() },
            |_| true,
            String::len,
            String::into_bytes,
            2,
            what,
        );
        assert!(one.is_err(), "a first object larger than the bound is refused, not an empty page with a token");
    }
}
