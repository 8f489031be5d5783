//! An object's address as the API server validates it: the group, version, kind, namespace and
//! name of every request a plugin makes are checked here before it is judged or sent.
//!
//! kube-core writes a namespace and a name into the request path as they are (it checks only
//! that a name is not empty), so a string the authorizer judged as one name could address
//! another object once in a URL: a namespace `a/secrets/b?x=` turns a ConfigMap read into a
//! Secret read. An address that passes [`check`] holds no character that a URL path gives a
//! meaning to (`/`, `?`, `#`, `%`, nor `.` and `..` as a whole segment), so the path sent names
//! exactly the object judged. Hand-written: these are apimachinery's rules
//! (`validation.IsDNS1123Label`, `IsDNS1123Subdomain`, `path.IsValidPathSegmentName`), which no
//! crate carries.

use super::{CallError, ObjectRef};

/// The longest namespace (a DNS-1123 label, apimachinery `DNS1123LabelMaxLength`).
pub const MAX_NAMESPACE: usize = 63;

/// The longest name or group (a DNS-1123 subdomain, apimachinery `DNS1123SubdomainMaxLength`).
pub const MAX_NAME: usize = 253;

/// Whether `target` is an address the API server could hold an object at, and why not.
pub fn check(target: &ObjectRef) -> Result<(), CallError> {
    let kind = &target.kind;
    let invalid = |what: &str, value: &str, rule: &str| {
        Err(CallError::Invalid(format!("{what} {} is not valid: {rule}", quoted(value))))
    };
    if !kind.group.is_empty() && !is_subdomain(&kind.group) {
        return invalid("the API group", &kind.group, SUBDOMAIN);
    }
    if !is_label(&kind.version) {
        return invalid("the API version", &kind.version, LABEL);
    }
    if kind.kind.is_empty() || kind.kind.len() > MAX_NAME || !kind.kind.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return invalid("the kind", &kind.kind, "a kind is letters and digits");
    }
    if let Some(ns) = &target.namespace
        && !is_label(ns)
    {
        return invalid("the namespace", ns, LABEL);
    }
    if !is_name(&target.name) {
        return invalid("the name", &target.name, NAME);
    }
    Ok(())
}

const LABEL: &str = "a namespace or version is a DNS-1123 label: at most 63 lowercase letters, digits and '-', \
                     starting and ending with a letter or digit";
const SUBDOMAIN: &str = "a group is a DNS-1123 subdomain: lowercase letters, digits, '-' and '.'";
const NAME: &str = "a name is 1 to 253 letters, digits and '-', '.', '_', ':' or '@', and not '.' or '..'";

/// A DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most [`MAX_NAMESPACE`] long (a
/// namespace, a version, a plugin's name).
pub fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAMESPACE
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: dot-separated labels, at most [`MAX_NAME`] long.
pub fn is_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME && s.split('.').all(is_label)
}

/// A name every kind's URL can carry unescaped: apimachinery's path segment rule (not `.` or
/// `..`, no `/` or `%`) narrowed to the characters Kubernetes' names use (DNS subdomains, and
/// RBAC's `system:controller:…`), so none is one a URL path reads specially (`?`, `#`, space).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s != "."
        && s != ".."
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b':' | b'@'))
}

/// `value` in a message: quoted, with anything unprintable escaped, and cut short.
fn quoted(value: &str) -> String {
    let shown: String = value.chars().take(80).collect();
    let more = if shown.len() < value.len() { "…" } else { "" };
    format!("{shown:?}{more}")
}

/// Whether `kind` is a kind's name as the API server writes it: an ASCII capital, then letters and
/// digits.
pub fn is_kind(kind: &str) -> bool {
    kind.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && kind.chars().all(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;

    use super::*;

    fn at(group: &str, version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            kind: GroupVersionKind::gvk(group, version, kind),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    fn config_map(namespace: &str, name: &str) -> ObjectRef {
        at("", "v1", "ConfigMap", Some(namespace), name)
    }

    #[test]
    fn addresses_kubernetes_uses_pass() {
        for target in [
            config_map("default", "web"),
            config_map("a-1", "web.v2"),
            at("rbac.authorization.k8s.io", "v1", "ClusterRole", None, "system:controller:job-controller"),
            at("apiextensions.k8s.io", "v1", "CustomResourceDefinition", None, "foos.example.com"),
            at("apps", "v1beta2", "Deployment", Some("x"), "a_b@c"),
        ] {
            assert_eq!(check(&target), Ok(()), "{target:?}");
        }
    }

    #[test]
    fn a_namespace_or_name_that_would_change_the_url_is_invalid() {
        for (namespace, name) in [
            ("kubewasm-system/secrets/pull?x=", "c"),
            ("a", "x/../../secrets/pull"),
            ("a", "pull?dryRun=All"),
            ("a", "pull#frag"),
            ("a", "%2e%2e"),
            ("a", ".."),
            ("a", "."),
            ("a", ""),
            ("a", "has space"),
            ("a", "new\nline"),
            ("A", "c"),
            ("-a", "c"),
            ("a.b", "c"),
            ("", "c"),
        ] {
            let result = check(&config_map(namespace, name));
            assert!(matches!(result, Err(CallError::Invalid(_))), "{namespace:?}/{name:?}: {result:?}");
        }
        assert!(check(&config_map(&"a".repeat(64), "c")).is_err());
        assert!(check(&config_map("a", &"n".repeat(254))).is_err());
    }

    #[test]
    fn a_group_version_or_kind_that_would_change_the_url_is_invalid() {
        for target in [
            at("apps/v1/namespaces/a/secrets", "v1", "Deployment", Some("a"), "d"),
            at("apps", "v1/../..", "Deployment", Some("a"), "d"),
            at("apps", "", "Deployment", Some("a"), "d"),
            at("apps", "v1", "Deploy/ment", Some("a"), "d"),
            at("apps", "v1", "", Some("a"), "d"),
        ] {
            assert!(matches!(check(&target), Err(CallError::Invalid(_))), "{target:?}");
        }
    }

    #[test]
    fn the_refusal_names_the_field_and_shows_the_value_escaped() {
        let Err(CallError::Invalid(message)) = check(&config_map("a\nb", "c")) else { panic!("refused") };
        assert!(message.starts_with(r#"the namespace "a\nb" is not valid"#), "{message}");
    }
}
