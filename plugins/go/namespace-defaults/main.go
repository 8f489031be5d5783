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
	"fmt"

	"kubewasm.dev/sdk"
)

var (
	namespace     = kubewasm.Kind{APIVersion: "v1", Kind: "Namespace"}
	resourceQuota = kubewasm.Kind{APIVersion: "v1", Kind: "ResourceQuota"}
	networkPolicy = kubewasm.Kind{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
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
var managedBy = [2]string{"app.kubernetes.io/managed-by", "kubewasm-namespace-defaults"}

func meta(name string, ns kubewasm.Object) map[string]any {
	return map[string]any{
		"name":            name,
		"namespace":       ns["metadata"].(map[string]any)["name"],
		"labels":          map[string]any{managedBy[0]: managedBy[1]},
		"ownerReferences": []any{kubewasm.ControllerReference(ns)},
	}
}

func quota(s Settings, ns kubewasm.Object) kubewasm.Object {
	return kubewasm.Object{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta(s.QuotaName, ns),
		"spec": map[string]any{"hard": s.Quota}}
}

func policy(s Settings, ns kubewasm.Object) kubewasm.Object {
	return kubewasm.Object{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": meta(s.NetworkPolicyName, ns),
		"spec":     map[string]any{"podSelector": map[string]any{}, "policyTypes": []string{"Ingress", "Egress"}}}
}

func reconcile(req kubewasm.Request) (kubewasm.Result, error) {
	done := kubewasm.Result{}
	s := defaults()
	if err := kubewasm.Settings(&s); err != nil {
		return done, err
	}
	ns, err := kubewasm.Get(namespace, "", req.Name)
	if err != nil || ns == nil {
		return done, err
	}
	md, _ := ns["metadata"].(map[string]any)
	if md["deletionTimestamp"] != nil {
		return done, nil
	}
	labels, _ := md["labels"].(map[string]any)
	_, optedOut := labels[s.OptOutLabel]
	existing, err := kubewasm.Get(resourceQuota, req.Name, s.QuotaName)
	if err != nil {
		return done, err
	}
	if optedOut {
		if existing != nil && kubewasm.IsControlledBy(existing, ns) {
			if err := kubewasm.Delete(resourceQuota, req.Name, s.QuotaName); err != nil {
				return done, err
			}
		}
		p, err := kubewasm.Get(networkPolicy, req.Name, s.NetworkPolicyName)
		if err != nil {
			return done, err
		}
		if p != nil && kubewasm.IsControlledBy(p, ns) {
			return done, kubewasm.Delete(networkPolicy, req.Name, s.NetworkPolicyName)
		}
		return done, nil
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

func init() {
	kubewasm.Register(kubewasm.Reconciles(namespace).Owns(resourceQuota).Owns(networkPolicy), reconcile)
}

func main() {}
