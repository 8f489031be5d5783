// Command informer is the client-go peer of the kubewasm informer benchmark
// (host/benches/informer.rs): it syncs a ConfigMap informer for one namespace and prints its
// sync time and memory as one JSON line.
package main

import (
	"encoding/json"
	"flag"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb * 1024
		}
	}
	return -1
}

// stripManagedFields is the transform controller-runtime and kubewasm install by default.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig")
	namespace := flag.String("namespace", "", "namespace to watch")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		panic(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	cs := kubernetes.NewForConfigOrDie(cfg)

	runtime.GC()
	rssBefore := rss()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	start := time.Now()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithNamespace(*namespace),
		informers.WithTransform(stripManagedFields))
	informer := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	factory.Start(stop)
	// cache.WaitForCacheSync polls every 100 ms, which rounded every figure up to a tenth of a
	// second; poll every millisecond instead, like for like with kubewasm's notified wait.
	for !informer.HasSynced() {
		if time.Since(start) > 5*time.Minute {
			panic("cache did not sync")
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	objects := len(informer.GetStore().ListKeys())

	rssPeak := rss()
	runtime.GC()
	debug.FreeOSMemory()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	out := map[string]any{
		"peer":               "client-go",
		"objects":            objects,
		"sync_seconds":       elapsed.Seconds(),
		"rss_before_bytes":   rssBefore,
		"rss_synced_bytes":   rssPeak,
		"rss_after_gc_bytes": rss(),
		"heap_growth_bytes":  int64(after.HeapAlloc) - int64(before.HeapAlloc),
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	close(stop)
}
