// Command controller-runtime is the controller-runtime peer of kubewasm's converge benchmark
// (host/benches/peer_converge.rs): plugins/rust/namespace-defaults written as a controller-runtime
// controller. Every Namespace gets a ResourceQuota and a default-deny NetworkPolicy, owned by the
// Namespace and written with server-side apply (not forced), plus one Event when its quota is
// first applied; a Namespace labelled kubewasm.dev/no-defaults gets its defaults removed.
//
// --controllers=N runs N such controllers in one manager over its one shared cache, each under
// its own name with its own child names (like N copies of the plugin under N names in one
// kubewasm host). Everything else is controller-runtime's default, as a user would write it:
// one reconcile at a time per controller (MaxConcurrentReconciles 1), ctrl.GetConfigOrDie
// (--kubeconfig; it leaves client-side rate limiting off, QPS -1, relying on API priority and
// fairness), the manager's default cache. --queue picks the workqueue: "priority" is controller-runtime's
// default since v0.23 (keys from the initial list wait behind later changes), "fifo" is
// client-go's rate-limited FIFO workqueue (UsePriorityQueue: false).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

// optOutLabel, managedBy and the default child names are namespace-defaults' defaults
// (plugins/rust/namespace-defaults/src/lib.rs, Settings::default).
const (
	optOutLabel   = "kubewasm.dev/no-defaults"
	managedByKey  = "app.kubernetes.io/managed-by"
	managedByVal  = "kubewasm-namespace-defaults"
	quotaName     = "default-quota"
	policyName    = "default-deny"
	baseName      = "namespace-defaults"
	managerPrefix = "controller-runtime/"
)

// defaults is one controller: its name (field manager and event reporter) and child names.
type defaults struct {
	client.Client
	events     recorder.EventRecorder
	manager    string
	quotaName  string
	policyName string
}

func (d *defaults) owner(ns *corev1.Namespace) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Namespace").WithName(ns.Name).
		WithUID(ns.UID).WithController(true).WithBlockOwnerDeletion(true)
}

func ownedBy(obj metav1.Object, ns *corev1.Namespace) bool {
	for _, r := range obj.GetOwnerReferences() {
		if ptr.Deref(r.Controller, false) && r.UID == ns.UID {
			return true
		}
	}
	return false
}

// Reconcile mirrors NamespaceDefaults::reconcile step for step: reads from the cache, two
// applies, one Event when the quota was not in the cache yet.
func (d *defaults) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns corev1.Namespace
	if err := d.Get(ctx, req.NamespacedName, &ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ns.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	var existing corev1.ResourceQuota
	err := d.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: d.quotaName}, &existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	quotaExists := err == nil
	if _, optedOut := ns.Labels[optOutLabel]; optedOut {
		if quotaExists && ownedBy(&existing, &ns) {
			if err := client.IgnoreNotFound(d.Delete(ctx, &existing)); err != nil {
				return ctrl.Result{}, err
			}
		}
		var policy networkingv1.NetworkPolicy
		if err := d.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: d.policyName}, &policy); err == nil &&
			ownedBy(&policy, &ns) {
			if err := client.IgnoreNotFound(d.Delete(ctx, &policy)); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}
	labels := map[string]string{managedByKey: managedByVal}
	quota := corev1ac.ResourceQuota(d.quotaName, ns.Name).WithLabels(labels).WithOwnerReferences(d.owner(&ns)).
		WithSpec(corev1ac.ResourceQuotaSpec().WithHard(corev1.ResourceList{
			"pods":            mustQuantity("50"),
			"requests.cpu":    mustQuantity("4"),
			"requests.memory": mustQuantity("8Gi"),
		}))
	if err := d.Apply(ctx, quota, client.FieldOwner(d.manager)); err != nil {
		return ctrl.Result{}, err
	}
	policy := networkingv1ac.NetworkPolicy(d.policyName, ns.Name).WithLabels(labels).
		WithOwnerReferences(d.owner(&ns)).
		WithSpec(networkingv1ac.NetworkPolicySpec().WithPodSelector(metav1ac.LabelSelector()).
			WithPolicyTypes(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
	if err := d.Apply(ctx, policy, client.FieldOwner(d.manager)); err != nil {
		return ctrl.Result{}, err
	}
	if !quotaExists {
		d.events.Eventf(&ns, nil, corev1.EventTypeNormal, "DefaultsApplied", "Reconcile",
			"applied ResourceQuota %s and NetworkPolicy %s", d.quotaName, d.policyName)
	}
	return ctrl.Result{}, nil
}

func main() {
	queue := flag.String("queue", "priority", `workqueue: "priority" (controller-runtime's default) or "fifo" (client-go's workqueue)`)
	controllers := flag.Int("controllers", 1, "controllers in this manager, sharing its cache")
	suffixFrom := flag.Int("suffix-from", -1, `name controller i "namespace-defaults-<suffix-from+i>" with children "default-quota-<n>", "default-deny-<n>"; -1: no suffix (only with --controllers=1)`)
	metricsAddr := flag.String("metrics-addr", "0", `metrics endpoint address, "0" for none`)
	healthAddr := flag.String("health-addr", "0", `/healthz and /readyz address, "0" for none`)
	latencySelector := flag.String("latency-selector", "", "instead of namespace-defaults, the latency benchmark's controller over the ConfigMaps this label selector matches (latency.go)")
	flag.Parse()
	if *queue != "priority" && *queue != "fifo" {
		fail(fmt.Errorf("--queue must be priority or fifo, not %q", *queue))
	}
	if *suffixFrom < 0 && *controllers != 1 {
		fail(fmt.Errorf("--controllers=%d needs --suffix-from", *controllers))
	}
	ctrl.SetLogger(stderrLogger())

	// --kubeconfig is controller-runtime's own flag (pkg/client/config registers it).
	cfg := ctrl.GetConfigOrDie()
	health := *healthAddr
	if health == "0" {
		health = ""
	}
	opts := ctrl.Options{
		Metrics:                server.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress: health,
	}
	if *latencySelector != "" {
		opts = latencyOptions(opts, *latencySelector)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		fail(err)
	}
	if health != "" {
		_ = mgr.AddHealthzCheck("ping", healthz.Ping)
		_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	}
	if *latencySelector != "" {
		*controllers = 0
		if err := addLatency(mgr, *queue); err != nil {
			fail(err)
		}
	}
	for i := range *controllers {
		name, quota, policy := baseName, quotaName, policyName
		if *suffixFrom >= 0 {
			n := "-" + strconv.Itoa(*suffixFrom+i)
			name, quota, policy = name+n, quota+n, policy+n
		}
		r := &defaults{
			Client:     mgr.GetClient(),
			events:     mgr.GetEventRecorder(managerPrefix + name),
			manager:    managerPrefix + name,
			quotaName:  quota,
			policyName: policy,
		}
		err := ctrl.NewControllerManagedBy(mgr).Named(name).
			For(&corev1.Namespace{}).
			Owns(&corev1.ResourceQuota{}).
			Owns(&networkingv1.NetworkPolicy{}).
			WithOptions(controller.Options{
				MaxConcurrentReconciles: 1,
				UsePriorityQueue:        ptr.To(*queue == "priority"),
			}).
			Complete(r)
		if err != nil {
			fail(err)
		}
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail(err)
	}
}

// stderrLogger logs errors and V(0) messages as one line each on stderr.
func stderrLogger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{})
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "controller-runtime peer:", err)
	os.Exit(1)
}
