package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// runSuite starts the system, runs every fault under load and tears everything down. It
// returns the per-fault summaries and the failures of the final checks; err is for a
// system that could not be set up at all.
func runSuite(ctx context.Context, cfg config, bin, work, only string, logf func(string, ...any)) (_ []summary, final []string, err error) {
	pauses := newPauseLog()
	led := newLedger(true, pauses, cfg.staleSpan())
	up, err := startUpstream(led, cfg.faultHold+2*cfg.ttl+5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer up.close()

	cl, err := startCluster(cfg.nodes, cfg.proxied)
	if err != nil {
		return nil, nil, err
	}
	defer cl.stop()
	for i := range cfg.nodes {
		logf("%s", cl.name(i))
	}
	kp := newKeyProbe(cl, "chaos:", logf)
	defer kp.close()
	led.onBreach = kp.probe
	if cfg.monitor {
		mctx, mcancel := context.WithCancel(ctx)
		wait := monitor(mctx, cl, work)
		defer func() { mcancel(); wait() }()
	}

	insts, err := startInstances(cfg, bin, work, cl.urls(), up.addr)
	defer func() {
		var wg sync.WaitGroup
		for _, in := range insts {
			wg.Go(func() { in.proc.Stop(5 * time.Second) })
		}
		wg.Wait()
	}()
	if err != nil {
		return nil, nil, err
	}
	for _, in := range insts {
		logf("caddy%d: pid %d, %s, admin %s, log %s", in.inst, in.proc.PID(), in.url(), in.admin(), in.logPath)
	}

	rec := &recorder{}
	ld := newLoad(cfg, insts, rec)
	e := &env{cfg: cfg, cl: cl, insts: insts, led: led, pauses: pauses, rec: rec, ld: ld, hot: hotKeys(cfg.hotKeys), logf: logf}
	ld.start(ctx)
	loadStopped := false
	defer func() {
		if !loadStopped {
			ld.stop()
		}
	}()

	var summaries []summary
	phases := []fault{steadyFault()}
	for r := range cfg.rounds {
		for _, f := range faultList(cfg, r) {
			if r > 0 {
				f.name = strings.Replace(f.name, " ", fmt.Sprintf(" [round %d] ", r+1), 1)
			}
			phases = append(phases, f)
		}
	}
	for _, f := range phases {
		if !selected(only, f.name) && f.name != phases[0].name {
			continue
		}
		if ctx.Err() != nil {
			final = append(final, fmt.Sprintf("run deadline (%v) reached or interrupted before %q", cfg.deadline, f.name))
			break
		}
		s := runPhase(ctx, e, f)
		printSummary(os.Stdout, s)
		summaries = append(summaries, s)
	}

	logf("stopping the load")
	ld.stop()
	loadStopped = true
	final = append(final, finalChecks(ctx, e, up)...)
	for _, f := range led.failureLog() {
		logf("ledger: %s", f)
	}
	return summaries, final, nil
}

func startInstances(cfg config, bin, work string, urls []string, upstreamAddr string) ([]*instance, error) {
	var insts []*instance
	for i := range cfg.instances {
		level := "INFO"
		if cfg.debug {
			level = "DEBUG"
		}
		in, err := startInstance(bin, work, site{inst: i, urls: urls, upstream: upstreamAddr,
			ttl: cfg.ttl, wait: cfg.wait, nodeTimeout: cfg.nodeTimeout, logLevel: level})
		if err != nil {
			return insts, err
		}
		insts = append(insts, in)
	}
	return insts, nil
}

// finalChecks run after the load stopped: nothing left inside the upstream, no lock key
// left in Redis (or without expiry), no Caddy crash or panic.
func finalChecks(ctx context.Context, e *env, up *upstream) []string {
	var out []string
	// Aborted requests keep their lock for one more ttl (draining); stale streams wait
	// for their cancellation.
	deadline := time.Now().Add(up.staleWait + e.cfg.ttl)
	for e.led.insideCount() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 50*time.Millisecond)
	}
	if n := e.led.insideCount(); n > 0 {
		out = append(out, fmt.Sprintf("%d requests still inside the upstream after the load stopped", n))
	}
	sleep(ctx, 3*e.cfg.ttl)
	total, noExpiry, err := e.cl.lockKeys("chaos:")
	switch {
	case err != nil:
		out = append(out, err.Error())
	case noExpiry > 0:
		out = append(out, fmt.Sprintf("%d lock keys without an expiry in Redis", noExpiry))
	case total > 0:
		out = append(out, fmt.Sprintf("%d lock keys left in Redis %v after the load stopped", total, 3*e.cfg.ttl))
	}
	// Totals over the whole run, the load's start and stop included (a phase only counts
	// what happened during it).
	c := e.led.snapshot()
	if c.bad() > 0 {
		out = append(out, fmt.Sprintf("over the whole run: %d violations, %d token regressions, %d unlocked, %d stale streams never cancelled, %d wrong locks",
			c.Violations, c.Regressions, c.Unlocked, c.StaleNotCanceled, c.Mismatched))
	}
	out = append(out, modeChecks(e)...)
	for _, in := range e.insts {
		if in.proc.Exited() {
			out = append(out, fmt.Sprintf("caddy%d exited during the run: %v", in.inst, in.proc.Err()))
		}
		for _, f := range []string{in.logPath, filepath.Join(in.dir, "stderr.log")} {
			b, _ := os.ReadFile(f)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "panic") {
					out = append(out, fmt.Sprintf("caddy%d logged a panic: %s", in.inst, trunc(line, 300)))
					break
				}
			}
		}
	}
	return out
}
