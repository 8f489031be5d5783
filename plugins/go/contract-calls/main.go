// contract-calls: a test plugin, not an example. It makes every host call of contract 0.3 the
// Go SDK lowers by hand (abi.go, imports.go, exports.go) with values a test can recognise, so
// host/tests/all/go_plugin.rs checks the memory layouts the component's type check cannot:
// event filters and an owned kind's prune policy in describe, paged and field-selected lists,
// patch and patch-status with preconditions, delete with a propagation policy, the uncached get,
// the three reconcile errors, a desired state and a failing map.
//
// The key's name picks what reconcile does: "terminal", "requeue", "periodic", "panic", "calls",
// "desired".
package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"kubewasm.dev/sdk"
)

var (
	configMapKind  = kubewasm.Kind{APIVersion: "v1", Kind: "ConfigMap"}
	deploymentKind = kubewasm.Kind{APIVersion: "apps/v1", Kind: "Deployment"}
	serviceKind    = kubewasm.Kind{APIVersion: "v1", Kind: "Service"}
)

type contractCalls struct{}

func (contractCalls) Describe() *kubewasm.Registration {
	return kubewasm.For(configMapKind).
		ForFilter(kubewasm.EventFilter{Namespace: "ns", LabelSelector: "app=web", GenerationChanged: true}).
		OwnsWith(deploymentKind, kubewasm.EventFilter{LabelsChanged: true}).
		Pruned(deploymentKind, kubewasm.PruneForeground).
		WatchesWith(serviceKind, kubewasm.EventFilter{Namespace: "w", AnnotationsChanged: true}).
		Writes(configMapKind).
		MaxConcurrent(3)
}

func names(items []kubewasm.Unstructured) string {
	var out []string
	for _, o := range items {
		out = append(out, o.GetObjectMeta().Name)
	}
	return strings.Join(out, ",")
}

func (contractCalls) Reconcile(_ context.Context, req kubewasm.Request) (kubewasm.Result, error) {
	switch req.Name {
	case "terminal":
		return kubewasm.Result{}, kubewasm.Terminal(errors.New("spec is invalid"))
	case "requeue":
		return kubewasm.Result{}, kubewasm.RequeueAfter(1500*time.Millisecond, "waiting for Secret db")
	case "periodic":
		return kubewasm.Result{RequeueAfter: 2 * time.Second}, nil
	case "panic":
		var counts map[string]int
		counts[req.Name]++ // panics: assignment to entry in nil map
	case "calls":
		return calls(req)
	case "desired":
		child := func(name string) map[string]any {
			return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": name, "namespace": req.Namespace}}
		}
		desired := &kubewasm.Desired{Children: []any{child("d1"), child("d2")}, Status: map[string]any{"seen": true}}
		return kubewasm.Result{Desired: desired, RequeueAfter: 3 * time.Second}, nil
	}
	return kubewasm.Result{}, errors.New("unknown key " + req.Name)
}

func calls(req kubewasm.Request) (kubewasm.Result, error) {
	first, err := kubewasm.ListPage[kubewasm.Unstructured](configMapKind, kubewasm.ListOptions{Namespace: "ns", Limit: 2})
	if err != nil {
		return kubewasm.Result{}, err
	}
	second, err := kubewasm.ListPage[kubewasm.Unstructured](configMapKind,
		kubewasm.ListOptions{Namespace: "ns", Limit: 2, Continue: first.Continue})
	if err != nil {
		return kubewasm.Result{}, err
	}
	byField, err := kubewasm.ListPage[kubewasm.Unstructured](configMapKind,
		kubewasm.ListOptions{FieldSelector: "metadata.name=b", LabelSelector: "app=web"})
	if err != nil {
		return kubewasm.Result{}, err
	}
	var iterated []kubewasm.Unstructured
	for o, err := range kubewasm.Iterate[kubewasm.Unstructured](configMapKind, kubewasm.ListOptions{Limit: 1}) {
		if err != nil {
			return kubewasm.Result{}, err
		}
		iterated = append(iterated, o)
	}
	live, err := kubewasm.GetUncached[kubewasm.Unstructured](configMapKind, req.Namespace, req.Name)
	if err != nil || live == nil {
		return kubewasm.Result{}, errors.Join(errors.New("no uncached object"), err)
	}
	missing, err := kubewasm.GetUncached[kubewasm.Unstructured](configMapKind, req.Namespace, "missing")
	if err != nil || missing != nil {
		return kubewasm.Result{}, errors.Join(errors.New("a missing object was found"), err)
	}
	data := map[string]any{"data": map[string]string{
		"page1": names(first.Items), "page2": names(second.Items), "lastPage": boolText(second.Continue == ""),
		"byField": names(byField.Items), "iterated": names(iterated), "uncached": live.GetObjectMeta().UID,
	}}
	if _, err := kubewasm.Patch[kubewasm.Unstructured](configMapKind, req.Namespace, req.Name, kubewasm.MergePatch,
		data, kubewasm.PreconditionsOf(live)); err != nil {
		return kubewasm.Result{}, err
	}
	ops := []map[string]any{{"op": "add", "path": "/status", "value": map[string]any{"seen": true}}}
	if _, err := kubewasm.PatchStatus[kubewasm.Unstructured](configMapKind, req.Namespace, req.Name,
		kubewasm.JSONPatch, ops); err != nil {
		return kubewasm.Result{}, err
	}
	if err := kubewasm.Delete(configMapKind, "ns", "gone", kubewasm.Foreground,
		kubewasm.Preconditions{UID: "uid-gone"}); err != nil {
		return kubewasm.Result{}, err
	}
	status := kubewasm.Unstructured{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": req.Name, "namespace": req.Namespace}, "status": map[string]any{"ok": true}}
	_, err = kubewasm.ApplyStatus(&status, false)
	return kubewasm.Result{}, err
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// Map maps a Service to the ConfigMap of the same name; one named "fail" fails as forbidden.
func (contractCalls) Map(_ kubewasm.Kind, object kubewasm.Unstructured) ([]kubewasm.Key, error) {
	meta := object.GetObjectMeta()
	if meta.Name == "fail" {
		return nil, &kubewasm.HostError{Reason: "forbidden", Message: "no grant for Service fail"}
	}
	return []kubewasm.Key{{Namespace: "ns", Name: meta.Name}}, nil
}

func init() { kubewasm.Register(contractCalls{}) }

func main() {}
