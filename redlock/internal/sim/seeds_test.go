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
	// Found with the force release's one-step script (a407e71) and this ledger: two
	// holders, the earlier one freed by a force release's delete that landed after the
	// call, on nodes its bare majority needed (force.go: read, then compare-and-delete).
	{144522392587, "a force release's delete held up by a partition (client 2 cut off from nodes 0 and 3)"},
	{144522392962, "a force release's delete held up by a GC pause of the forcing client"},
	{144522392989, "a force release's delete held up by a GC pause of the forcing client"},
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
