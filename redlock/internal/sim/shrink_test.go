package sim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// shrink reduces a failing schedule to fewer faults and workers that still fail the same
// way (a violation of the first one's kind) (SIM_SHRINK=1): it tries, one at a time and
// keeping each step that still fails, the workers' long holds off, each worker left out,
// and each fault of the plan left out, latest first (a replay is not exact: a step counts
// as failing when one of two runs fails). It prints the shrunk schedule, its faults and
// the command that replays it. The plan is drawn from the seed before anything runs, so
// leaving a fault out keeps the others as they were; a worker's draws are its own, so
// leaving one out keeps the others'.
func shrink(t *testing.T, seed uint64, cfg Config, first Result) {
	kind := first.Violations[0].Kind // a step must fail the same way (not, say, liveness)
	fails := func(c Config) (Result, bool) {
		for range 2 {
			r := runSeed(t, seed, c)
			if slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Kind == kind }) {
				return r, true
			}
		}
		return Result{}, false
	}
	cur := cfg
	cur.DropFaults, cur.DropWorkers = map[int]bool{}, map[string]bool{}
	best := first
	runs := 0
	try := func(next Config) {
		runs++
		if r, ok := fails(next); ok {
			cur, best = next, r
		}
	}
	if !cur.ShortHolds {
		next := cur
		next.ShortHolds = true
		try(next)
	}
	for _, who := range first.Workers {
		next := cur
		next.DropWorkers = maps.Clone(cur.DropWorkers)
		next.DropWorkers[who] = true
		try(next)
	}
	for i := len(first.Plan) - 1; i >= 0; i-- {
		next := cur
		next.DropFaults = maps.Clone(cur.DropFaults)
		next.DropFaults[i] = true
		try(next)
	}
	env := shrinkEnv(cur)
	v := best.Violations[slices.IndexFunc(best.Violations, func(v Violation) bool { return v.Kind == kind })]
	fmt.Printf("SIM shrunk seed=%d faults=%d/%d workers=%d/%d long_holds=%v tries=%d violations=%d: %s\n",
		seed, len(best.Plan), len(first.Plan), len(best.Workers), len(first.Workers), !cur.ShortHolds, runs, len(best.Violations), v)
	fmt.Printf("SIM shrunk seed=%d workers: %s\n", seed, strings.Join(best.Workers, " "))
	for _, f := range best.Plan {
		fmt.Printf("SIM shrunk seed=%d fault: %s\n", seed, f)
	}
	fmt.Printf("SIM shrunk seed=%d replay: %sSIM_SEED=%d make sim\n", seed, env, seed)
}

// shrinkEnv is the environment that replays a shrunk schedule (SIM_DROP, SIM_NOWORKERS,
// SIM_SHORT_HOLDS; parsed by shrunkConfig).
func shrinkEnv(c Config) string {
	var s string
	if len(c.DropFaults) > 0 {
		var ds []string
		for _, i := range slices.Sorted(maps.Keys(c.DropFaults)) {
			ds = append(ds, strconv.Itoa(i))
		}
		s += "SIM_DROP=" + strings.Join(ds, ",") + " "
	}
	if len(c.DropWorkers) > 0 {
		s += "SIM_NOWORKERS=" + strings.Join(slices.Sorted(maps.Keys(c.DropWorkers)), ",") + " "
	}
	if c.ShortHolds {
		s += "SIM_SHORT_HOLDS=1 "
	}
	if c.Beyond {
		s += "SIM_BEYOND=1 "
	}
	if len(c.Skip) > 0 {
		s += "SIM_SKIP=" + strings.Join(slices.Sorted(maps.Keys(c.Skip)), ",") + " "
	}
	return s
}

// shrunkConfig applies SIM_DROP, SIM_NOWORKERS and SIM_SHORT_HOLDS to cfg.
func shrunkConfig(cfg *Config, drop, noWorkers, shortHolds string) error {
	if drop != "" {
		cfg.DropFaults = map[int]bool{}
		for _, d := range strings.Split(drop, ",") {
			i, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil {
				return fmt.Errorf("SIM_DROP=%q: %w", drop, err)
			}
			cfg.DropFaults[i] = true
		}
	}
	if noWorkers != "" {
		cfg.DropWorkers = map[string]bool{}
		for _, w := range strings.Split(noWorkers, ",") {
			cfg.DropWorkers[strings.TrimSpace(w)] = true
		}
	}
	cfg.ShortHolds = shortHolds != ""
	return nil
}
