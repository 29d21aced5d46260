package main

import (
	"fmt"
	"strings"
)

// cpuCost is one locked Caddy row's CPU per request on both sides (issue 32): Caddy's
// against plain Caddy's of the same run, and the nodes', which sets how many locks a
// second one set of nodes can serve (Redis runs commands and scripts on one thread).
type cpuCost struct {
	Name       string  `json:"name"`
	Nodes      int     `json:"nodes"`
	CaddyCPU   float64 `json:"caddy_cpu_us_per_response"`
	PlainCPU   float64 `json:"plain_caddy_cpu_us_per_response"`
	Ratio      float64 `json:"caddy_cpu_ratio_to_plain"`
	RedisCPU   float64 `json:"redis_cpu_us_per_lock"` // summed over the nodes
	PerNode    float64 `json:"redis_cpu_us_per_lock_per_node"`
	NodesLimit float64 `json:"locks_per_s_one_set_of_nodes"` // 1 s of one node's thread / its CPU per lock
}

// cpuCosts reads the unique-key rows: every Caddy + redlock row (the -compare build's
// too) against plain Caddy's row of the same run.
func (r *results) cpuCosts() []cpuCost {
	var plain *httpRow
	for i := range r.Overhead {
		if r.Overhead[i].Name == nameCaddyPlain {
			plain = &r.Overhead[i]
		}
	}
	if plain == nil || plain.FrontCPU == 0 {
		return nil
	}
	var out []cpuCost
	for _, x := range r.Overhead {
		name := strings.TrimPrefix(x.Name, nameCompare)
		if !strings.HasPrefix(name, nameCaddyRedlock) || x.FrontCPU == 0 {
			continue
		}
		var n int
		fmt.Sscanf(name[len(nameCaddyRedlock):], ", N=%d", &n)
		if n == 0 {
			continue
		}
		c := cpuCost{Name: x.Name, Nodes: n, CaddyCPU: x.FrontCPU, PlainCPU: plain.FrontCPU,
			Ratio: x.FrontCPU / plain.FrontCPU, RedisCPU: x.RedisCPU, PerNode: x.RedisCPU / float64(n)}
		if c.PerNode > 0 {
			c.NodesLimit = 1e6 / c.PerNode
		}
		out = append(out, c)
	}
	return out
}

// cpuCostTable is table 3b: what one locked request costs each side.
func (r *results) cpuCostTable() *table {
	t := &table{title: "3b. CPU per locked request, both sides (unique keys, the runs of table 3)",
		head: []string{"front end", "Caddy CPU/response", "plain Caddy CPU/response", "Caddy vs plain", "Redis CPU/lock (all nodes)",
			"per node", "one set of nodes serves about"},
		notes: []string{"Caddy CPU/response: the Caddy process's CPU time over the run / 2xx responses; plain Caddy's from the same run.",
			"Redis CPU/lock: the redis-servers' CPU time over the run, summed, / responses (health checks of every site included: errs high).",
			"one set of nodes serves about: 1 s of one node's thread / its CPU per lock (each lock costs every node about the same),",
			"at this run's pipelining depth, with a core of its own per node and nothing else on it."}}
	for _, c := range r.cpuCosts() {
		t.add(c.Name, fus(c.CaddyCPU), fus(c.PlainCPU), fmt.Sprintf("%.2f×", c.Ratio), fus(c.RedisCPU), fus(c.PerNode),
			fmt.Sprintf("%s locks/s (%d nodes)", roundLocks(c.NodesLimit), c.Nodes))
	}
	return t
}

// roundLocks rounds a capacity to two significant figures: it is a planning figure.
func roundLocks(v float64) string {
	switch {
	case v >= 100_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 10_000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
