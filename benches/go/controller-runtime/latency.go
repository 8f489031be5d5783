package main

// The latency mode (--latency-selector): the peer of plugins/fixtures/latency for the event →
// reconcile latency benchmark. It reconciles the ConfigMaps matching the selector (the
// manager's cache holds only those, as kubewasm's informer does) and prints, at the start of
// each reconcile, how long ago the writer stamped the object; it writes nothing.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

const writtenAt = "kubewasm.bench/written-at"

type latency struct{ client.Client }

func (l *latency) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	now := time.Now().UnixMicro()
	var cm corev1.ConfigMap
	if err := l.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if written, err := strconv.ParseInt(cm.Annotations[writtenAt], 10, 64); err == nil {
		fmt.Fprintf(os.Stdout, "latency_us=%d key=%s\n", max(now-written, 0), req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// latencyOptions narrows the manager's cache of ConfigMaps to selector.
func latencyOptions(opts ctrl.Options, selector string) ctrl.Options {
	sel, err := labels.Parse(selector)
	if err != nil {
		fail(err)
	}
	opts.Cache = cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Label: sel}}}
	return opts
}

func addLatency(mgr manager.Manager, queue string) error {
	return ctrl.NewControllerManagedBy(mgr).Named("latency").
		For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, UsePriorityQueue: ptr.To(queue == "priority")}).
		Complete(&latency{Client: mgr.GetClient()})
}
