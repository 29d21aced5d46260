package caddyredlock

import "testing"

// TestRequestMoves pins the table of a request's moves (requests.go): every pair of
// states, allowed or refused, and a refused move leaves the state as it was. A change to
// requestMoves must change this test too.
func TestRequestMoves(t *testing.T) {
	all := []requestState{stateWaiting, stateHeld, stateDraining, stateReleasing, stateDone}
	allowed := map[[2]requestState]bool{
		{stateWaiting, stateHeld}: true, {stateWaiting, stateDone}: true,
		{stateHeld, stateReleasing}: true, {stateHeld, stateDraining}: true, {stateHeld, stateDone}: true,
		{stateDraining, stateReleasing}: true,
		{stateReleasing, stateDone}:     true,
	}
	if len(requestMoves) != len(all) {
		t.Errorf("requestMoves has %d states, the test knows %d", len(requestMoves), len(all))
	}
	for _, from := range all {
		for _, to := range all {
			e := &inflight{state: from}
			got := e.move(to)
			if got != allowed[[2]requestState{from, to}] {
				t.Errorf("%v -> %v: moved %v, want %v", from, to, got, !got)
			}
			if !got && e.state != from {
				t.Errorf("%v -> %v refused but the state changed to %v", from, to, e.state)
			}
		}
	}
}

// The matchers the table's readers count with (the gauges, an exiting Caddy's waits)
// agree with the states: a releasing request holds its lock but is out of its ServeHTTP,
// and a done one counts nowhere.
func TestRequestMatchers(t *testing.T) {
	type want struct{ waiting, holding, inServe, releasing bool }
	for s, w := range map[requestState]want{
		stateWaiting:   {waiting: true, inServe: true},
		stateHeld:      {holding: true, inServe: true},
		stateDraining:  {holding: true},
		stateReleasing: {holding: true, releasing: true},
		stateDone:      {},
	} {
		e := &inflight{state: s}
		if got := (want{isWaiting(e), isHolding(e), inServeHTTP(e), isReleasing(e)}); got != w {
			t.Errorf("%v: waiting, holding, in ServeHTTP, releasing = %+v, want %+v", s, got, w)
		}
	}
}
