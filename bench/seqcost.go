package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// The write sequence's cost (-only seqcost, issue 38): every grant, renewal, re-take and
// fencing commit advances a per-node write sequence so that a node gone back in time (a
// failover to a lagging replica, a restart from an older snapshot) is no vote
// (redlock/rollback.go). The switch that turns it off is unexported, so this phase runs
// the redlock package's own benchmark (BenchmarkWriteSequenceCost, redlock/bench_seq_test.go)
// in a `go test` process: 5 redis-servers of its own, 16 goroutines on unique keys, each
// path with the check on and off, every variant once per count, in turn (the box's drift
// hits them alike). The rows are the medians over the counts.

// seqCostRow is one path: the nodes' and the client's CPU per lock with and without.
type seqCostRow struct {
	Path         string    `json:"path"`
	RedisOn      float64   `json:"redis_cpu_us_per_lock_on"` // summed over the 5 nodes
	RedisOff     float64   `json:"redis_cpu_us_per_lock_off"`
	RedisRatio   float64   `json:"redis_cpu_ratio_on_to_off"`
	ClientOn     float64   `json:"client_cpu_us_per_lock_on"`
	ClientOff    float64   `json:"client_cpu_us_per_lock_off"`
	RedisOnRuns  []float64 `json:"redis_cpu_on_runs"`
	RedisOffRuns []float64 `json:"redis_cpu_off_runs"`
}

// seqCostPaths are the benchmark's paths, in its order, with what each is.
var seqCostPaths = []struct{ key, name string }{
	{"wait", "plain first try (a writer that may wait: SET NX PX + marker)"},
	{"nowait", "acquire script (no wait)"},
	{"fencing", "acquire script with fencing"},
}

func runSeqCost(res *results, cfg config, repo string, fail func(string, error)) {
	// No background meter: the benchmark's own process and nodes are other processes.
	progress("8. write sequence cost (library benchmark, check on/off)...\n")
	count, benchtime := 3, "2s"
	if cfg.LibRounds <= 1 {
		count, benchtime = 1, "1s"
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkWriteSequenceCost$",
		"-benchtime", benchtime, "-count", strconv.Itoa(count), "./redlock/")
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		fail("seqcost", fmt.Errorf("%v: %s", err, lastLines(out.String(), 5)))
		return
	}
	rows, err := parseSeqCost(out.String())
	if err != nil {
		fail("seqcost", err)
		return
	}
	res.SeqCost = rows
}

// parseSeqCost reads the benchmark's lines:
// BenchmarkWriteSequenceCost/path=wait/check=on-2  N  ns/op  X client-cpu-µs/op  Y redis-cpu-µs/op
func parseSeqCost(out string) ([]seqCostRow, error) {
	type runs struct{ redis, client []float64 }
	got := map[string]*runs{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkWriteSequenceCost/") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkWriteSequenceCost/")
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		r := got[name]
		if r == nil {
			r = &runs{}
			got[name] = r
		}
		for i := 1; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "redis-cpu-µs/op":
				r.redis = append(r.redis, v)
			case "client-cpu-µs/op":
				r.client = append(r.client, v)
			}
		}
	}
	var rows []seqCostRow
	for _, p := range seqCostPaths {
		on, off := got["path="+p.key+"/check=on"], got["path="+p.key+"/check=off"]
		if on == nil || off == nil || len(on.redis) == 0 || len(off.redis) == 0 {
			return nil, fmt.Errorf("no figures for path %s in the benchmark's output", p.key)
		}
		row := seqCostRow{Path: p.name, RedisOn: median(on.redis), RedisOff: median(off.redis),
			ClientOn: median(on.client), ClientOff: median(off.client), RedisOnRuns: on.redis, RedisOffRuns: off.redis}
		if row.RedisOff > 0 {
			row.RedisRatio = row.RedisOn / row.RedisOff
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// seqCostTable renders the phase.
func (r *results) seqCostTable() *table {
	t := &table{title: "8. Write sequence cost: CPU per lock with the check on and off (library, N=5, 16 goroutines, unique keys)",
		head: []string{"grant path", "Redis CPU/lock on", "off", "on vs off", "client CPU/lock on", "off"},
		notes: []string{"Redis CPU: the 5 nodes' CPU time (INFO cpu) over the run / locks (acquire + release), summed over the nodes; median of the counts.",
			"on: every grant, renewal, re-take and fencing commit advances (GET, SET) the node's write sequence (redlock/rollback.go); off: the benchmark's unexported switch.",
			"Reproduce: go test -run '^$' -bench '^BenchmarkWriteSequenceCost$' -benchtime 2s -count 3 ./redlock/"}}
	for _, x := range r.SeqCost {
		t.add(x.Path, fmt.Sprintf("%.1fµs", x.RedisOn), fmt.Sprintf("%.1fµs", x.RedisOff), fmt.Sprintf("%.2f×", x.RedisRatio),
			fmt.Sprintf("%.1fµs", x.ClientOn), fmt.Sprintf("%.1fµs", x.ClientOff))
	}
	return t
}
