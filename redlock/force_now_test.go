package redlock

import "testing"

// A force release that begins between forceNow's two loads is not missed: forcedSince
// reports it (the argument is at forceNow). With the old order (forcingN read before
// forceSeq) forceNow returned the new force's own number and forcedSince said no force
// began since. Deterministic: the hook begins the force exactly between the loads.
func TestForceNowCannotMissAForceBeginningBetweenItsLoads(t *testing.T) {
	qs := newQueues()
	qs.beginForce("other") // forceSeq > 0 and a force under way elsewhere ended
	qs.endForce("other")
	hook := func() {
		testHookForceNow.Store(nil) // once
		qs.beginForce("k")
	}
	testHookForceNow.Store(&hook)
	defer testHookForceNow.Store(nil)
	seq := qs.forceNow("k")
	defer qs.endForce("k")
	if !qs.forcedSince("k", seq) {
		t.Fatalf("forceNow returned %d, the number of a force release of the key that began during the call: forcedSince misses it", seq)
	}
}
