package sim

import (
	"runtime"
	"strconv"
	"testing"
)

// regressionSeeds are schedules that found a hole: each failed on the code before its fix
// and passes with it, replayed here on every go test (SIM_SEED=n make sim replays one with
// its trace). A later change to the lock or to the simulation may give a seed another
// schedule, which then proves nothing: replay it on a build with the fix taken out, and if
// it no longer fails there, find another seed that does (docs/simulation.md says how).
var regressionSeeds = []struct {
	seed uint64
	what string
}{
	// Two holders: a late client met a node restarted in the schedule's first seconds,
	// which by whole-second uptimes looked started together with the others: a fresh
	// start needs one client's marks too (voting.go, "Fresh start").
	{363479122988, "a node restarted at 1.9 s voted for a client started at 2.0 s (found by CI)"},
	{144522393591, "a node restarted at 0.26 s voted for a client started at 0.39 s"},
	{799242708204, "a node restarted voted for a late client as part of a fresh start"},
}

// TestSimSeeds replays the regression seeds as make sim runs them (GOMAXPROCS=1: the
// goroutines of one simulated instant in one order; with more, a replay is less exact).
func TestSimSeeds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := DefaultConfig()
	for _, r := range regressionSeeds {
		t.Run(strconv.FormatUint(r.seed, 10), func(t *testing.T) {
			res := runSeed(t, r.seed, cfg)
			for _, v := range res.Violations {
				t.Errorf("%s (once found: %s) | %s | replay: SIM_SEED=%d make sim", v, r.what, res.Params, r.seed)
			}
		})
	}
}
