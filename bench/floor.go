package main

import (
	"context"
	"sync"
	"time"
)

// measureFloor times a PING to one node and a PING to every node at once (one goroutine
// per node, as a Redlock round does), alternating the two.
func measureFloor(nodes []*redisNode, rounds int, d time.Duration) []latRow {
	ctx := context.Background()
	one := func() time.Duration {
		t0 := time.Now()
		_ = nodes[0].client.Ping(ctx).Err()
		return time.Since(t0)
	}
	all := func() time.Duration {
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, n := range nodes {
			wg.Go(func() { _ = n.client.Ping(ctx).Err() })
		}
		wg.Wait()
		return time.Since(t0)
	}
	fns := []func() time.Duration{one, all}
	samples := make([][]time.Duration, len(fns))
	for _, f := range fns { // warm the connections
		for range 100 {
			f()
		}
	}
	alternate(rounds, len(fns), func(i, _ int) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			samples[i] = append(samples[i], fns[i]())
		}
	})
	return []latRow{
		{Name: "PING, 1 node", Lat: summarize(samples[0])},
		{Name: "PING, 5 nodes in parallel", Lat: summarize(samples[1])},
	}
}

// latRow is one library-level measurement.
type latRow struct {
	Name string  `json:"name"`
	Lat  latency `json:"latency"`
	// Release is the release alone (lock rows).
	Release *latency `json:"release,omitempty"`
	// Acquire is the acquire alone (lock rows); Lat is then acquire+release.
	Acquire *latency `json:"acquire,omitempty"`
	Errors  int      `json:"errors,omitempty"`
}
