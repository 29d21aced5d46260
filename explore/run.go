package main

// The runner: a batch of cases in one config. It loads the batch's Caddyfile, sends
// every case's requests at their moments, plays each case's ending, waits for the work
// and the locks to settle, and judges each case.

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
)

// result is a judged case, with what the report needs.
type result struct {
	c         *caseSpec
	caddyfile string
	works     []work
	outs      []outcome
	f         faults
	v         verdict
	epoch     time.Time
	batch     []uint64 // the seeds run in the same batch
	err       error    // the case could not run (not a violation)
}

// settleMargin is what the settle wait allows beyond a drain's ttl.
const settleMargin = 1500 * time.Millisecond

func (w *world) runBatch(cases []*caseSpec, generation *int) []result {
	cf := caddyfile(&w.env, cases, w.ports, *generation)
	results := make([]result, len(cases))
	var seeds []uint64
	for i, c := range cases {
		results[i] = result{c: c, caddyfile: cf}
		seeds = append(seeds, c.seed)
	}
	for i := range results {
		results[i].batch = seeds
	}
	cfg, err := adapt(cf)
	if err == nil {
		cfg, err = patchJSON(cfg, cases, w.ports)
	}
	if err == nil {
		err = w.load(cfg)
	}
	if err != nil {
		for i := range results {
			results[i].err = err
		}
		return results
	}
	w.up.reset()
	// No connection of the last batch's: an idle one (h2c above all) may still reach the
	// server of the config before, whose handlers were cleaned up (503, shutting down).
	w.clients.close()
	baseG := rootGoroutines()
	epoch := time.Now()
	fs := make([]faults, len(cases))
	outs := make([][]outcome, len(cases))
	var mu sync.Mutex
	var all sync.WaitGroup
	for i, c := range cases {
		base := fmt.Sprintf("http://127.0.0.1:%d", w.ports[i])
		outs[i] = make([]outcome, len(c.reqs))
		for j, q := range c.reqs {
			all.Go(func() {
				time.Sleep(time.Until(epoch.Add(q.at)))
				slow := 150 * time.Millisecond
				if c.ending == endBodyAfter && j == 0 {
					slow = 900 * time.Millisecond
				}
				o := w.clients.send(base, c.lane, q, slow)
				mu.Lock()
				outs[i][j] = o
				mu.Unlock()
			})
		}
		all.Go(func() { w.playEnding(c, cases, epoch, &fs[i], &mu, cf, generation) })
	}
	all.Wait()

	// A global fault touches every case of the batch.
	var global faults
	for _, f := range fs {
		if !f.pauseStart.IsZero() {
			global.pauseStart, global.pauseEnd = f.pauseStart, f.pauseEnd
		}
		if !f.stopAt.IsZero() {
			global.stopAt = f.stopAt
		}
		if !f.reloadAt.IsZero() {
			global.reloadAt = f.reloadAt
		}
	}
	for i, c := range cases {
		if fs[i].pauseStart.IsZero() {
			fs[i].pauseStart, fs[i].pauseEnd = global.pauseStart, global.pauseEnd
		}
		if fs[i].stopAt.IsZero() {
			fs[i].stopAt = global.stopAt
		}
		if fs[i].reloadAt.IsZero() {
			fs[i].reloadAt = global.reloadAt
		}
		fs[i].bypassed = c.lock.bypass && !fs[i].pauseStart.IsZero()
	}

	// Settle: the work ends (bounded), then the locks drain.
	waitFor(3*time.Second, w.up.idle)
	w.resumeAll()
	lanes := map[string]bool{}
	for _, c := range cases {
		lanes[c.lane] = true
	}
	var leftLocks map[string][]string
	var leftKeys map[string][]string
	waitFor(caseTTL+settleMargin, func() bool {
		leftLocks, leftKeys = map[string][]string{}, map[string][]string{}
		ls, err := w.locks()
		if err != nil {
			leftLocks["?"] = []string{err.Error()}
			return false
		}
		for _, l := range ls {
			if lane := laneOf(l.Key); lanes[lane] {
				leftLocks[lane] = append(leftLocks[lane], fmt.Sprintf("%s %s (%s)", l.Key, l.State, l.URI))
			}
		}
		for _, k := range w.redisKeys() {
			if lane := laneOf(strings.TrimPrefix(k[strings.Index(k, " ")+1:], lockPrefix)); lanes[lane] {
				leftKeys[lane] = append(leftKeys[lane], k)
			}
		}
		return len(leftLocks) == 0 && len(leftKeys) == 0
	})
	leaked := ""
	if !waitFor(2*time.Second, func() bool { return rootGoroutines() <= baseG }) {
		leaked = fmt.Sprintf("%d goroutines of the plugin before the batch, %d after it settled", baseG, rootGoroutines())
	}
	works := w.up.snapshot()
	for i, c := range cases {
		var mine []work
		for _, wk := range works {
			if wk.lane == c.lane {
				mine = append(mine, wk)
			}
		}
		v := c.judge(mine, outs[i], fs[i], leftLocks[c.lane], leftKeys[c.lane])
		if leaked != "" {
			v.add("leak: %s", leaked)
		}
		results[i].works, results[i].outs, results[i].f, results[i].v, results[i].epoch = mine, outs[i], fs[i], v, epoch
	}
	w.clearKeys()
	return results
}

// laneOf is the case a lock key belongs to: x:<lane>:<id>.
func laneOf(key string) string {
	parts := strings.Split(key, ":")
	if len(parts) >= 2 {
		return strings.Fields(parts[1])[0]
	}
	return ""
}

// playEnding plays c's ending at its moment.
func (w *world) playEnding(c *caseSpec, cases []*caseSpec, epoch time.Time, f *faults, mu *sync.Mutex, cf string, generation *int) {
	first := c.reqs[0].id
	working := func() bool {
		for _, wk := range w.up.snapshot() {
			if wk.req == first {
				return true
			}
		}
		return false
	}
	switch c.ending {
	case endForce, endBodyAfter:
		if c.ending == endForce {
			waitFor(2*time.Second, working)
		}
		// A body still arriving: the loss strikes in its middle (an application behind
		// FastCGI starts only once its stdin is complete).
		time.Sleep(time.Until(epoch.Add(c.faultAt)))
		// Whether the first request holds its key as the force comes, by Caddy's account
		// (its work may not have reached the upstream yet).
		held := false
		ls, _ := w.locks()
		for _, l := range ls {
			held = held || (l.State == "held" && l.URI == c.reqs[0].path(c.lane) && l.Method == c.reqs[0].method &&
				c.enforcingEntry(c.reqs[0], l.Key))
		}
		start := time.Now()
		err := w.forceRelease(c.target)
		mu.Lock()
		f.forceStart, f.forceDone, f.forceKey, f.firstHeld = start, time.Now(), c.target, held
		mu.Unlock()
		_ = err // a force release that did not reach a quorum: judged the same (the key may stand)
	case endOutage:
		waitFor(2*time.Second, working)
		time.Sleep(time.Until(epoch.Add(c.faultAt)))
		d := caseTTL + 400*time.Millisecond
		mu.Lock()
		f.pauseStart, f.pauseEnd = time.Now(), time.Now().Add(d)
		mu.Unlock()
		w.pause(3, d)
		time.Sleep(d)
	case endReload:
		time.Sleep(time.Until(epoch.Add(c.faultAt)))
		mu.Lock()
		*generation++
		g := *generation
		mu.Unlock()
		cfg, err := adapt(strings.ReplaceAll(cf, fmt.Sprintf("X-Generation %d", g-1), fmt.Sprintf("X-Generation %d", g)))
		if err == nil {
			cfg, err = patchJSON(cfg, cases, w.ports)
		}
		if err == nil {
			_ = w.load(cfg)
		}
		mu.Lock()
		f.reloadAt = time.Now()
		mu.Unlock()
	case endStop:
		time.Sleep(time.Until(epoch.Add(c.faultAt)))
		mu.Lock()
		f.stopAt = time.Now()
		mu.Unlock()
		_ = w.stop()
	}
}

// rootGoroutines counts goroutines running the plugin's code (its handler, watchers).
func rootGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/caddy-redlock/caddy-redlock.") {
			n++
		}
	}
	return n
}

func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
