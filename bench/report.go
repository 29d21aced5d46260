package main

import (
	"fmt"
	"io"
	"strings"
)

// tables renders the results as the tables printed and written to results.md.
func (r *results) tables() []*table {
	var ts []*table
	if len(r.Floor)+len(r.Lock) > 0 {
		t := &table{title: "1-2. Floor and lock cost (library level, unique keys)",
			head: []string{"measure", "p50", "p99", "acquire p50", "acquire p99", "release p50", "samples", "errors"}}
		for _, x := range append(append([]latRow{}, r.Floor...), r.Lock...) {
			a, ap, rl := "", "", ""
			if x.Acquire != nil {
				a, ap, rl = fus(x.Acquire.P50), fus(x.Acquire.P99), fus(x.Release.P50)
			}
			t.add(x.Name, fus(x.Lat.P50), fus(x.Lat.P99), a, ap, rl, fmt.Sprint(x.Lat.N), fmt.Sprint(x.Errors))
		}
		ts = append(ts, t)
	}
	if len(r.Overhead) > 0 {
		t := &table{title: fmt.Sprintf("3. Through the proxy, unique keys (%d clients, no upstream hold)", r.Settings.Clients),
			head: []string{"front end", "req/s", "vs plain", "p50", "p99", "front-end CPU/req", "Redis CPU/req", "box CPU/req", "cores busy", "errors", "viol"},
			notes: []string{"vs plain: Caddy rows against plain Caddy reverse_proxy, Go rows against the plain httputil proxy.",
				"CPU/req: CPU time of the front-end process and of all 5 redis-servers during the run, per request (the box has 2 cores).",
				"box CPU/req: all CPU time used on the machine (/proc/stat: load generator, upstream and kernel included), per request; cores busy: its average."}}
		for _, x := range r.Overhead {
			t.add(x.Name, fmt.Sprintf("%.0f", x.RPS), fmt.Sprintf("%.0f%%", 100*x.Ratio), fus(x.Lat.P50), fus(x.Lat.P99),
				fus(x.FrontCPU), fus(x.RedisCPU), fus(x.BoxCPU), fmt.Sprintf("%.2f", x.Busy), fmt.Sprint(x.Errors), fmt.Sprint(x.Violations))
		}
		ts = append(ts, t)
	}
	if t := r.cpuCostTable(); len(t.rows) > 0 {
		ts = append(ts, t)
	}
	if len(r.Hot) > 0 {
		t := &table{title: fmt.Sprintf("4. Hot key: one key, upstream holds %v, %d clients over 2 instances, N=5",
			r.Settings.Hold, r.Settings.HotClients),
			head: []string{"front end", "req/s", "of ideal", "key busy", "gap/handoff", "p50", "p99", "max", "per instance", "client min-max",
				"overtaken", "overtaken p99/max", "errors", "viol"},
			notes: []string{"ideal = 1/hold; key busy = time the upstream held the key / window (its 2 ms sleeps overshoot on a busy box);",
				"gap/handoff = time per request the key was NOT held at the upstream: proxy hops + release + next acquire.",
				"overtaken: share of requests that a later-sent request of the same instance (by > 1 ms) passed; FIFO gives 0."}}
		for _, x := range r.Hot {
			t.add(x.Name, fmt.Sprintf("%.0f", x.RPS), fmt.Sprintf("%.0f%%", 100*x.OfIdeal), fmt.Sprintf("%.0f%%", 100*x.KeyBusy), fus(x.Gap),
				fus(x.Lat.P50), fus(x.Lat.P99), fus(x.Lat.Max), joinInts(x.PerInstance, ":"),
				fmt.Sprintf("%d-%d", x.ClientMin, x.ClientMax), fmt.Sprintf("%.0f%%", 100*x.Overtaken.Fraction),
				fmt.Sprintf("%d/%d", x.Overtaken.P99, x.Overtaken.Max), fmt.Sprint(x.Errors), fmt.Sprint(x.Violations))
		}
		ts = append(ts, t)
	}
	if len(r.FaultyHot) > 0 {
		t := &table{title: fmt.Sprintf("4c. Hot key with a faulty minority node: as 4 (hold %v, %d clients over 2 instances, N=5), node 5 paused or slow for the whole window",
			r.Settings.Hold, r.Settings.HotClients),
			head: []string{"front end, node 5", "req/s", "vs all up", "of ideal", "key busy", "gap/handoff", "p50", "p99", "max",
				"per instance", "client min-max", "overtaken", "errors", "viol"},
			notes: []string{"paused: SIGSTOP for the whole window (resumed after it); slow: every reply of node 5 delayed " + slowLatency.String() +
				" (3× node_timeout) by toxiproxy in front of it.",
				"vs all up: req/s over the same front end's all-up row of this run (alternated windows; each after a " +
					r.Settings.Warmup.String() + " lead-in under the fault). The Caddy sites of this phase reach node 5 through the proxy."}}
		for _, x := range r.FaultyHot {
			t.add(x.Name, fmt.Sprintf("%.0f", x.RPS), fmt.Sprintf("%.2f×", x.Ratio), fmt.Sprintf("%.0f%%", 100*x.OfIdeal),
				fmt.Sprintf("%.0f%%", 100*x.KeyBusy), fus(x.Gap), fus(x.Lat.P50), fus(x.Lat.P99), fus(x.Lat.Max),
				joinInts(x.PerInstance, ":"), fmt.Sprintf("%d-%d", x.ClientMin, x.ClientMax), fmt.Sprintf("%.0f%%", 100*x.Overtaken.Fraction),
				fmt.Sprint(x.Errors), fmt.Sprint(x.Violations))
		}
		ts = append(ts, t)
	}
	if len(r.HotLib) > 0 {
		t := &table{title: fmt.Sprintf("4b. Hot key at library level: 2 clients × 8 workers, hold %v, N=5 (no HTTP)", r.Settings.Hold),
			head: []string{"client", "holds/s", "of ideal", "key busy", "wait p50", "wait p99", "wait max", "per client", "errors", "viol"}}
		for _, x := range r.HotLib {
			t.add(x.Name, fmt.Sprintf("%.0f", x.PerSec), fmt.Sprintf("%.0f%%", 100*x.OfIdeal), fmt.Sprintf("%.0f%%", 100*x.KeyBusy), fus(x.Wait.P50), fus(x.Wait.P99),
				fus(x.Wait.Max), joinInts(x.PerClient, ":"), fmt.Sprint(x.Errors), fmt.Sprint(x.Violations))
		}
		ts = append(ts, t)
	}
	if t := r.commandsTable(); len(t.rows) > 0 {
		ts = append(ts, t)
	}
	if len(r.Modes) > 0 {
		ts = append(ts, r.modesTable())
	}
	if len(r.ModeMix) > 0 {
		ts = append(ts, r.modeMixTable())
	}
	if len(r.FenceMem) > 0 {
		ts = append(ts, r.fenceMemTable())
	}
	if len(r.SeqCost) > 0 {
		ts = append(ts, r.seqCostTable())
	}
	if len(r.Waiters) > 0 {
		t := &table{title: "6. Waiting requests: many requests queued behind held keys",
			head: []string{"front end", "waiters/keys", "RSS base→held→waiting", "RSS/waiter", "heap+stack/waiter",
				"goroutines base→held→waiting", "goroutines/waiter", "Redis cmds/s waiting (network/all)", "CPU waiting",
				"drained", "drain/s", "cut", "errors", "viol", "goroutines after"},
			notes: []string{"per waiter: (waiting − held) / waiters. A waiting HTTP/1.1 request costs net/http 2 goroutines (conn + background read).",
				"Redis cmds/s and CPU: over a window longer than one renewal period (ttl/3), the holders' renewals included.",
				"drained: waiters served after the keys were released; cut: still waiting at the drain limit (then cancelled)."}}
		for _, x := range r.Waiters {
			mib := func(b int64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }
			t.add(x.Name, fmt.Sprintf("%d/%d", x.Waiters, x.Keys),
				fmt.Sprintf("%s→%s→%s MiB", mib(x.Base.RSS), mib(x.Held.RSS), mib(x.Waiting.RSS)),
				fbytes(x.RSSPerWaiter), fbytes(x.HeapPerWaiter),
				fmt.Sprintf("%d→%d→%d", x.Base.Goroutines, x.Held.Goroutines, x.Waiting.Goroutines),
				fmt.Sprintf("%.2f", x.GoroutinesPerWaiter), fmt.Sprintf("%.0f / %.0f", x.Cmds.TopLevel, x.CmdsPerSecWaiting),
				fmt.Sprintf("%.0f%%", 100*x.CPUWaiting),
				fmt.Sprintf("%d in %.1fs", x.Drained, x.DrainSec), fmt.Sprintf("%.0f", x.DrainPerSec),
				fmt.Sprint(x.DrainCut), fmt.Sprint(x.EarlyErrors+x.DrainErrors), fmt.Sprint(x.Violations), fmt.Sprint(x.GoroutinesAfter))
		}
		ts = append(ts, t)
	}
	if len(r.Targets) > 0 {
		t := &table{title: "Targets of issues 6, 13, 16 and 32", head: []string{"target", "this run", "met"}, left: true}
		for _, c := range r.Targets {
			m := "not measured"
			if c.Met != nil {
				m = map[bool]string{true: "yes", false: "NO"}[*c.Met]
			}
			t.add(c.Target, c.Value, m)
		}
		ts = append(ts, t)
	}
	return ts
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

// printText writes the terminal report.
func (r *results) printText(w io.Writer) {
	for _, t := range r.tables() {
		t.text(w)
	}
	r.footer(w, "")
}

// writeMarkdown writes results.md.
func (r *results) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "# Benchmark results\n\n`%s` — %s, %d CPUs, %s, %s, %.0f s.\n",
		r.Command, r.Started.Format("2006-01-02 15:04 MST"), r.Host.CPUs, r.Host.GoVersion, r.Host.Redis, r.Seconds)
	for _, t := range r.tables() {
		t.markdown(w)
	}
	r.footer(w, "- ")
}

func (r *results) footer(w io.Writer, bullet string) {
	fmt.Fprintln(w)
	if r.Violations > 0 {
		fmt.Fprintf(w, "%sMUTUAL EXCLUSION VIOLATIONS: %d\n", bullet, r.Violations)
		for _, v := range r.ViolLog {
			fmt.Fprintf(w, "%s  VIOLATION %s\n", bullet, v)
		}
	} else {
		fmt.Fprintf(w, "%sviolations: none (neither the upstream nor the library holders ever saw two holders of one key at once)\n", bullet)
	}
	if len(r.Background) > 0 {
		fmt.Fprintf(w, "%sother processes' CPU during each phase: %s\n", bullet, strings.Join(r.Background, "; "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "%snote: %s\n", bullet, n)
	}
	for _, l := range r.LogProblems {
		fmt.Fprintf(w, "%slog: %s\n", bullet, l)
	}
	for _, p := range r.Pending {
		fmt.Fprintf(w, "%sPENDING: %s\n", bullet, p)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "%sERROR: %s\n", bullet, e)
	}
	for _, p := range r.Profiles {
		fmt.Fprintf(w, "%sprofile: %s\n", bullet, p)
	}
}

// commandsTable is item 5: Redis commands per locked request, uncontended and hot.
func (r *results) commandsTable() *table {
	t := &table{title: "5. Redis commands per locked request (INFO commandstats, all nodes; CONFIG RESETSTAT before each run)",
		head: []string{"front end", "load", "network cmds/req", "cmds per Redis read", "all commands Redis ran, per request"}, left: true,
		notes: []string{"network: commands sent by the client (the ones Lua scripts run inside Redis left out); INFO (health checks) and CONFIG left out.",
			"cmds per Redis read: network commands per socket read on the nodes (INFO total_reads_processed): how deep the pipelines were."}}
	for _, x := range r.Overhead {
		if x.Cmds.Requests > 0 {
			t.add(x.Name, "unique keys", fmt.Sprintf("%.2f", x.Cmds.TopLevel), x.Cmds.depth(), x.Cmds.short())
		}
	}
	for _, x := range r.Hot {
		if x.Cmds.Requests > 0 {
			t.add(x.Name, "hot key", fmt.Sprintf("%.2f", x.Cmds.TopLevel), x.Cmds.depth(), x.Cmds.short())
		}
	}
	for _, x := range r.Waiters {
		t.add(x.Name, fmt.Sprintf("%d waiting (per second)", x.Waiters), fmt.Sprintf("%.1f/s", x.Cmds.TopLevel), "", x.Cmds.short())
	}
	return t
}
