//! Protected objects: what the host itself runs on, which no plugin may write whatever its grants.
//!
//! A plugin that could rewrite a module ConfigMap, a WasmPlugin, the host's Deployment or one of
//! its Leases could run its code under another plugin's grants, grant itself more, or stop the
//! host from leading or serving. The host builds one [`Protected`] set (its own namespace, the
//! module namespace and the Lease prefixes from its flags, WasmPlugins always); the authorizer
//! (`plugin/authorizer.rs`) refuses every plugin write it matches and every Event in a protected
//! namespace, and hides from every plugin read the Secrets of a protected namespace (the host's
//! registry pull Secrets and signature keys), whatever its grants.

use std::fmt;
use std::sync::Arc;

use parking_lot::RwLock;

use super::api::ObjectRef;
use super::grants::KindRef;

/// Which names a rule covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Names {
    /// Every name.
    Any,
    /// Exactly this name.
    Exactly(String),
    /// Every name starting with this prefix.
    Prefix(String),
}

/// One rule: objects of `kind` (`None`: every kind), optionally only in `namespace`, with the
/// names `names` covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The kind, any version; `None`: every kind.
    pub kind: Option<KindRef>,
    /// Only objects in this namespace; `None`: any namespace (or cluster-scoped).
    pub namespace: Option<String>,
    /// Which names.
    pub names: Names,
    /// Why the host protects it, shown to the plugin.
    pub why: String,
}

impl Rule {
    fn matches(&self, target: &ObjectRef) -> bool {
        self.kind.as_ref().is_none_or(|k| k.kind == target.kind.kind && k.group == target.kind.group)
            && self.namespace.as_ref().is_none_or(|ns| target.namespace.as_ref() == Some(ns))
            && match &self.names {
                Names::Any => true,
                Names::Exactly(n) => *n == target.name,
                Names::Prefix(p) => target.name.starts_with(p.as_str()),
            }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Some(kind) => write!(f, "{kind}")?,
            None => f.write_str("every object")?,
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        match &self.names {
            Names::Any => Ok(()),
            Names::Exactly(name) => write!(f, " named {name}"),
            Names::Prefix(prefix) => write!(f, " named {prefix}…"),
        }
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
                kind: Some(KindRef { group: "kubewasm.dev".into(), kind: "WasmPlugin".into() }),
                namespace: None,
                names: Names::Any,
                why: "WasmPlugin objects configure the host's plugins".into(),
            },
            Rule {
                kind: Some(KindRef { group: "apiextensions.k8s.io".into(), kind: "CustomResourceDefinition".into() }),
                namespace: None,
                names: Names::Exactly("wasmplugins.kubewasm.dev".into()),
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

    /// Protects every object in `namespace` and the Namespace itself (deleting it deletes
    /// them): the host's own namespace (its Deployment, Service, ServiceAccount, config
    /// ConfigMaps and Leases) and the module namespace (WasmPlugin modules).
    pub fn namespace(&self, namespace: &str, why: &str) {
        self.add(Rule {
            kind: None,
            namespace: Some(namespace.to_owned()),
            names: Names::Any,
            why: format!("{namespace} {why}"),
        });
        self.add(Rule {
            kind: Some(KindRef { group: String::new(), kind: "Namespace".into() }),
            namespace: None,
            names: Names::Exactly(namespace.to_owned()),
            why: format!("{namespace} {why}"),
        });
    }

    /// Protects the namespace holding WasmPlugin modules.
    pub fn module_namespace(&self, namespace: &str) {
        self.namespace(namespace, "holds the host's plugin modules");
    }

    /// Protects every Lease in `namespace` whose name starts with `prefix`: the leader's Lease
    /// (`<id>`) and every shard member's (`<id>-shard-…`).
    pub fn leases(&self, namespace: &str, prefix: &str) {
        self.add(Rule {
            kind: Some(KindRef { group: "coordination.k8s.io".into(), kind: "Lease".into() }),
            namespace: Some(namespace.to_owned()),
            names: Names::Prefix(prefix.to_owned()),
            why: "the host elects its leader and shares work among its replicas on these Leases".into(),
        });
    }

    /// Why `target` is protected, if it is.
    pub fn refuses(&self, target: &ObjectRef) -> Option<String> {
        self.0.read().iter().find(|r| r.matches(target)).map(|r| format!("{r} is protected: {}", r.why))
    }

    /// Why no plugin may read an object of `kind` in `namespace`, if none may: every object of a
    /// namespace protected as a whole is the host's: its Secrets hold its credentials (registry
    /// pull Secrets, signature keys), its ConfigMaps every plugin's config and module.
    pub fn hides(&self, kind: &kube::core::GroupVersionKind, namespace: Option<&str>) -> Option<String> {
        let why = self.refuses_namespace(namespace?)?;
        let what = if kind.group.is_empty() && kind.kind == "Secret" {
            "Secrets there hold the host's credentials"
        } else {
            "what is there is the host's (its config, its plugins' configs and modules)"
        };
        Some(format!("{what} ({why})"))
    }

    /// Why `namespace` as a whole is protected, if it is (no plugin publishes Events there).
    pub fn refuses_namespace(&self, namespace: &str) -> Option<String> {
        let rules = self.0.read();
        let rule = rules.iter().find(|r| r.kind.is_none() && r.namespace.as_deref() == Some(namespace))?;
        Some(format!("{namespace} is protected: {}", rule.why))
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
    fn the_module_namespace_and_the_leases_are_protected_once_added_to_any_clone() {
        let p = Protected::default();
        let seen_by_runtime = p.clone();
        p.module_namespace("modules");
        p.leases("elect", "kubewasm");
        let refused = |t: ObjectRef| seen_by_runtime.refuses(&t).is_some();
        assert!(refused(target("", "ConfigMap", Some("modules"), "stamper-module")));
        assert!(refused(target("apps", "Deployment", Some("modules"), "anything")));
        assert!(!refused(target("", "ConfigMap", Some("team-a"), "stamper-module")));
        assert!(refused(target("", "Namespace", None, "modules")));
        assert!(refused(target("coordination.k8s.io", "Lease", Some("elect"), "kubewasm")));
        assert!(refused(target("coordination.k8s.io", "Lease", Some("elect"), "kubewasm-shard-00ff")));
        assert!(!refused(target("coordination.k8s.io", "Lease", Some("elect"), "other")));
        assert!(!refused(target("", "Secret", Some("elect"), "kubewasm")));
        assert!(seen_by_runtime.refuses_namespace("modules").is_some());
        assert!(seen_by_runtime.refuses_namespace("elect").is_none(), "only its Leases");
    }

    #[test]
    fn every_object_of_a_protected_namespace_is_hidden_and_no_other() {
        let p = Protected::default();
        p.namespace("kubewasm-system", "is the host's own namespace");
        p.leases("elect", "kubewasm");
        let (secret, config_map) =
            (GroupVersionKind::gvk("", "v1", "Secret"), GroupVersionKind::gvk("", "v1", "ConfigMap"));
        assert!(p.hides(&secret, Some("kubewasm-system")).is_some());
        // Held-out round of issue 49: every plugin's grants and settings were one get away.
        assert!(p.hides(&config_map, Some("kubewasm-system")).is_some_and(|why| why.contains("plugins' configs")));
        assert!(p.hides(&secret, Some("team-a")).is_none());
        assert!(p.hides(&secret, Some("elect")).is_none(), "only its Leases are protected");
        assert!(p.hides(&GroupVersionKind::gvk("", "v1", "Namespace"), None).is_none(), "the Namespace is seen");
    }

    #[test]
    fn adding_a_rule_twice_keeps_one() {
        let p = Protected::default();
        p.module_namespace("m");
        p.module_namespace("m");
        assert_eq!(p.rules().len(), 4);
    }
}
