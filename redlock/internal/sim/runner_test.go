package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSim runs seeded schedules, each in a synctest bubble of its own, one after another:
//
//	SIM_TIME=30s     run seeds for that long (default 3s: a few seconds in go test -short)
//	SIM_SEED=n       replay seed n only (SIM_TRACE=1 prints its trace)
//	SIM_FIRST=n      the first seed (default 1; make sim draws one), SIM_WORKER=i/k takes
//	                 every k-th seed from there, starting at the i-th (make sim's workers)
//	SIM_SKIP=a,b     leave these faults out (evict, flushall, ...: faults.go's names)
//	SIM_BEYOND=1     faults past the stated assumptions: violations expected, counted
//	SIM_COUNT=n      exactly n seeds, whatever the time (measurements)
//	SIM_REPLAY=r     replay each failing seed r more times and report how often it fails again,
//	                 and how often the replay ran the very same schedule (its fingerprint)
//	SIM_REPLAY_ALL=1 replay every seed so, not only the failing ones (replay figures)
//	SIM_SHRINK=1     shrink each failing seed (shrink_test.go): fewer faults and workers
//	SIM_DROP=i,j     leave out the plan's faults i, j (from 0), SIM_NOWORKERS=c0/excl,...
//	                 the workers named, SIM_SHORT_HOLDS=1 the long holds (a shrunk replay)
//
// Every violation prints its seed and the command that replays it; the last line is the
// summary: SIM schedules=N violations=V ...
func TestSim(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beyond = os.Getenv("SIM_BEYOND") != ""
	cfg.Trace = os.Getenv("SIM_TRACE") != ""
	if s := os.Getenv("SIM_SKIP"); s != "" {
		cfg.Skip = map[string]bool{}
		for _, k := range strings.Split(s, ",") {
			cfg.Skip[strings.TrimSpace(k)] = true
		}
	}
	if !cfg.Beyond {
		skipKinds(&cfg, undetectableLoss) // past the assumptions (replication.go)
	}
	if err := shrunkConfig(&cfg, os.Getenv("SIM_DROP"), os.Getenv("SIM_NOWORKERS"), os.Getenv("SIM_SHORT_HOLDS")); err != nil {
		t.Fatal(err)
	}
	shrinking := os.Getenv("SIM_SHRINK") != ""
	replays, _ := strconv.Atoi(os.Getenv("SIM_REPLAY"))
	cfg.Fingerprint = replays > 0 || os.Getenv("SIM_SEED") != ""
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SIM_SEED=%q: %v", s, err)
		}
		res := runSeed(t, seed, cfg)
		report(t, res, cfg)
		for _, l := range res.Trace {
			fmt.Println(l)
		}
		if shrinking && len(res.Violations) > 0 {
			c := cfg
			c.Trace = false
			shrink(t, seed, c, res)
		}
		summary(t, []Result{res}, time.Duration(0), cfg, nil, fmt.Sprintf(" fingerprint=%016x equivalent=%016x", res.Fingerprint, res.Equivalent))
		return
	}
	budget := 3 * time.Second
	if s := os.Getenv("SIM_TIME"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SIM_TIME=%q: %v", s, err)
		}
		budget = d
	}
	first, step := uint64(1), uint64(1)
	if s := os.Getenv("SIM_FIRST"); s != "" {
		first, _ = strconv.ParseUint(s, 10, 64)
	}
	if s := os.Getenv("SIM_WORKER"); s != "" {
		var i, k uint64
		if _, err := fmt.Sscanf(s, "%d/%d", &i, &k); err != nil || k == 0 {
			t.Fatalf("SIM_WORKER=%q: want i/k", s)
		}
		first, step = first+i, k
	}
	replayAll := os.Getenv("SIM_REPLAY_ALL") != ""
	count, _ := strconv.Atoi(os.Getenv("SIM_COUNT")) // exactly that many seeds (measurements)
	if count > 0 {
		budget = time.Duration(1<<63 - 1)
	}
	start := time.Now()
	var results []Result
	again := map[uint64][2]int{}
	var same [3]int // replays that ran the very same schedule, an equivalent one, all replays
	for seed := first; time.Since(start) < budget && (count == 0 || len(results) < count); seed += step {
		res := runSeed(t, seed, cfg)
		results = append(results, res)
		res.Nth = len(results)
		report(t, res, cfg)
		if shrinking && len(res.Violations) > 0 {
			shrink(t, seed, cfg, res)
		}
		if (len(res.Violations) > 0 || replayAll) && replays > 0 {
			n, m, e := 0, 0, 0
			for range replays {
				r := runSeed(t, seed, cfg)
				if len(r.Violations) > 0 {
					n++
				}
				if r.Fingerprint == res.Fingerprint {
					m++
				}
				if r.Equivalent == res.Equivalent {
					e++
				}
			}
			same[0] += m
			same[1] += e
			same[2] += replays
			if len(res.Violations) > 0 {
				again[seed] = [2]int{n, replays}
				fmt.Printf("SIM replay seed=%d failed again %d of %d, the same schedule %d of %d, equivalent %d of %d\n", seed, n, replays, m, replays, e, replays)
			}
		}
	}
	line := ""
	if same[2] > 0 {
		line = fmt.Sprintf(" replays_identical=%d/%d replays_equivalent=%d/%d", same[0], same[2], same[1], same[2])
	}
	summary(t, results, time.Since(start), cfg, again, line)
}

// report prints a schedule's violations, each with the command that replays it.
func report(t *testing.T, res Result, cfg Config) {
	for _, v := range res.Violations {
		beyond := ""
		if cfg.Beyond {
			beyond = "SIM_BEYOND=1 "
		}
		past := ""
		if res.Beyond > 0 {
			past = fmt.Sprintf(" (beyond the assumptions: %d faults past them)", res.Beyond)
		}
		fmt.Printf("SIM violation seed=%d nth=%d %s%s | %s | replay: %sSIM_SEED=%d make sim\n", res.Seed, res.Nth, v, past, res.Params, beyond, res.Seed)
		if !cfg.Beyond || res.Beyond == 0 {
			t.Fail()
		}
	}
}

func summary(t *testing.T, results []Result, took time.Duration, cfg Config, again map[uint64][2]int, more string) {
	var viol, failed, ops, acq, cmds, stale, joins, past, pastViol, rb, rbOut int64
	kinds := map[string]int{}
	var seeds []string
	for _, r := range results {
		viol += int64(len(r.Violations))
		if r.Beyond > 0 {
			past++
			pastViol += int64(len(r.Violations))
		}
		if len(r.Violations) > 0 {
			failed++
			seeds = append(seeds, strconv.FormatUint(r.Seed, 10))
		}
		for _, v := range r.Violations {
			kinds[strings.ReplaceAll(v.Kind, " ", "_")]++
		}
		ops += r.Ops
		acq += r.Acquires
		cmds += r.Commands
		stale += int64(r.Stale[0])
		joins += r.Joins
		rb += int64(r.Rollbacks)
		rbOut += int64(r.RollbacksLeftOut)
	}
	n := int64(max(len(results), 1))
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	line := fmt.Sprintf("SIM schedules=%d violations=%d failed_seeds=%d ops_per_schedule=%d acquires_per_schedule=%d commands_per_schedule=%d stale_writes_refused=%d joins_under_force=%d rollbacks=%d rollbacks_left_out=%d real=%v cpu=%v",
		len(results), viol, failed, ops/n, acq/n, cmds/n, stale, joins, rb, rbOut, took.Round(time.Millisecond), cpu.Round(time.Millisecond))
	if cfg.Beyond {
		// Counted apart: the violations of schedules with a fault past the assumptions
		// are expected; those of the others are not.
		line += fmt.Sprintf(" mode=beyond(expected) beyond_schedules=%d beyond_violations=%d within_violations=%d", past, pastViol, viol-pastViol)
	}
	for k, c := range kinds {
		line += fmt.Sprintf(" %s=%d", k, c)
	}
	if len(seeds) > 0 {
		if len(seeds) > 20 {
			seeds = seeds[:20]
		}
		line += " seeds=" + strings.Join(seeds, ",")
	}
	replayed, repeated := 0, 0
	for _, a := range again {
		replayed += a[1]
		repeated += a[0]
	}
	if replayed > 0 {
		line += fmt.Sprintf(" replays_failing_again=%d/%d", repeated, replayed)
	}
	fmt.Println(line + more)
}
