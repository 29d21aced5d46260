package main

import (
	"fmt"
	"time"
)

// httpVariant is one front end measured by the overhead and hot-key runs.
type httpVariant struct {
	name     string
	kind     string // "caddy" or "go"
	locked   bool
	n        int
	inner    map[string]bool // in-script commands of its lock client
	baseline int             // index of the plain variant of the same kind (overhead)
	targets  []*httpTarget
	clients  int // hot key: concurrent clients, if not cfg.HotClients
}

// httpRow is one overhead (unique keys) result.
type httpRow struct {
	Name       string   `json:"name"`
	RPS        float64  `json:"requests_per_s"`
	Ratio      float64  `json:"ratio_to_plain"` // RPS / RPS of the plain proxy of the same kind
	Lat        latency  `json:"latency"`
	Errors     int      `json:"errors"`
	Violations int64    `json:"violations"`
	Cmds       cmdCount `json:"redis_commands"`
	FrontCPU   float64  `json:"front_end_cpu_us_per_request"`
	RedisCPU   float64  `json:"redis_cpu_us_per_request"` // all nodes
	// BoxCPU is the CPU time of every process on the machine (/proc/stat) per request:
	// front end, nodes, load generator, upstream and the kernel's share. While the cores
	// are busy (Busy, in cores), req/s is Busy over BoxCPU, so a ratio to plain is a
	// CPU budget (see lockBudget).
	BoxCPU float64 `json:"box_cpu_us_per_request"`
	Busy   float64 `json:"box_busy_cores"`
}

// measureOverhead runs unique-key load on each variant, alternating, and reads the Redis
// commands each variant caused (CONFIG RESETSTAT before each run).
func measureOverhead(vs []httpVariant, up *upstream, nodes []*redisNode, cfg config) ([]httpRow, error) {
	results := make([]loadResult, len(vs))
	cmds := make([]map[string]int64, len(vs))
	viol := make([]int64, len(vs))
	frontCPU := make([]time.Duration, len(vs))
	redisCPU := make([]time.Duration, len(vs))
	boxCPU := make([]time.Duration, len(vs))
	elapsed := make([]time.Duration, len(vs))
	for i := range vs {
		cmds[i] = map[string]int64{}
	}
	spec := func(i, round int, d time.Duration) loadSpec {
		return loadSpec{Clients: cfg.Clients, Duration: d, Targets: vs[i].targets,
			Path: func(c, seq int) string { return fmt.Sprintf("/r/u%d-%d-%d-%d", i, round, c, seq) }}
	}
	for i := range vs { // warm up connections, script caches, lock clients
		if w := runLoad(spec(i, -1, cfg.Warmup)); w.errors() > 0 {
			notef("%s: warm-up run had %d failed requests %v", vs[i].name, w.errors(), w.Status)
		}
	}
	var firstErr error
	alternate(cfg.Rounds, len(vs), func(i, round int) {
		if err := resetStats(nodes); err != nil && firstErr == nil {
			firstErr = err
		}
		v0, _ := up.violationCount()
		fm, rm := newCPUMeter(frontProcs(vs[i])), newCPUMeter(redisProcs(nodes))
		box0, t0 := machineBusy(), time.Now()
		r := runLoad(spec(i, round, cfg.HTTPDur))
		boxCPU[i] += machineBusy() - box0
		elapsed[i] += time.Since(t0)
		frontCPU[i] += fm.used()
		redisCPU[i] += rm.used()
		v1, _ := up.violationCount()
		viol[i] += v1 - v0
		c, err := commandStats(nodes)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		addCounts(cmds[i], c)
		results[i].merge(r)
		progress("  %-28s round %d: %7.0f req/s\n", vs[i].name, round+1, r.rps())
	})
	rows := make([]httpRow, len(vs))
	for i, v := range vs {
		r := results[i]
		rows[i] = httpRow{Name: v.name, RPS: r.rps(), Lat: summarize(r.Lat), Errors: r.errors(), Violations: viol[i],
			FrontCPU: perRequest(frontCPU[i], len(r.Lat)), RedisCPU: perRequest(redisCPU[i], len(r.Lat)),
			BoxCPU: perRequest(boxCPU[i], len(r.Lat))}
		if elapsed[i] > 0 {
			rows[i].Busy = boxCPU[i].Seconds() / elapsed[i].Seconds()
		}
		if v.locked {
			rows[i].Cmds = newCmdCount(cmds[i], len(r.Lat), v.inner)
		}
	}
	for i, v := range vs {
		if b := rows[v.baseline].RPS; b > 0 {
			rows[i].Ratio = rows[i].RPS / b
		}
	}
	return rows, firstErr
}

// perRequest is CPU time per request in µs.
func perRequest(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return us(d) / float64(n)
}
