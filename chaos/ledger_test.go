package main

import (
	"strings"
	"testing"
	"time"
)

// clock is a settable time source for the ledger.
type clock struct{ t time.Time }

func (c *clock) now() time.Time                { return c.t }
func (c *clock) add(d time.Duration) time.Time { c.t = c.t.Add(d); return c.t }

func newTestLedger() (*ledger, *pauseLog, *clock) {
	p := newPauseLog()
	c := &clock{t: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	l := newLedger(true, p, 2*time.Second)
	l.now = c.now
	return l, p, c
}

func TestLedgerSerialRequestsAreClean(t *testing.T) {
	l, _, c := newTestLedger()
	for i := range 5 {
		v, ok, why := l.enter("k", i%3, int64(100+i), true, "r", "0")
		if !ok {
			t.Fatalf("request %d refused: %s", i, why)
		}
		c.add(10 * time.Millisecond)
		if !l.write(v) {
			t.Fatalf("request %d: write rejected", i)
		}
		l.leave(v, false)
	}
	if got := l.snapshot(); got.bad() != 0 || got.Entries != 5 {
		t.Fatalf("counters %+v", got)
	}
}

func TestLedgerOverlapIsAViolation(t *testing.T) {
	l, _, c := newTestLedger()
	var keys []string
	l.onBreach = func(k string) { keys = append(keys, k) }
	a, _, _ := l.enter("k", 0, 100, true, "a", "0")
	c.add(time.Millisecond)
	b, ok, _ := l.enter("k", 1, 101, true, "b", "0")
	if !ok {
		t.Fatal("b refused")
	}
	if got := l.snapshot(); got.Violations != 1 {
		t.Fatalf("violations = %d, want 1", got.Violations)
	}
	if len(keys) != 1 || keys[0] != "k" {
		t.Fatalf("breach hook got %q", keys)
	}
	// Other keys run side by side.
	if _, ok, _ := l.enter("other", 2, 5, true, "c", "0"); !ok || l.snapshot().Violations != 1 {
		t.Fatal("a different key counted as an overlap")
	}
	l.leave(a, false)
	l.leave(b, false)
	if !strings.Contains(strings.Join(l.failureLog(), "\n"), "VIOLATION: key k: b") {
		t.Fatalf("failure log: %q", l.failureLog())
	}
}

func TestLedgerTokenRegression(t *testing.T) {
	l, _, _ := newTestLedger()
	v, _, _ := l.enter("k", 0, 100, true, "a", "0")
	l.leave(v, false)
	for _, tok := range []int64{100, 99} {
		if _, ok, why := l.enter("k", 1, tok, true, "b", "0"); ok || why != "token regression" {
			t.Fatalf("token %d after 100: ok=%v %q", tok, ok, why)
		}
	}
	if got := l.snapshot(); got.Regressions != 2 || got.Violations != 0 {
		t.Fatalf("counters %+v", got)
	}
	// Tokens are per key.
	if _, ok, _ := l.enter("k2", 1, 1, true, "c", "0"); !ok {
		t.Fatal("a low token on another key was refused")
	}
}

func TestLedgerMissingTokenIsUnlocked(t *testing.T) {
	l, _, _ := newTestLedger()
	if _, ok, _ := l.enter("k", 0, 0, false, "a", "0"); ok {
		t.Fatal("request without a token admitted")
	}
	if _, ok, _ := l.enter("", 0, 5, true, "b", "0"); ok {
		t.Fatal("request without a lock key admitted")
	}
	if got := l.snapshot(); got.Unlocked != 2 {
		t.Fatalf("unlocked = %d, want 2", got.Unlocked)
	}
}

// A holder whose instance was paused is superseded, not a violation: its later writes
// are rejected by fencing, and a late arrival with its old token is stale, not a
// regression.
func TestLedgerPausedHolderIsFenced(t *testing.T) {
	l, p, c := newTestLedger()
	old, _, _ := l.enter("k", 0, 100, true, "old", "0")
	p.begin(0, c.add(10*time.Millisecond))
	c.add(1500 * time.Millisecond)
	nw, ok, _ := l.enter("k", 1, 200, true, "new", "0")
	if !ok {
		t.Fatal("new holder refused")
	}
	p.end(0, c.add(time.Second))
	if l.write(old) {
		t.Fatal("the superseded holder's write was accepted")
	}
	if !l.write(nw) {
		t.Fatal("the new holder's write was rejected")
	}
	c.add(50 * time.Millisecond)
	// A request of the paused instance that got its token before the pause.
	if _, ok, why := l.enter("k", 0, 150, true, "late", "0"); ok || why != "stale token" {
		t.Fatalf("late request of the paused instance: ok=%v %q", ok, why)
	}
	l.leave(old, true)
	l.leave(nw, false)
	got := l.snapshot()
	if got.bad() != 0 || got.StaleOverlaps != 1 || got.StaleRejected != 2 || got.Cancelled != 1 {
		t.Fatalf("counters %+v", got)
	}
	st := l.staleSince(0, time.Time{})
	if len(st) != 1 || st[0].id != "old" || st[0].cancelAt.IsZero() || st[0].rejectedAt.IsZero() {
		t.Fatalf("stale visits %+v", st)
	}
	// Long after the pause, an old token from that instance is a regression again.
	c.add(10 * time.Second)
	if _, _, why := l.enter("k", 0, 150, true, "much later", "0"); why != "token regression" {
		t.Fatalf("old token long after the pause: %q", why)
	}
}

func TestLedgerNoQuorum(t *testing.T) {
	l, _, c := newTestLedger()
	stream, _, _ := l.enter("s", 0, 10, true, "stream", "0")
	l.setNoQuorum(c.now(), time.Second)
	c.add(500 * time.Millisecond)
	if !l.write(stream) {
		t.Fatal("write within the grace rejected")
	}
	if _, ok, _ := l.enter("k", 1, 20, true, "within grace", "0"); !ok {
		t.Fatal("entry within the grace refused")
	}
	if l.snapshot().Unlocked != 0 {
		t.Fatal("counted unlocked within the grace")
	}
	c.add(time.Second)
	l.write(stream)
	l.write(stream) // counted once per visit
	l.enter("k2", 1, 30, true, "after grace", "0")
	if got := l.snapshot().Unlocked; got != 2 {
		t.Fatalf("unlocked = %d, want 2 (one stream, one entry)", got)
	}
	l.setNoQuorum(time.Time{}, 0)
	l.enter("k3", 1, 40, true, "quorum back", "0")
	if got := l.snapshot().Unlocked; got != 2 {
		t.Fatalf("unlocked = %d after the quorum came back", got)
	}
}

func TestLedgerProbeAndInside(t *testing.T) {
	l, _, _ := newTestLedger()
	v, _, _ := l.enter("k", 0, 1, true, probePrefix+"7", "0")
	if l.insideCount() != 1 {
		t.Fatal("inside count")
	}
	if pv, ok := l.probeVisit(probePrefix + "7"); !ok || pv.key != "k" {
		t.Fatalf("probe visit %+v %v", pv, ok)
	}
	l.leave(v, true)
	l.leave(v, true) // idempotent
	if l.insideCount() != 0 || l.snapshot().Cancelled != 1 {
		t.Fatalf("after leave: inside %d, %+v", l.insideCount(), l.snapshot())
	}
	if pv, _ := l.probeVisit(probePrefix + "7"); pv.cancelAt.IsZero() {
		t.Fatal("probe cancellation not recorded")
	}
}

func TestPauseLog(t *testing.T) {
	p := newPauseLog()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p.begin(1, at(10))
	if !p.pausedWithin(1, at(11), at(12)) {
		t.Fatal("an ongoing pause not seen")
	}
	p.end(1, at(13))
	for _, tc := range []struct {
		inst     int
		from, to int
		want     bool
	}{
		{1, 0, 9, false}, {1, 0, 10, true}, {1, 12, 20, true}, {1, 13, 20, true}, {1, 14, 20, false}, {2, 0, 20, false},
	} {
		if got := p.pausedWithin(tc.inst, at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("pausedWithin(%d, %d, %d) = %v", tc.inst, tc.from, tc.to, got)
		}
	}
}
