package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// env is everything a fault can act on.
type env struct {
	cfg    config
	cl     *cluster
	insts  []*instance
	led    *ledger
	pauses *pauseLog
	rec    *recorder
	ld     *load
	hot    []string
	logf   func(format string, args ...any)
}

// fault is one injected failure: run injects it while the load runs, holds it, undoes it
// and says when it ended.
type fault struct {
	name string
	run  func(ctx context.Context, e *env) outcome
}

// outcome is what a fault reports to its phase.
type outcome struct {
	start, end time.Time // injected, undone
	notes      []string  // figures specific to the fault
	failures   []string  // checks of the fault that did not hold
	waitAfter  time.Duration
}

func (o *outcome) notef(format string, args ...any) {
	o.notes = append(o.notes, fmt.Sprintf(format, args...))
}
func (o *outcome) failf(format string, args ...any) {
	o.failures = append(o.failures, fmt.Sprintf(format, args...))
}

// summary is one fault's figures.
type summary struct {
	name        string
	requests    int
	statuses    map[int]int
	streams     int
	streamsFull int
	c           counters
	lost        int           // "lock lost" lines in the Caddy logs
	p50, p99    time.Duration // latency of the 200s
	recovery    time.Duration
	recovered   bool
	measured    bool // recovery is measured (not for the steady phase)
	duration    time.Duration
	notes       []string
	failures    []string
}

func (s summary) ok() bool { return len(s.failures) == 0 }

// runPhase runs one fault under load and measures it: requests started from the phase's
// start until the end of its recovery (or recoverMax), the ledger's counters over that
// time, and the time from the fault's end until every hot key served a request again.
func runPhase(ctx context.Context, e *env, f fault) summary {
	start := time.Now()
	before := e.led.snapshot()
	lostBefore := countLost(e.insts)
	e.logf("%s: start", f.name)

	out := f.run(ctx, e)
	s := summary{name: f.name, measured: !out.end.IsZero(), notes: out.notes, failures: out.failures}
	if s.measured {
		deadline := out.end.Add(e.cfg.recoverMax)
		for {
			if at, ok := e.rec.recovered(out.end, e.hot); ok {
				s.recovered, s.recovery = true, at.Sub(out.end)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			sleep(ctx, 50*time.Millisecond)
		}
		if !s.recovered {
			s.failures = append(s.failures, fmt.Sprintf("hot keys did not all serve a request within %v of the fault's end", e.cfg.recoverMax))
		}
	}
	sleep(ctx, max(e.cfg.settle, out.waitAfter))
	end := time.Now()

	rs := e.rec.between(start, end)
	s.requests = len(rs)
	s.statuses = statusCounts(rs)
	ok := latencies(rs, func(r result) bool { return r.status == 200 && r.hot }) // the modes' requests hold otherwise
	s.notes = append(s.notes, modeNote(rs))
	s.p50, s.p99 = pct(ok, 50), pct(ok, 99)
	for _, r := range rs {
		if r.stream {
			s.streams++
			if r.complete {
				s.streamsFull++
			}
		}
	}
	if !s.measured {
		s.failures = append(s.failures, waitedOut(rs)...)
	}
	s.c = e.led.snapshot().sub(before)
	s.lost = countLost(e.insts) - lostBefore
	s.duration = end.Sub(start)
	if s.c.Violations > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%d mutual-exclusion violations", s.c.Violations))
	}
	if s.c.Regressions > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%d fencing-token regressions", s.c.Regressions))
	}
	if s.c.Unlocked > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%d requests or stream writes without a valid lock", s.c.Unlocked))
	}
	if s.c.Mismatched > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%d requests held another lock (mode or keys) than their route asks for", s.c.Mismatched))
	}
	if s.c.StaleNotCanceled > 0 {
		s.failures = append(s.failures, fmt.Sprintf("%d stale streams never cancelled", s.c.StaleNotCanceled))
	}
	if err := e.healthy(); err != nil {
		s.failures = append(s.failures, err.Error())
	}
	return s
}

// healthy checks that every Caddy instance still runs and brings the nodes back to a
// clean state for the next fault.
func (e *env) healthy() error {
	var errs []string
	for _, in := range e.insts {
		if in.proc.Exited() {
			errs = append(errs, fmt.Sprintf("caddy%d exited: %v", in.inst, in.proc.Err()))
		}
	}
	if err := e.cl.restoreAll(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// countLost counts "lock lost" log lines over all instances.
func countLost(insts []*instance) int {
	n := 0
	for _, in := range insts {
		n += len(in.logLines("lock lost"))
	}
	return n
}

// steadyFault is no fault: the baseline under load.
func steadyFault() fault {
	return fault{name: "0 steady load, no fault", run: func(ctx context.Context, e *env) outcome {
		sleep(ctx, e.cfg.steady)
		return outcome{}
	}}
}
