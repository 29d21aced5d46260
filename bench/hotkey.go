package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// hotRow is one hot-key result: every request on one key, spread over two instances.
type hotRow struct {
	Name        string   `json:"name"`
	RPS         float64  `json:"requests_per_s"`
	Ideal       float64  `json:"ideal_per_s"` // 1 / hold
	OfIdeal     float64  `json:"fraction_of_ideal"`
	KeyBusy     float64  `json:"key_busy_fraction"`  // time the upstream held the key / window
	Gap         float64  `json:"gap_us_per_handoff"` // time the key was not held at the upstream, per request
	Lat         latency  `json:"latency"`
	PerInstance []int    `json:"served_per_instance"`
	ClientMin   int      `json:"client_min"`
	ClientMax   int      `json:"client_max"`
	Overtaken   overtake `json:"overtaken"`
	Errors      int      `json:"errors"`
	Violations  int64    `json:"violations"`
	Cmds        cmdCount `json:"redis_commands"`
}

// overtake measures arrival order within one instance: a request is overtaken by each
// request to the same instance that was sent more than 1ms after it but entered the
// upstream before it. FIFO waiters give 0.
type overtake struct {
	Fraction float64 `json:"fraction_overtaken"` // of requests overtaken at least once
	P99      int     `json:"p99"`
	Max      int     `json:"max"`
}

func measureHot(vs []httpVariant, up *upstream, nodes []*redisNode, cfg config) ([]hotRow, error) {
	results := make([]loadResult, len(vs))
	cmds := make([]map[string]int64, len(vs))
	viol := make([]int64, len(vs))
	busy := make([]time.Duration, len(vs))
	overtakes := make([][]int, len(vs))
	for i := range vs {
		cmds[i] = map[string]int64{}
	}
	hold := cfg.Hold.String()
	spec := func(i, round int, d time.Duration) loadSpec {
		key := fmt.Sprintf("hot%d-%d", i, round)
		return loadSpec{Clients: cmp.Or(vs[i].clients, cfg.HotClients), Duration: d, Targets: vs[i].targets, Stamp: true,
			Drain: 35 * time.Second,
			Path:  func(int, int) string { return "/r/" + key + "?hold=" + hold }}
	}
	for i := range vs {
		if w := runLoad(spec(i, -1, cfg.Warmup)); w.errors() > 0 {
			notef("%s: warm-up run had %d failed requests %v", vs[i].name, w.errors(), w.Status)
		}
	}
	var firstErr error
	alternate(cfg.HotRounds, len(vs), func(i, round int) {
		if err := resetStats(nodes); err != nil && firstErr == nil {
			firstErr = err
		}
		v0, _ := up.violationCount()
		up.takeBusy()
		up.record(true)
		r := runLoad(spec(i, round, cfg.HotDur))
		entries := up.record(false)
		busy[i] += up.takeBusy()
		v1, _ := up.violationCount()
		viol[i] += v1 - v0
		c, err := commandStats(nodes)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		addCounts(cmds[i], c)
		results[i].merge(r)
		overtakes[i] = append(overtakes[i], overtakeCounts(entries, len(vs[i].targets))...)
		progress("  %-28s round %d: %5.0f req/s, served per instance %v\n", vs[i].name, round+1, r.rps(), r.PerTarget)
	})
	rows := make([]hotRow, len(vs))
	for i, v := range vs {
		r := results[i]
		ideal := 1 / cfg.Hold.Seconds()
		rows[i] = hotRow{Name: v.name, RPS: r.rps(), Ideal: ideal, OfIdeal: r.rps() / ideal,
			KeyBusy: busy[i].Seconds() / r.Window.Seconds(), Lat: summarize(r.Lat),
			Gap:         perRequest(r.Window-busy[i], r.OK),
			PerInstance: r.PerTarget, ClientMin: slices.Min(r.PerClient), ClientMax: slices.Max(r.PerClient),
			Overtaken: summarizeOvertakes(overtakes[i]), Errors: r.errors(), Violations: viol[i]}
		if v.locked {
			rows[i].Cmds = newCmdCount(cmds[i], len(r.Lat), v.inner)
		}
	}
	return rows, firstErr
}

// overtakeCounts returns, for every entry, how many later-sent requests of its instance
// entered before it.
func overtakeCounts(entries []entry, instances int) []int {
	const slack = time.Millisecond
	var out []int
	for inst := range instances {
		var e []entry // in entry order
		for _, x := range entries {
			if x.inst == inst {
				e = append(e, x)
			}
		}
		for i := range e {
			n := 0
			for j := range i {
				if e[j].sent > e[i].sent+slack {
					n++
				}
			}
			out = append(out, n)
		}
	}
	return out
}

func summarizeOvertakes(c []int) overtake {
	if len(c) == 0 {
		return overtake{}
	}
	slices.Sort(c)
	n := 0
	for _, v := range c {
		if v > 0 {
			n++
		}
	}
	return overtake{Fraction: float64(n) / float64(len(c)), P99: c[(len(c)*99+99)/100-1], Max: c[len(c)-1]}
}
