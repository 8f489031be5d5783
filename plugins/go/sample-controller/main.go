// sample-controller: kubernetes/sample-controller's Foo controller in desired-state mode, the Go
// twin of plugins/rust/sample-controller (same CRD, deploy/crds/examples/foo.yaml, and the same
// behaviour): a Foo's Deployment with its replicas, its available replicas in the Foo's status,
// ErrResourceExists for a Deployment the Foo does not control, Synced Events.
package main

import (
	"context"
	"errors"
	"fmt"

	"kubewasm.dev/sdk"
)

var (
	fooKind        = kubewasm.Kind{APIVersion: "samplecontroller.k8s.io/v1alpha1", Kind: "Foo"}
	deploymentKind = kubewasm.Kind{APIVersion: "apps/v1", Kind: "Deployment"}
)

// The kinds this plugin reads, with the fields it uses.
type (
	Foo struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
		Spec                struct {
			DeploymentName string `json:"deploymentName"`
			Replicas       *int32 `json:"replicas"`
		} `json:"spec"`
	}
	Deployment struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
		Status              struct {
			AvailableReplicas int32 `json:"availableReplicas"`
		} `json:"status"`
	}
)

// deployment is the Deployment foo wants (the host adds the Foo as its owner).
func deployment(foo *Foo) map[string]any {
	labels := map[string]any{"app": "nginx", "controller": foo.Name}
	replicas := int32(1)
	if foo.Spec.Replicas != nil {
		replicas = *foo.Spec.Replicas
	}
	container := map[string]any{"name": "nginx", "image": "nginx:latest"}
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": foo.Spec.DeploymentName, "namespace": foo.Namespace},
		"spec": map[string]any{
			"replicas": replicas, "selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{"containers": []any{container}}},
		},
	}
}

type sampleController struct{}

func (sampleController) Describe() *kubewasm.Registration {
	return kubewasm.For(fooKind).Owns(deploymentKind)
}

func (sampleController) Reconcile(_ context.Context, req kubewasm.Request) (kubewasm.Result, error) {
	foo, err := kubewasm.Get[Foo](fooKind, req.Namespace, req.Name)
	if err != nil || foo == nil {
		return kubewasm.Result{}, err
	}
	if foo.Spec.DeploymentName == "" {
		return kubewasm.Result{}, kubewasm.Terminal(fmt.Errorf("%s/%s: deployment name must be specified", req.Namespace, req.Name))
	}
	existing, err := kubewasm.Get[Deployment](deploymentKind, req.Namespace, foo.Spec.DeploymentName)
	if err != nil {
		return kubewasm.Result{}, err
	}
	if existing != nil && !kubewasm.IsControlledBy(existing, foo) {
		message := fmt.Sprintf("Resource %q already exists and is not managed by Foo", foo.Spec.DeploymentName)
		if err := kubewasm.Warning(foo, "ErrResourceExists", message); err != nil {
			return kubewasm.Result{}, err
		}
		return kubewasm.Result{}, errors.New(message)
	}
	available := int32(0)
	if existing != nil {
		available = existing.Status.AvailableReplicas
	}
	if err := kubewasm.Normal(foo, "Synced", "Foo synced successfully"); err != nil {
		return kubewasm.Result{}, err
	}
	desired := &kubewasm.Desired{Children: []any{deployment(foo)}, Status: map[string]any{"availableReplicas": available}}
	return kubewasm.Result{Desired: desired}, nil
}

func init() { kubewasm.Register(sampleController{}) }

func main() {}
