package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Faults on the Redis nodes: pause, kill and restart without persistence, two down, no
// quorum, and (extra) a restart cascade that only the quarantine keeps safe.

// pauseNodeFault: one node stopped (SIGSTOP) for longer than the ttl, then resumed. Four
// nodes still make a quorum: requests go on; the paused node's replies, late by seconds,
// must not matter.
func pauseNodeFault(i int) fault {
	return fault{name: fmt.Sprintf("1 node%d paused > ttl", i), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		if err := e.cl.servers[i].Pause(); err != nil {
			o.failf("pause: %v", err)
		}
		sleep(ctx, e.cfg.faultHold)
		if err := e.cl.servers[i].Resume(); err != nil {
			o.failf("resume: %v", err)
		}
		o.end = time.Now()
		o.notef("%s paused for %v (ttl %v)", e.cl.name(i), o.end.Sub(o.start).Round(time.Millisecond), e.cfg.ttl)
		return o
	}}
}

// killRestartFault: one node killed and started again at once, empty (no persistence).
// Every instance must see its new run_id and keep it from voting for ttl + drift.
func killRestartFault(i int) fault {
	return fault{name: fmt.Sprintf("2 node%d killed, restarted empty", i), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		seen := quarantineLines(e, i)
		if err := e.cl.servers[i].Kill(); err != nil {
			o.failf("kill: %v", err)
		}
		sleep(ctx, 200*time.Millisecond)
		if err := e.cl.servers[i].Start(); err != nil {
			o.failf("restart: %v", err)
		}
		o.end = time.Now()
		checkQuarantine(ctx, e, &o, seen, i)
		o.waitAfter = e.cfg.ttl + e.cfg.slack // let the quarantine end before the next fault
		return o
	}}
}

// killTwoFault: two nodes killed at once (three still make a quorum), restarted empty
// after the hold.
func killTwoFault(a, b int) fault {
	return fault{name: fmt.Sprintf("3 node%d+node%d killed", a, b), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		killAll(e, &o, a, b)
		sleep(ctx, e.cfg.faultHold)
		seen := quarantineLines(e, a, b)
		startAll(e, &o, a, b)
		o.end = time.Now()
		checkQuarantine(ctx, e, &o, seen, a, b)
		o.waitAfter = e.cfg.ttl + e.cfg.slack
		return o
	}}
}

// noQuorumFault: three nodes down. Requests must fail fast with 503 and nothing may be
// proxied once every lock taken before has lapsed (the ledger checks entries and stream
// writes after ttl + slack); after the restart, the three are quarantined, so recovery
// takes at least a ttl.
func noQuorumFault(a, b, c int) fault {
	return fault{name: fmt.Sprintf("4 node%d+%d+%d down: no quorum", a, b, c), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		killAll(e, &o, a, b, c)
		lostAt := time.Now()
		grace := e.cfg.ttl + e.cfg.slack
		e.led.setNoQuorum(lostAt, grace)
		sleep(ctx, max(e.cfg.faultHold, grace+2*time.Second))
		e.led.setNoQuorum(time.Time{}, 0)
		windowEnd := time.Now()
		seen := quarantineLines(e, a, b, c)
		startAll(e, &o, a, b, c)
		o.end = time.Now()
		checkQuarantine(ctx, e, &o, seen, a, b, c)

		// Requests sent once no lock could be valid any more, and answered before the
		// nodes came back.
		rs := e.rec.between(lostAt.Add(grace), windowEnd)
		var during []result
		for _, r := range rs {
			if r.end.Before(windowEnd) {
				during = append(during, r)
			}
		}
		st := statusCounts(during)
		l503 := latencies(during, func(r result) bool { return r.status == 503 })
		o.notef("without quorum: %d requests: %s; 503 latency p50 %v p99 %v max %v",
			len(during), formatStatuses(st), pct(l503, 50).Round(time.Millisecond), pct(l503, 99).Round(time.Millisecond), pct(l503, 100).Round(time.Millisecond))
		if n := st[200]; n > 0 {
			o.failf("%d requests answered 200 without a quorum", n)
		}
		if len(during) > 0 && st[503] == 0 {
			o.failf("no 503 while no quorum: %s", formatStatuses(st))
		}
		// "Quickly": an unavailable cluster must not hold requests for the whole wait.
		if p := pct(l503, 50); p > e.cfg.wait/2 {
			o.failf("503 answers are slow without a quorum: median %v (wait is %v)", p.Round(time.Millisecond), e.cfg.wait)
		}
		o.waitAfter = e.cfg.ttl + e.cfg.slack
		return o
	}}
}

// restartCascadeFault (extra): two nodes down, so every lock lives on the other three;
// then one of those three is killed too and all three come back empty at once. Without
// the quarantine, the three empty nodes would be a quorum that grants every key again
// while its holders (on the two untouched nodes and the forgotten one) still run.
func restartCascadeFault(a, b, c int) fault {
	return fault{name: fmt.Sprintf("2b restart cascade node%d+%d, then node%d", a, b, c), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		killAll(e, &o, a, b)
		// Long enough for every hot key to be taken (or renewed) on the three left.
		sleep(ctx, e.cfg.ttl+e.cfg.slack)
		seen := quarantineLines(e, a, b, c)
		killAll(e, &o, c)
		startAll(e, &o, a, b, c)
		o.end = time.Now()
		o.notef("node%d+node%d down %v, then node%d killed and all three restarted empty", a, b, o.end.Sub(o.start).Round(time.Millisecond), c)
		checkQuarantine(ctx, e, &o, seen, a, b, c)
		o.waitAfter = e.cfg.ttl + e.cfg.slack
		return o
	}}
}

func killAll(e *env, o *outcome, idx ...int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, i := range idx {
		wg.Go(func() {
			if err := e.cl.servers[i].Kill(); err != nil {
				mu.Lock()
				o.failf("kill node%d: %v", i, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func startAll(e *env, o *outcome, idx ...int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, i := range idx {
		wg.Go(func() {
			if err := e.cl.servers[i].Start(); err != nil {
				mu.Lock()
				o.failf("start node%d: %v", i, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// quarantineLines counts, per instance and node, the log lines that say the node was
// quarantined after a restart.
func quarantineLines(e *env, idx ...int) map[[2]int]int {
	m := map[[2]int]int{}
	for _, in := range e.insts {
		for _, i := range idx {
			m[[2]int{in.inst, i}] = len(in.logLines("quarantine", `"`+e.cl.addrSeenByCaddy(i)+`"`))
		}
	}
	return m
}

// checkQuarantine waits (up to 3 health intervals) until every instance logged the
// quarantine of every restarted node: an instance that did not notice a restart would let
// an empty node vote at once.
func checkQuarantine(ctx context.Context, e *env, o *outcome, before map[[2]int]int, idx ...int) {
	start := time.Now()
	deadline := start.Add(3 * time.Second)
	var missing []string
	for {
		missing = missing[:0]
		now := quarantineLines(e, idx...)
		for k, n := range before {
			if now[k] <= n {
				missing = append(missing, fmt.Sprintf("caddy%d/node%d", k[0], k[1]))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	if len(missing) > 0 {
		o.failf("restart not noticed (no quarantine logged) by %s within 3s", strings.Join(missing, ", "))
		return
	}
	o.notef("quarantine logged by %d/%d instances for %d node(s) within %v", len(e.insts), len(e.insts), len(idx), time.Since(start).Round(10*time.Millisecond))
}
