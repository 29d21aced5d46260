package main

import (
	"context"
	"fmt"
	"time"
)

// Faults on the Caddy side: a whole instance paused while it holds a lock mid-stream,
// and config reloads under load.

// pauseCaddyFault: instance v holds a hot key mid-stream (a probe stream of the runner)
// when it is stopped (SIGSTOP) for longer than the ttl. Its lock lapses, another
// instance takes the key with a higher token, and the upstream rejects every further
// write of the sleeper (stale, rejected by fencing). Once resumed, v must find its lock
// gone and cancel the stream within a ttl.
func pauseCaddyFault(v int) fault {
	return fault{name: fmt.Sprintf("5 caddy%d paused mid-stream > ttl", v), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		key := e.hot[0]
		hold := max(e.cfg.faultHold, 2*e.cfg.ttl+e.cfg.slack)
		var (
			id   string
			done <-chan result
			err  error
		)
		for try := 0; try < 5 && ctx.Err() == nil; try++ {
			id, done, err = e.ld.probeStream(ctx, v, key, hold+10*time.Second)
			if err == nil {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
		if err != nil {
			o.failf("could not start a stream through caddy%d: %v", v, err)
			return o
		}
		in := e.insts[v]
		o.start = time.Now()
		e.pauses.begin(v, o.start)
		if err := in.pause(); err != nil {
			o.failf("SIGSTOP caddy%d: %v", v, err)
		}
		sleep(ctx, hold)
		if err := in.resume(); err != nil {
			o.failf("SIGCONT caddy%d: %v", v, err)
		}
		resumed := time.Now()
		e.pauses.end(v, resumed)
		o.end = resumed
		o.notef("caddy%d paused %v holding %s mid-stream (probe %s)", v, resumed.Sub(o.start).Round(time.Millisecond), key, id)

		// The stream must end, cut short, soon after the resume.
		bound := e.cfg.ttl + e.cfg.slack
		var res result
		t := time.NewTimer(bound + 5*time.Second)
		select {
		case res = <-done:
		case <-t.C:
			o.failf("the paused instance's stream still ran %v after the resume", bound+5*time.Second)
		case <-ctx.Done():
		}
		t.Stop()
		if res.complete {
			o.failf("the paused instance's stream ran to its end after its lock lapsed")
		}
		// The upstream notices the cancellation a moment after the client sees the cut.
		pv, ok := e.led.probeVisit(id)
		for wait := time.Now().Add(time.Second); ok && pv.cancelAt.IsZero() && time.Now().Before(wait); {
			sleep(ctx, 20*time.Millisecond)
			pv, ok = e.led.probeVisit(id)
		}
		switch {
		case !ok:
			o.failf("probe %s never reached the upstream", id)
		case pv.cancelAt.IsZero():
			// Not cancelled yet: the upstream waits for it (StaleNotCanceled counts a miss).
			o.failf("probe %s was not cancelled at the upstream by the time the client saw its end", id)
		case pv.cancelAt.Sub(resumed) > bound:
			o.failf("probe %s cancelled %v after the resume, later than ttl + slack (%v)", id, pv.cancelAt.Sub(resumed).Round(time.Millisecond), bound)
		default:
			how := "no other holder wrote meanwhile"
			if !pv.rejectedAt.IsZero() {
				how = fmt.Sprintf("its writes were rejected by fencing from %v into the pause", pv.rejectedAt.Sub(o.start).Round(time.Millisecond))
			}
			o.notef("probe cancelled %v after the resume; %s", pv.cancelAt.Sub(resumed).Round(time.Millisecond), how)
		}
		stale := e.led.staleSince(v, o.start.Add(-e.cfg.staleSpan()))
		cancelled := 0
		for _, s := range stale {
			if !s.cancelAt.IsZero() {
				cancelled++
			}
		}
		o.notef("requests of caddy%d superseded while it slept: %d, cancelled: %d", v, len(stale), cancelled)
		return o
	}}
}

// reloadFault: every instance reloads its config (POST /load, as `caddy reload`) several
// times under load, switching node_timeout so each reload builds a new locker while the
// old one still serves its last requests.
func reloadFault(n int) fault {
	return fault{name: fmt.Sprintf("7 config reloads x%d under load", n), run: func(ctx context.Context, e *env) outcome {
		var o outcome
		o.start = time.Now()
		ok := 0
		for r := 0; r < n && ctx.Err() == nil; r++ {
			for _, in := range e.insts {
				nt := e.cfg.altTimeout
				if in.nodeTimeout == e.cfg.altTimeout {
					nt = e.cfg.nodeTimeout
				}
				if err := in.reload(ctx, nt); err != nil {
					o.failf("reload %d: %v", r, err)
					continue
				}
				ok++
			}
			sleep(ctx, 600*time.Millisecond)
		}
		o.end = time.Now()
		o.notef("%d of %d reloads accepted (node_timeout %v <-> %v: a new locker each time)", ok, n*len(e.insts), e.cfg.nodeTimeout, e.cfg.altTimeout)
		return o
	}}
}
