package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// waitRow is the memory and goroutine cost of many requests waiting on held keys.
type waitRow struct {
	Name    string `json:"name"`
	Waiters int    `json:"waiters"`
	Keys    int    `json:"keys"`

	Base, Held, Waiting snapshot            `json:"-"`
	Snapshots           map[string]snapshot `json:"snapshots"` // base, held (keys held, no waiters), waiting

	RSSPerWaiter        float64 `json:"rss_bytes_per_waiter"`
	HeapPerWaiter       float64 `json:"heap_and_stack_bytes_per_waiter"`
	GoroutinesPerWaiter float64 `json:"goroutines_per_waiter"`
	CmdsPerSecWaiting   float64 `json:"redis_commands_per_s_while_waiting"`
	CPUWaiting          float64 `json:"cpu_fraction_while_waiting"` // of one core, front end only
	EarlyErrors         int     `json:"waiters_answered_before_release"`

	Drained         int      `json:"drained"`
	DrainSec        float64  `json:"drain_seconds"`
	DrainPerSec     float64  `json:"drained_per_s"`
	DrainErrors     int      `json:"drain_errors"`
	DrainCut        int      `json:"cut_at_drain_limit"`
	Violations      int64    `json:"violations"`
	GoroutinesAfter int      `json:"goroutines_after"`
	Cmds            cmdCount `json:"redis_commands_waiting"`
}

// snapshot is one reading of the front end's process.
type snapshot struct {
	RSS        int64 `json:"rss_bytes"`
	Goroutines int   `json:"goroutines"`
	HeapStack  int64 `json:"heap_inuse_plus_stack_inuse"`
}

func takeSnapshot(fe *frontend) snapshot {
	// A heap profile with gc=1 makes the process collect first, so heap figures compare.
	if resp, err := debugClient.Get(fe.debug + "/debug/pprof/heap?gc=1"); err == nil {
		resp.Body.Close()
	}
	var s snapshot
	s.RSS, _ = rssBytes(fe.proc.PID())
	s.Goroutines, _ = goroutines(fe.debug)
	m, _ := memstats(fe.debug)
	s.HeapStack = m.HeapInuse + m.StackInuse
	return s
}

// measureWaiters holds cfg.WaitKeys keys with gate requests, queues cfg.Waiters requests
// behind them, reads the process, then opens the gate and times the drain.
func measureWaiters(name string, fe *frontend, site string, inner map[string]bool, up *upstream, nodes []*redisNode, cfg config) (waitRow, error) {
	row := waitRow{Name: name, Waiters: cfg.Waiters, Keys: cfg.WaitKeys}
	base := fe.sites[site]
	tr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true, IdleConnTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(ctx context.Context, path string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 50 { // warm the lock client and the upstream connections
		get(context.Background(), fmt.Sprintf("/r/warm-%d", i))
	}
	time.Sleep(500 * time.Millisecond)
	row.Base = takeSnapshot(fe)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var holders sync.WaitGroup
	inFlight0 := up.inFlight.Load()
	for k := range cfg.WaitKeys {
		holders.Go(func() { get(ctx, fmt.Sprintf("/r/w%d?hold=gate", k)) })
	}
	if err := waitFor(15*time.Second, func() bool { return up.inFlight.Load()-inFlight0 >= int64(cfg.WaitKeys) }); err != nil {
		return row, fmt.Errorf("%s: holders did not reach the upstream: %w", name, err)
	}
	time.Sleep(300 * time.Millisecond)
	row.Held = takeSnapshot(fe)

	// Queue the waiters, in batches so the listen backlog is not overrun.
	var written, early atomic.Int64
	var done atomic.Int64
	var drainErrs, cut atomic.Int64
	var released atomic.Bool
	var wg sync.WaitGroup
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { written.Add(1) }}
	wctx := httptrace.WithClientTrace(ctx, trace)
	for i := range cfg.Waiters {
		if i%500 == 499 {
			time.Sleep(20 * time.Millisecond)
		}
		wg.Go(func() {
			code := get(wctx, fmt.Sprintf("/r/w%d", i%cfg.WaitKeys))
			switch {
			case !released.Load():
				early.Add(1)
			case code >= 200 && code < 300:
				done.Add(1)
			case code == 0 && ctx.Err() != nil:
				cut.Add(1)
			default:
				drainErrs.Add(1)
			}
		})
	}
	if err := waitFor(60*time.Second, func() bool { return written.Load() >= int64(cfg.Waiters) }); err != nil {
		return row, fmt.Errorf("%s: only %d of %d waiters sent: %w", name, written.Load(), cfg.Waiters, err)
	}
	// Let the front end take them all in: wait until its goroutine count settles.
	last := -1
	waitFor(20*time.Second, func() bool {
		time.Sleep(500 * time.Millisecond)
		g, _ := goroutines(fe.debug)
		settled := last > 0 && g-last < 20 && last-g < 20
		last = g
		return settled
	})
	row.Waiting = takeSnapshot(fe)

	resetStats(nodes)
	cpu0, _ := cpuTime(fe.proc.PID())
	time.Sleep(cfg.WaitMeasure)
	cpu1, _ := cpuTime(fe.proc.PID())
	c, _ := commandStats(nodes)
	total := int64(0)
	for k, v := range c {
		if k != readsKey {
			total += v
		}
	}
	row.CmdsPerSecWaiting = float64(total) / cfg.WaitMeasure.Seconds()
	row.CPUWaiting = (cpu1 - cpu0).Seconds() / cfg.WaitMeasure.Seconds()
	row.Cmds = newCmdCount(c, 1, inner) // per second of waiting, not per request
	for k, v := range row.Cmds.PerReq {
		row.Cmds.PerReq[k] = v / cfg.WaitMeasure.Seconds()
	}
	row.Cmds.Calls /= cfg.WaitMeasure.Seconds()
	row.Cmds.TopLevel /= cfg.WaitMeasure.Seconds()
	row.Cmds.Reads /= cfg.WaitMeasure.Seconds()
	row.EarlyErrors = int(early.Load())

	// Release the keys and time the drain: every key passes through all its waiters.
	v0, _ := up.violationCount()
	released.Store(true)
	t0 := time.Now()
	up.openGate()
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(cfg.Drain):
		cancel()
		<-allDone
	}
	row.DrainSec = time.Since(t0).Seconds()
	holders.Wait()
	v1, _ := up.violationCount()
	row.Violations = v1 - v0
	row.Drained = int(done.Load())
	row.DrainErrors = int(drainErrs.Load())
	row.DrainCut = int(cut.Load())
	row.DrainPerSec = float64(row.Drained) / row.DrainSec
	tr.CloseIdleConnections()
	time.Sleep(time.Second)
	row.GoroutinesAfter, _ = goroutines(fe.debug)

	w := float64(cfg.Waiters)
	row.RSSPerWaiter = float64(row.Waiting.RSS-row.Held.RSS) / w
	row.HeapPerWaiter = float64(row.Waiting.HeapStack-row.Held.HeapStack) / w
	row.GoroutinesPerWaiter = float64(row.Waiting.Goroutines-row.Held.Goroutines) / w
	row.Snapshots = map[string]snapshot{"base": row.Base, "held": row.Held, "waiting": row.Waiting}
	return row, nil
}

func waitFor(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
