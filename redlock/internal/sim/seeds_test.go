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
//
// Seeds with a late client (144522392587, 144522392612, 144522393418, 363479123125 among
// those below) give other schedules since the young-node program was planned ahead of
// the other faults (faults.go, young): what they were kept for is not re-checked yet.
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
	// Found on main (f283705) as "token order", a false alarm of the ledger's (no hole in
	// the lock): a lock of client 0 that another client's force release freed was handed
	// on locally (handed true, token one above it) before its next renewal, after a reader
	// of client 1 took the key with a token from the clock. The handed lock holds the freed
	// values, so its token below the reader's is fencing at work (check.go, tokenFreed;
	// TestLedgerTokenOrderUnderForce). Both failed 3 of 3 with the ledger before; since
	// main's fresh-start marks (43f4d2e) only 144522393418 still gives that schedule.
	{144522392612, "a handed lock of a holder client 2's force release freed, below a later reader's token"},
	{144522393418, "a handed lock of a holder client 1's force release freed, below a later reader's token"},
	// Found on main (f283705) likewise: client 2's round raced client 0's force release,
	// which freed its grants; client 1 took the key after the delete, with a larger token,
	// and entered first. On this code the seed gives another schedule.
	{363479123125, "a writer whose round raced another client's force release, below the writer that came after it"},
	// Two holders: a late client met a node restarted in the schedule's first seconds,
	// which by whole-second uptimes looked started together with the others: a fresh
	// start needs one client's marks too (voting.go, "Fresh start"). Each failed with the
	// marks check taken out until the simulation's events were ordered per connection
	// (2521966), which gave them other schedules; with the young-node program planned
	// ahead (faults.go, young) they fail again, 3 of 3, with the check taken out.
	{363479122988, "a node restarted at 1.9 s voted for a client started at 2.0 s (found by CI)"},
	{144522393591, "a node restarted at 0.26 s voted for a client started at 0.39 s"},
	{799242708204, "a node restarted voted for a late client as part of a fresh start"},
	// The same hole through the young-node program (faults.go, young): client 0 or 1, cut
	// off from two nodes, holds a key on a bare majority with x; x restarts; the late
	// client asks for the key first. Each fails 3 of 3 with the marks check taken out of
	// freshStartOf (and with the young-node quarantine taken out), and passes with both.
	{6000012, "a node restarted at 1.2 s voted for the late client as part of a fresh start"},
	{6000022, "a node restarted at 0.4 s voted for the late client as part of a fresh start"},
	// Late start past 2 s: the other nodes no longer look young, so only the young-node
	// quarantine holds x back. Fails 3 of 3 with it taken out, passes with it.
	{6000016, "a node restarted at 2.4 s voted for the late client (young-node quarantine)"},
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
