// namespace-defaults: gives every Namespace a default ResourceQuota and a default-deny
// NetworkPolicy, owned by the Namespace, unless the Namespace opts out with a label.
//
// The Go twin of plugins/rust/namespace-defaults (same settings, objects and events).
// Settings (all optional):
//
//	optOutLabel: kubewasm.dev/no-defaults   # a Namespace with this label (any value) is skipped
//	quotaName: default-quota
//	quota: { pods: "50", requests.cpu: "4", requests.memory: 8Gi }
//	networkPolicyName: default-deny
//
// When a Namespace opts out, defaults this plugin created there are removed.
package main

import (
	"context"
	"fmt"

	"kubewasm.dev/sdk"
)

var (
	namespaceKind     = kubewasm.Kind{APIVersion: "v1", Kind: "Namespace"}
	resourceQuotaKind = kubewasm.Kind{APIVersion: "v1", Kind: "ResourceQuota"}
	networkPolicyKind = kubewasm.Kind{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
)

// The kinds this plugin reads and writes, with the fields it uses.
type (
	Namespace struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
	}
	ResourceQuota struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
		Spec                struct {
			Hard map[string]string `json:"hard,omitempty"`
		} `json:"spec"`
	}
	NetworkPolicy struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
		Spec                struct {
			PodSelector struct{} `json:"podSelector"`
			PolicyTypes []string `json:"policyTypes,omitempty"`
		} `json:"spec"`
	}
)

// Settings are the plugin's settings; defaults below.
type Settings struct {
	OptOutLabel       string            `json:"optOutLabel"`
	QuotaName         string            `json:"quotaName"`
	Quota             map[string]string `json:"quota"`
	NetworkPolicyName string            `json:"networkPolicyName"`
}

func defaults() Settings {
	return Settings{
		OptOutLabel:       "kubewasm.dev/no-defaults",
		QuotaName:         "default-quota",
		Quota:             map[string]string{"pods": "50", "requests.cpu": "4", "requests.memory": "8Gi"},
		NetworkPolicyName: "default-deny",
	}
}

// managedBy is the label stamped on every object this plugin creates.
var managedBy = map[string]string{"app.kubernetes.io/managed-by": "kubewasm-namespace-defaults"}

func meta(name string, ns *Namespace) kubewasm.ObjectMeta {
	return kubewasm.ObjectMeta{Name: name, Namespace: ns.Name, Labels: managedBy,
		OwnerReferences: []kubewasm.OwnerReference{kubewasm.ControllerReference(ns)}}
}

func quota(s Settings, ns *Namespace) *ResourceQuota {
	q := &ResourceQuota{TypeMeta: kubewasm.TypeMeta{APIVersion: "v1", Kind: "ResourceQuota"},
		ObjectMeta: meta(s.QuotaName, ns)}
	q.Spec.Hard = s.Quota
	return q
}

func policy(s Settings, ns *Namespace) *NetworkPolicy {
	p := &NetworkPolicy{TypeMeta: kubewasm.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta(s.NetworkPolicyName, ns)}
	p.Spec.PolicyTypes = []string{"Ingress", "Egress"}
	return p
}

// deleteControlled deletes child (as read from the cache) if ns controls it, and only if it is
// still that object (uid precondition): never a same-named object created since.
func deleteControlled(kind kubewasm.Kind, child kubewasm.Object, ns *Namespace) error {
	if !kubewasm.IsControlledBy(child, ns) {
		return nil
	}
	meta := child.GetObjectMeta()
	return kubewasm.Delete(kind, meta.Namespace, meta.Name, kubewasm.Preconditions{UID: meta.UID})
}

type namespaceDefaults struct{}

func (namespaceDefaults) Describe() *kubewasm.Registration {
	return kubewasm.For(namespaceKind).Owns(resourceQuotaKind).Owns(networkPolicyKind)
}

func (namespaceDefaults) Reconcile(_ context.Context, req kubewasm.Request) (kubewasm.Result, error) {
	done := kubewasm.Result{}
	s := defaults()
	if err := kubewasm.Settings(&s); err != nil {
		return done, err
	}
	ns, err := kubewasm.Get[Namespace](namespaceKind, "", req.Name)
	if err != nil || ns == nil || ns.IsBeingDeleted() {
		return done, err
	}
	_, optedOut := ns.Labels[s.OptOutLabel]
	existing, err := kubewasm.Get[ResourceQuota](resourceQuotaKind, req.Name, s.QuotaName)
	if err != nil {
		return done, err
	}
	if optedOut {
		if existing != nil {
			if err := deleteControlled(resourceQuotaKind, existing, ns); err != nil {
				return done, err
			}
		}
		p, err := kubewasm.Get[NetworkPolicy](networkPolicyKind, req.Name, s.NetworkPolicyName)
		if err != nil || p == nil {
			return done, err
		}
		return done, deleteControlled(networkPolicyKind, p, ns)
	}
	if _, err := kubewasm.Apply(quota(s, ns), false); err != nil {
		return done, err
	}
	if _, err := kubewasm.Apply(policy(s, ns), false); err != nil {
		return done, err
	}
	if existing == nil {
		note := fmt.Sprintf("applied ResourceQuota %s and NetworkPolicy %s", s.QuotaName, s.NetworkPolicyName)
		return done, kubewasm.Normal(ns, "DefaultsApplied", note)
	}
	return done, nil
}

func init() { kubewasm.Register(namespaceDefaults{}) }

func main() {}
