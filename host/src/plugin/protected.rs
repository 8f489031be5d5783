//! Protected objects: what the host itself runs on, which no plugin may write whatever its grants.
//!
//! A plugin that could rewrite a module ConfigMap, a WasmPlugin or the host's Lease could run its
//! code under another plugin's grants, grant itself more, or stop the host from leading. The host
//! builds one [`Protected`] set (module namespace and Lease from its flags, WasmPlugins always)
//! and every plugin write is checked against it next to the grants check
//! (`plugin/host/client.rs`).

use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;

use super::grants::KindRef;
use super::host::ObjectRef;

/// One rule: objects of `kind`, optionally only in `namespace` and/or only named `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The kind, any version.
    pub kind: KindRef,
    /// Only objects in this namespace; `None`: any namespace (or cluster-scoped).
    pub namespace: Option<String>,
    /// Only the object of this name; `None`: every name.
    pub name: Option<String>,
    /// Why the host protects it, shown to the plugin.
    pub why: String,
}

impl Rule {
    fn matches(&self, target: &ObjectRef) -> bool {
        self.kind.kind == target.kind.kind
            && self.kind.group == target.kind.group
            && self.namespace.as_ref().is_none_or(|ns| target.namespace.as_ref() == Some(ns))
            && self.name.as_ref().is_none_or(|n| *n == target.name)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " named {name}")?;
        }
        Ok(())
    }
}

/// The host's protected objects; cheap to clone, every clone sees rules added later (the
/// module namespace is known when the WasmPlugin source starts).
#[derive(Clone, Debug)]
pub struct Protected(Arc<RwLock<Vec<Rule>>>);

impl Default for Protected {
    /// WasmPlugin objects and their CRD: protected in every host.
    fn default() -> Self {
        let rules = vec![
            Rule {
                kind: KindRef { group: "kubewasm.dev".into(), kind: "WasmPlugin".into() },
                namespace: None,
                name: None,
                why: "WasmPlugin objects configure the host's plugins".into(),
            },
            Rule {
                kind: KindRef { group: "apiextensions.k8s.io".into(), kind: "CustomResourceDefinition".into() },
                namespace: None,
                name: Some("wasmplugins.kubewasm.dev".into()),
                why: "the WasmPlugin CRD configures the host's plugins".into(),
            },
        ];
        Self(Arc::new(RwLock::new(rules)))
    }
}

impl Protected {
    /// Adds a rule; every clone of this set sees it.
    pub fn add(&self, rule: Rule) {
        let mut rules = self.0.write();
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }

    /// Protects the ConfigMaps holding WasmPlugin modules (every ConfigMap in `namespace`) and
    /// the namespace itself (deleting it deletes them).
    pub fn module_namespace(&self, namespace: &str) {
        self.add(Rule {
            kind: KindRef { group: String::new(), kind: "ConfigMap".into() },
            namespace: Some(namespace.to_owned()),
            name: None,
            why: format!("ConfigMaps in {namespace} hold the host's plugin modules"),
        });
        self.add(Rule {
            kind: KindRef { group: String::new(), kind: "Namespace".into() },
            namespace: None,
            name: Some(namespace.to_owned()),
            why: format!("{namespace} holds the host's plugin modules"),
        });
    }

    /// Protects the host's leader-election Lease `namespace/name`.
    pub fn lease(&self, namespace: &str, name: &str) {
        self.add(Rule {
            kind: KindRef { group: "coordination.k8s.io".into(), kind: "Lease".into() },
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            why: "the host elects its leader on this Lease".into(),
        });
    }

    /// Why `target` is protected, if it is.
    pub fn refuses(&self, target: &ObjectRef) -> Option<String> {
        self.0.read().iter().find(|r| r.matches(target)).map(|r| format!("{r} is protected: {}", r.why))
    }

    /// The rules, for diagnostics.
    pub fn rules(&self) -> Vec<Rule> {
        self.0.read().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;

    fn target(group: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef { kind: GroupVersionKind::gvk(group, "v1", kind), namespace: ns.map(Into::into), name: name.into() }
    }

    #[test]
    fn wasm_plugins_are_protected_in_every_host() {
        let p = Protected::default();
        let why = p.refuses(&target("kubewasm.dev", "WasmPlugin", None, "any")).unwrap();
        assert!(why.contains("WasmPlugin"), "{why}");
        assert!(
            p.refuses(&target("apiextensions.k8s.io", "CustomResourceDefinition", None, "wasmplugins.kubewasm.dev"))
                .is_some()
        );
        assert!(
            p.refuses(&target("apiextensions.k8s.io", "CustomResourceDefinition", None, "other.example.com")).is_none()
        );
        assert!(p.refuses(&target("", "ConfigMap", Some("kubewasm-system"), "m")).is_none(), "no module namespace yet");
    }

    #[test]
    fn the_module_namespace_and_the_lease_are_protected_once_added_to_any_clone() {
        let p = Protected::default();
        let seen_by_runtime = p.clone();
        p.module_namespace("kubewasm-system");
        p.lease("kubewasm-system", "kubewasm");
        let refused = |t: ObjectRef| seen_by_runtime.refuses(&t).is_some();
        assert!(refused(target("", "ConfigMap", Some("kubewasm-system"), "stamper-module")));
        assert!(!refused(target("", "ConfigMap", Some("team-a"), "stamper-module")));
        assert!(refused(target("", "Namespace", None, "kubewasm-system")));
        assert!(refused(target("coordination.k8s.io", "Lease", Some("kubewasm-system"), "kubewasm")));
        assert!(!refused(target("coordination.k8s.io", "Lease", Some("kubewasm-system"), "other")));
        assert!(!refused(target("", "Secret", Some("kubewasm-system"), "kubewasm")));
    }

    #[test]
    fn adding_a_rule_twice_keeps_one() {
        let p = Protected::default();
        p.module_namespace("m");
        p.module_namespace("m");
        assert_eq!(p.rules().len(), 4);
    }
}
