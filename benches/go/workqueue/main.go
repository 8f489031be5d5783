// Command workqueue measures add/get/done throughput of client-go's rate-limiting workqueue over
// 100k distinct keys with 1 and 4 workers: the peer of host/benches/workqueue.rs, run beside it
// by benches/workqueue.sh. Both print "RESULT <impl> <workers> <ops/s>" lines (median of rounds).
package main

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

const (
	keys   = 100_000
	rounds = 11
)

// round adds every key from one producer while `workers` goroutines get and done them, then shuts
// the queue down; it returns the time until every worker has seen the shutdown.
func round(items []string, workers int) time.Duration {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bench"},
	)
	start := time.Now()
	var wg sync.WaitGroup
	counts := make([]int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				q.Done(key)
				counts[w]++
			}
		}(w)
	}
	for _, key := range items {
		q.Add(key)
	}
	q.ShutDown()
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != len(items) {
		panic(fmt.Sprintf("processed %d keys, want %d", total, len(items)))
	}
	return elapsed
}

func main() {
	items := make([]string, keys)
	for i := range items {
		items[i] = fmt.Sprintf("namespace-%d/object-%d", i%100, i)
	}
	for _, workers := range []int{1, 4} {
		round(items, workers) // warm-up
		times := make([]time.Duration, rounds)
		for r := range times {
			times[r] = round(items, workers)
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		median := times[rounds/2]
		fmt.Printf("RESULT client-go/string %d %.0f\n", workers, float64(keys)/median.Seconds())
	}
}
