//! Dangerous kinds: kinds whose objects control the cluster, written only with the operator's approval by name.
//!
//! Kubernetes' own list of escalating resources (RBAC good practices, "privilege escalation
//! risks") is the start; kinds that change how the API server treats every request (admission,
//! CRDs, aggregation, flow control) are added because one object of them reaches every other
//! user. A plugin that owns or writes one of these kinds, or reconciles one (it writes that
//! kind's status), needs its `grants.own`, `grants.write` or `grants.status` approval **and** its
//! name in `grants.dangerous`; reads need only `grants.read`, as every kind's do.
//! `deploy/base/plugin-dangerous-kinds-policy.yaml` refuses the same kinds to every plugin
//! identity at the API server, whatever its RBAC, unless the operator exempts the plugin there
//! too.
//!
//! Some kinds are dangerous only in their status ([`DANGEROUS_STATUS`]: a Service's load
//! balancer addresses, a Pod's readiness, a quota's usage, a disruption budget's allowance); writing that status needs the approval, and a `write`
//! approval of such a kind covers its objects but not its status.
//!
//! Left off on purpose: Secrets (no plugin reads or writes them without the operator's approval,
//! and `kubewasm rbac` confines their reads), workloads (a Pod can mount any Secret of its namespace, but
//! making Pods is what controllers are for; `grants.namespaces` bounds where) and Namespaces
//! (the most common kind to reconcile; what a plugin may change on one is the authorizer's and
//! the mark policy's to judge).

/// Kinds that control the cluster, as `(group, kind)`: writing one needs its write approval and
/// `grants.dangerous` both. Each group of entries says what writing it would let a plugin do.
pub const DANGEROUS: &[(&str, &str)] = &[
    // Admission webhooks see (and mutating ones change) every request they match, Secrets
    // included, and a failing one can refuse every write in the cluster: a plugin pointing one
    // at its own URL receives every Secret created from then on.
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    // Admission policies and their bindings refuse or rewrite any request: one froze the host's
    // Lease (the host lost leadership) and refused every other plugin's writes.
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    // A CRD defines an API (and its conversion webhook receives every object of it); replacing
    // or deleting one deletes every object of the kind, other controllers' included.
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    // An APIService sends a whole API group to a service of the plugin's choosing, which then
    // answers (and sees the credentials of) every request to it.
    ("apiregistration.k8s.io", "APIService"),
    // Flow control decides whose requests the API server serves first: a plugin could starve
    // the host, the controllers, or every other user.
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    // A CertificateSigningRequest (and its approval) yields a client certificate for any user
    // or node; a ClusterTrustBundle makes pods trust a certificate authority of its choosing.
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    // Nodes: taints, labels and addresses steer every pod (and the kubelet's credentials);
    // a PersistentVolume can point at any host path, which a pod then mounts.
    ("", "Node"),
    ("", "PersistentVolume"),
    // Storage and runtime classes choose the driver and the runtime handler every pod that names
    // them runs with; a VolumeAttachment attaches a volume to any node.
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("node.k8s.io", "RuntimeClass"),
    // A PriorityClass with a high value lets pods preempt (evict) every other pod.
    ("scheduling.k8s.io", "PriorityClass"),
    // RBAC: a plugin that writes roles or bindings grants itself (or anyone) more.
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    // A ServiceAccount is an identity: its tokens (`serviceaccounts/token`) act with whatever
    // is bound to it.
    ("", "ServiceAccount"),
    // A WasmPlugin says what code the host runs and with which grants: writing one would let a
    // plugin grant itself (or a plugin of its choosing) anything, this list included.
    ("kubewasm.dev", "WasmPlugin"),
    // Endpoints and EndpointSlices say where a Service's traffic goes: a plugin writing one sends
    // another workload's clients to an address of its choosing (CVE-2021-25740; Kubernetes took
    // Endpoints writes out of its `edit` and `admin` roles for it).
    ("", "Endpoints"),
    ("discovery.k8s.io", "EndpointSlice"),
    // Leases elect the leaders of the control plane's own controllers (kube-controller-manager,
    // kube-scheduler in kube-system) and carry every node's heartbeat (kube-node-lease): a plugin
    // holding one stops the controller-manager, or has a node's pods evicted.
    ("coordination.k8s.io", "Lease"),
    // A Binding puts a pending Pod, anyone's, on a node of the plugin's choosing: the API server
    // sets the Pod's node, and the scheduler (taints, affinity, quotas of the node) is bypassed.
    ("", "Binding"),
];

/// Kinds whose status steers the cluster though their objects do not, as `(group, kind)`:
/// writing that status (reconciling the kind, or a `write` approval, which otherwise covers
/// status) needs the operator's approval in `grants.dangerous`; the objects themselves do not.
pub const DANGEROUS_STATUS: &[(&str, &str)] = &[
    // A Service's status holds its load balancer's ingress addresses, which kube-proxy routes the
    // cluster's traffic for that address to (CVE-2020-8554).
    ("", "Service"),
    // A Pod's conditions say whether it is Ready: a plugin could take every replica of any
    // workload (CoreDNS included) out of its Services, or put a broken one in.
    ("", "Pod"),
    // A ResourceQuota's `status.used` is what quota admission compares each create against: a
    // plugin could lift a namespace's quota, or refuse every create in it.
    ("", "ResourceQuota"),
    // A PodDisruptionBudget's `status.disruptionsAllowed` is what every eviction checks (a node
    // drain included): a plugin could let a drain take every replica at once, or block it.
    ("policy", "PodDisruptionBudget"),
];

/// Whether writing `kind` of `group` needs the operator's approval as dangerous.
pub fn is_dangerous(group: &str, kind: &str) -> bool {
    DANGEROUS.iter().any(|(g, k)| *g == group && *k == kind)
}

/// Whether writing the status of `kind` of `group` needs the operator's approval as dangerous
/// ([`DANGEROUS`] kinds, and [`DANGEROUS_STATUS`] ones).
pub fn is_dangerous_status(group: &str, kind: &str) -> bool {
    is_dangerous(group, kind) || DANGEROUS_STATUS.iter().any(|(g, k)| *g == group && *k == kind)
}

#[cfg(test)]
mod tests {
    use kube::core::GroupVersionKind;

    use super::super::{GrantConfig, Grants, KindRef, WriteScope};
    use crate::registration::Registration;

    const POLICY: &str = "ValidatingAdmissionPolicy.admissionregistration.k8s.io";

    fn policy() -> GroupVersionKind {
        GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy")
    }

    fn owning_a_policy() -> Registration {
        Registration { owns: vec![policy()], ..Registration::new(GroupVersionKind::gvk("", "v1", "ConfigMap")) }
    }

    fn config(yaml: &str) -> GrantConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    /// `owning_a_policy()`'s requests approved but for the policy's write, plus `more`.
    fn approved(more: &str) -> GrantConfig {
        config(&format!("{{read: [ConfigMap, {POLICY}], status: [ConfigMap]{more}}}"))
    }

    #[test]
    fn owning_an_admission_policy_without_approval_is_refused_with_the_dangerous_fix() {
        let err = Grants::resolve(&owning_a_policy(), &approved("")).unwrap_err();
        assert_eq!(err.missing, [format!("own {POLICY}"), format!("approve {POLICY} as dangerous")]);
        assert_eq!(err.fix(), format!("grants: {{own: [{POLICY}], dangerous: [{POLICY}]}}"));
        let message = err.to_string();
        assert!(message.contains("`own` or `write` approval and its name in `dangerous`"), "{message}");
    }

    #[test]
    fn an_own_approval_alone_or_a_dangerous_approval_alone_is_not_enough() {
        let err = Grants::resolve(&owning_a_policy(), &approved(&format!(", own: [{POLICY}]"))).unwrap_err();
        assert_eq!(err.missing, [format!("approve {POLICY} as dangerous")]);
        assert_eq!(err.fix(), format!("grants: {{dangerous: [{POLICY}]}}"));
        let err = Grants::resolve(&owning_a_policy(), &approved(&format!(", dangerous: [{POLICY}]"))).unwrap_err();
        assert_eq!(err.fix(), format!("grants: {{own: [{POLICY}]}}"));
    }

    #[test]
    fn owning_an_admission_policy_with_own_and_dangerous_resolves_and_says_so() {
        let both = approved(&format!(", own: [{POLICY}], dangerous: [{POLICY}]"));
        let grants = Grants::resolve(&owning_a_policy(), &both).unwrap();
        assert_eq!(grants.write_scope(&policy()), Some(WriteScope::Controlled));
        assert_eq!(grants.dangerous().map(ToString::to_string).collect::<Vec<_>>(), [POLICY]);
    }

    #[test]
    fn writing_reconciling_or_owning_dangerous_kinds_lists_every_missing_approval_at_once() {
        let registration = Registration {
            owns: vec![GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition")],
            writes: vec![
                GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
                GroupVersionKind::gvk("apps", "v1", "Deployment"),
            ],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "Node"))
        };
        let err = Grants::resolve(&registration, &config("{read: [Node], write: [Deployment.apps]}")).unwrap_err();
        // Sorted by group, then kind.
        let approvals = "dangerous: [Node, CustomResourceDefinition.apiextensions.k8s.io, \
                         ClusterRoleBinding.rbac.authorization.k8s.io]";
        assert!(err.fix().ends_with(&format!("{approvals}}}")), "{}", err.fix());
        assert!(err.missing.contains(&"write status of Node".to_owned()), "the for kind's status: {:?}", err.missing);
    }

    #[test]
    fn reading_a_dangerous_kind_needs_no_approval() {
        let registration = Registration {
            reads: vec![GroupVersionKind::gvk("storage.k8s.io", "v1", "StorageClass")],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "ConfigMap"))
        };
        let approvals = "{read: [ConfigMap, StorageClass.storage.k8s.io], status: [ConfigMap]}";
        let grants = Grants::resolve(&registration, &config(approvals)).unwrap();
        assert!(grants.can_read(&GroupVersionKind::gvk("storage.k8s.io", "v1", "StorageClass")));
        assert_eq!(grants.dangerous().count(), 0);
    }

    #[test]
    fn service_accounts_rbac_and_wasm_plugins_are_dangerous_to_write() {
        let rbac =
            ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"].map(|k| ("rbac.authorization.k8s.io", k));
        for (group, kind) in rbac.into_iter().chain([("", "ServiceAccount"), ("kubewasm.dev", "WasmPlugin")]) {
            let kind = KindRef { group: group.into(), kind: kind.into() };
            assert!(kind.is_dangerous(), "{kind}");
        }
    }

    /// Held-out round of issue 49: a plugin approved `write: [Lease]` took the
    /// controller-manager's Lease in kube-system, and Bindings and quota usage steered pods.
    #[test]
    fn leases_bindings_and_the_status_of_quotas_and_disruption_budgets_are_dangerous() {
        let registration = Registration {
            writes: vec![
                GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
                GroupVersionKind::gvk("", "v1", "Binding"),
            ],
            ..Registration::new(GroupVersionKind::gvk("", "v1", "ResourceQuota"))
        };
        let approvals = "{read: [ResourceQuota, Lease.coordination.k8s.io, Binding], status: [ResourceQuota], \
                         write: [Lease.coordination.k8s.io, Binding]}";
        let err = Grants::resolve(&registration, &config(approvals)).unwrap_err();
        assert!(
            err.fix().ends_with("dangerous: [Binding, ResourceQuota, Lease.coordination.k8s.io]}"),
            "{}",
            err.fix()
        );
        assert!(super::is_dangerous_status("policy", "PodDisruptionBudget"));
        assert!(!super::is_dangerous("policy", "PodDisruptionBudget"), "only its status");
    }

    #[test]
    fn the_config_takes_dangerous_approvals_strictly() {
        assert_eq!(config("dangerous: [Node]").dangerous, ["Node".parse().unwrap()].into());
        assert!(serde_yaml::from_str::<GrantConfig>("danger: [Node]").is_err());
        assert!(serde_yaml::from_str::<GrantConfig>("dangerous: [nodes/v1]").is_err());
    }
}
