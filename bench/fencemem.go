package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The fencing state phase (-only fencemem, issue 26): how much lock state the nodes keep
// after a run of unique keys with fencing, and how long it takes to go. Five fresh nodes
// of its own (an idle level of their own), one library client at the default ttl
// (10s, max_ttl the same), 16 goroutines taking and releasing a new key each time with
// fencing for the window. Then, per node: keys and used_memory at the end of the run,
// and the time until every node is back to its idle key count. Each used key leaves its
// fencing counter behind, which expires two quarantines (about 2 x max_ttl) after its
// last use (redlock/fencing.go, "Counter expiry"); before issue 26 it stayed an hour.

// fenceMemRow is the phase's one row.
type fenceMemRow struct {
	Name         string  `json:"name"`
	KeysPerSec   float64 `json:"unique_keys_per_sec"`
	KeysIdle     int64   `json:"keys_idle"`      // most over the nodes
	KeysAfterRun int64   `json:"keys_after_run"` // most over the nodes
	MemIdle      int64   `json:"used_memory_idle"`
	MemAfterRun  int64   `json:"used_memory_after_run"`
	MemDrained   int64   `json:"used_memory_drained"`
	Drained      bool    `json:"drained"`
	DrainSeconds float64 `json:"drain_seconds"` // from the end of the run to every node back at idle keys
	BoundSeconds float64 `json:"bound_seconds"` // two quarantines + 10s (Redis's expiry cycle and the polling)
}

const fenceMemTTL = 10 * time.Second

func runFenceMem(res *results, cfg config, dir string, fail func(string, error)) {
	progress("7. fencing state after unique keys...\n")
	bg := newBGMeter()
	defer noteBackground(res, "7. fencing state", bg)
	ndir := filepath.Join(dir, "fencemem")
	if err := mkdir(ndir); err != nil {
		fail("fencemem", err)
		return
	}
	nodes, err := startRedis(5, ndir)
	if err != nil {
		fail("fencemem redis", err)
		return
	}
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	c, err := redlock.New(urls(nodes), redlock.Options{TTL: fenceMemTTL})
	if err != nil {
		fail("fencemem client", err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	time.Sleep(200 * time.Millisecond) // the client's announcement is part of idle
	// So is the nodes' write sequence, which the first grant creates and no expiry ends
	// (redlock/rollback.go): one lock without fencing leaves nothing else behind.
	if l, err := c.Acquire(ctx, "fencemem-warm", redlock.AcquireOptions{}); err == nil {
		_ = l.Release(ctx)
	}
	idleKeys, idleMem := nodeState(nodes)
	window := cfg.HotDur
	var n atomic.Int64
	var errs atomic.Int64
	end := time.Now().Add(window)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				l, err := c.Acquire(ctx, "u:"+strconv.Itoa(g)+":"+strconv.Itoa(i), redlock.AcquireOptions{Fencing: true})
				if err != nil {
					errs.Add(1)
					continue
				}
				_ = l.Release(ctx)
				n.Add(1)
			}
		})
	}
	wg.Wait()
	stopped := time.Now()
	if errs.Load() > 0 {
		notef("fencemem: %d acquire errors", errs.Load())
	}
	afterKeys, afterMem := nodeState(nodes)
	drift := time.Duration(float64(fenceMemTTL)*0.01) + 2*time.Millisecond
	bound := 2*(fenceMemTTL+drift) + 10*time.Second
	row := fenceMemRow{Name: "redlock N=5, fencing, unique keys, ttl 10s", KeysPerSec: float64(n.Load()) / window.Seconds(),
		KeysIdle: maxOf(idleKeys), KeysAfterRun: maxOf(afterKeys), MemIdle: maxOf(idleMem), MemAfterRun: maxOf(afterMem),
		BoundSeconds: bound.Seconds()}
	deadline := stopped.Add(bound + 20*time.Second)
	for time.Now().Before(deadline) {
		keys, _ := nodeState(nodes)
		back := true
		for i := range keys {
			back = back && keys[i] <= idleKeys[i]
		}
		if back {
			row.Drained, row.DrainSeconds = true, time.Since(stopped).Seconds()
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, drainedMem := nodeState(nodes)
	row.MemDrained = maxOf(drainedMem)
	res.FenceMem = append(res.FenceMem, row)
}

// nodeState reads each node's key count and used_memory.
func nodeState(nodes []*redisNode) (keys, mem []int64) {
	for _, nd := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		k, _ := nd.client.DBSize(ctx).Result()
		info, _ := nd.client.Info(ctx, "memory").Result()
		cancel()
		var m int64
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				m, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		keys, mem = append(keys, k), append(mem, m)
	}
	return keys, mem
}

func maxOf(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// fenceMemTable renders the phase.
func (r *results) fenceMemTable() *table {
	t := &table{title: "7. Fencing state per node after unique keys (library, N=5, 16 goroutines, fencing)",
		head: []string{"run", "keys/s", "keys idle→after run", "used_memory idle→after run→drained", "back to idle keys after", "bound"},
		notes: []string{"Most over the 5 nodes. Each key leaves its fencing counter, which expires two quarantines (about 2 × max_ttl) after its last use.",
			"bound: two quarantines + 10s (Redis's active expiry and the 0.5s polling)."}}
	for _, x := range r.FenceMem {
		drain := "not within the limit"
		if x.Drained {
			drain = fmt.Sprintf("%.1fs", x.DrainSeconds)
		}
		t.add(x.Name, fmt.Sprintf("%.0f", x.KeysPerSec), fmt.Sprintf("%d → %d", x.KeysIdle, x.KeysAfterRun),
			fmt.Sprintf("%s → %s → %s", fbytes(float64(x.MemIdle)), fbytes(float64(x.MemAfterRun)), fbytes(float64(x.MemDrained))),
			drain, fmt.Sprintf("%.0fs", x.BoundSeconds))
	}
	return t
}
