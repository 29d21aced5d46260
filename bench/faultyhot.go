package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"
)

// Issue 16, item 4: a slow or paused minority node must not throttle a hot key. The
// faulty-node hot-key phase ("faultyhot") runs the hot-key load (same clients, hold and
// two instances as item 4) on one node set with one of the 5 nodes healthy, paused
// (SIGSTOP) or slow (every reply delayed 3× node_timeout by toxiproxy), alternated, and
// reports each faulty row against the all-up row of the same front end in the same run.

// The faults.
const (
	faultNone   = "all nodes up"
	faultPaused = "1 of 5 paused"
	faultSlow   = "1 of 5 slow"
)

// slowLatency is the slow node's reply delay: 3× the plugin's default node_timeout (100ms).
const slowLatency = 300 * time.Millisecond

// faultyVariant is one front end under one fault; base is the index of the same front
// end's all-up variant.
type faultyVariant struct {
	httpVariant
	fault string
	base  int
}

// faultyRow is one result of the phase; the hot-key columns plus the ratio to all-up.
type faultyRow struct {
	hotRow
	Fault string  `json:"fault"`
	AllUp float64 `json:"all_up_requests_per_s"` // RPS of the same front end with all nodes up
	Ratio float64 `json:"ratio_to_all_up"`       // RPS / AllUp
}

// faultEnv is what the phase breaks: the faulty node (paused) and the proxy in front of
// it that the Caddy sites of this phase use (slow). proxy is nil when it did not start.
type faultEnv struct {
	node  *redisNode
	proxy *slowProxy
}

// faultyVariants adds the three faults for one front end (its targets) to vs; slow only
// when its sites reach the faulty node through the proxy.
func faultyVariants(vs []faultyVariant, v httpVariant, slow bool) []faultyVariant {
	base := len(vs)
	faults := []string{faultNone, faultPaused}
	if slow {
		faults = append(faults, faultSlow)
	}
	for _, f := range faults {
		w := v
		w.name = v.name + ", " + f
		vs = append(vs, faultyVariant{httpVariant: w, fault: f, base: base})
	}
	return vs
}

// apply starts the fault; undo (never nil) ends it: the node is resumed and answers
// again, the toxic is removed. The caller defers undo at once.
func (e *faultEnv) apply(fault string) (undo func(), err error) {
	switch fault {
	case faultPaused:
		if err := e.node.proc.Signal(syscall.SIGSTOP); err != nil {
			return func() {}, fmt.Errorf("pause node: %w", err)
		}
		return e.resume, nil
	case faultSlow:
		if e.proxy == nil {
			return func() {}, fmt.Errorf("no proxy in front of the slow node")
		}
		return e.proxy.clear, e.proxy.slow(slowLatency)
	}
	return func() {}, nil
}

// resume sends SIGCONT and waits (bounded) until the node answers a PING.
func (e *faultEnv) resume() {
	if err := e.node.proc.Signal(syscall.SIGCONT); err != nil {
		notef("resume node: %v", err)
		return
	}
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := e.node.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	notef("node %s did not answer for 10s after SIGCONT", e.node.addr())
}

// measureFaultyHot runs the variants alternated. Each window: the fault starts, a lead-in
// of cfg.Warmup under the fault (not counted: the window measures the steady state), the
// window of cfg.FaultyDur, then the fault ends (also on a panic). No Redis command
// counts: a paused node does not answer INFO.
func measureFaultyHot(vs []faultyVariant, up *upstream, env *faultEnv, cfg config) ([]faultyRow, error) {
	results := make([]loadResult, len(vs))
	viol := make([]int64, len(vs))
	busy := make([]time.Duration, len(vs))
	overtakes := make([][]int, len(vs))
	hold := cfg.Hold.String()
	spec := func(i, round int, d time.Duration) loadSpec {
		key := fmt.Sprintf("faulty%d-%d", i, round)
		return loadSpec{Clients: cmp.Or(vs[i].clients, cfg.HotClients), Duration: d, Targets: vs[i].targets, Stamp: true,
			// Caddy's requests end within a few node timeouts even under the fault; the
			// redsync proxy's waiters under a paused node take up to its 30s wait: cut
			// them (counted as errors) rather than let the phase drag on.
			Drain: 10 * time.Second,
			Path:  func(int, int) string { return "/r/" + key + "?hold=" + hold }}
	}
	for i := range vs {
		if vs[i].fault != faultNone {
			continue
		}
		if w := runLoad(spec(i, -1, cfg.Warmup)); w.errors() > 0 {
			notef("%s: warm-up run had %d failed requests %v", vs[i].name, w.errors(), w.Status)
		}
	}
	var firstErr error
	alternate(cfg.HotRounds, len(vs), func(i, round int) {
		v0, _ := up.violationCount()
		defer func() {
			v1, _ := up.violationCount()
			viol[i] += v1 - v0
		}()
		undo, err := env.apply(vs[i].fault)
		defer undo()
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", vs[i].name, err)
			}
			return
		}
		lead := spec(i, round, cfg.Warmup)
		lead.Drain = 3 * time.Second // not measured: cut what the fault holds up
		if w := runLoad(lead); w.errors() > 0 {
			notef("%s round %d: lead-in had %d failed requests %v", vs[i].name, round+1, w.errors(), w.Status)
		}
		up.takeBusy()
		up.record(true)
		r := runLoad(spec(i, round, cfg.FaultyDur))
		entries := up.record(false)
		busy[i] += up.takeBusy()
		results[i].merge(r)
		overtakes[i] = append(overtakes[i], overtakeCounts(entries, len(vs[i].targets))...)
		progress("  %-48s round %d: %5.0f req/s, served per instance %v\n", vs[i].name, round+1, r.rps(), r.PerTarget)
	})
	rows := make([]faultyRow, len(vs))
	for i, v := range vs {
		r := results[i]
		ideal := 1 / cfg.Hold.Seconds()
		row := hotRow{Name: v.name, RPS: r.rps(), Ideal: ideal, OfIdeal: r.rps() / ideal, Lat: summarize(r.Lat),
			PerInstance: r.PerTarget, Overtaken: summarizeOvertakes(overtakes[i]), Errors: r.errors(), Violations: viol[i]}
		if r.Window > 0 {
			row.KeyBusy = busy[i].Seconds() / r.Window.Seconds()
			row.Gap = perRequest(r.Window-busy[i], r.OK)
		}
		if len(r.PerClient) > 0 {
			row.ClientMin, row.ClientMax = slices.Min(r.PerClient), slices.Max(r.PerClient)
		}
		rows[i] = faultyRow{hotRow: row, Fault: v.fault}
	}
	for i, v := range vs {
		if b := rows[v.base].RPS; b > 0 {
			rows[i].AllUp, rows[i].Ratio = b, rows[i].RPS/b
		}
	}
	return rows, firstErr
}
