package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The moves between a lock's states are the ones state.go's diagram draws, and no other:
// a change to lockMoves has to change this table too.
func TestLockMoves(t *testing.T) {
	allowed := map[[2]lockState]bool{
		{provisional, held}: true, {provisional, releasing}: true, {provisional, released}: true,
		{held, releasing}:     true,
		{releasing, handedOn}: true, {releasing, unreleased}: true, {releasing, released}: true,
		{unreleased, releasing}: true,
	}
	for from := provisional; from <= released; from++ {
		for to := provisional; to <= released; to++ {
			l := &Lock{state: from}
			got := l.move(to)
			if got != allowed[[2]lockState{from, to}] {
				t.Errorf("%v -> %v: moved %v, want %v", from, to, got, !got)
			}
			if want := from; !got && l.state != want {
				t.Errorf("%v -> %v refused but the state changed to %v", from, to, l.state)
			}
		}
	}
	if (&Lock{state: held}).moveFrom(provisional, releasing) {
		t.Error("moveFrom moved a lock that was not in its from state")
	}
}

// keep moves the baton from the Acquire into the lock, once; a lock already lost or being
// released is not kept and the baton stays with the Acquire.
func TestKeepMovesTheBaton(t *testing.T) {
	qs := newQueues()
	tn, _, _, err := qs.take(context.Background(), "k", waiter{})
	if err != nil {
		t.Fatal(err)
	}
	l := &Lock{key: "k", state: provisional}
	if !l.keep(&tn) || tn != nil || l.baton == nil || l.state != held {
		t.Fatalf("keep: baton left with the Acquire %v, lock's %v, state %v", tn, l.baton, l.state)
	}
	again := &baton{}
	if l.keep(&again) || again == nil {
		t.Fatal("a held lock was kept twice")
	}
	for _, l := range []*Lock{
		{key: "k", state: provisional, cause: &LostError{Key: "k", Reason: LostForceReleased}},
		{key: "k", state: releasing},
		{key: "k", state: released},
	} {
		mine := &baton{}
		if l.keep(&mine) || mine == nil || l.baton != nil {
			t.Errorf("kept a lock in state %v (cause %v), or took the baton", l.state, l.cause)
		}
	}
}

// A baton goes to the next waiter at most once: passing or handing a spent baton does
// nothing, so a holder's release and a second path (a force release, a handoff) cannot
// give two waiters the key's baton at once.
func TestBatonIsSpentOnce(t *testing.T) {
	qs := newQueues()
	ctx := context.Background()
	first, _, queued, err := qs.take(ctx, "k", waiter{})
	if err != nil || queued {
		t.Fatalf("first take: queued %v, %v", queued, err)
	}
	type taken struct {
		tn     *baton
		handed *Lock
	}
	got := make(chan taken, 2)
	for range 2 {
		go func() {
			tn, handed, _, err := qs.take(ctx, "k", waiter{})
			if err != nil {
				t.Error(err)
			}
			got <- taken{tn, handed}
		}()
	}
	if !eventually(3*time.Second, func() bool { return qs.waiting()["k"] == 2 }) {
		t.Fatal("timed out waiting for: two waiters queue")
	}
	first.pass(false)
	second := (<-got).tn
	first.pass(false) // spent: must not wake the third
	if first.handTo(&Lock{}, qs.forceNow("k"), func(waiter) bool { return true }, func(waiter) {}) {
		t.Fatal("a spent baton handed a lock on")
	}
	select {
	case <-got:
		t.Fatal("a spent baton was passed again: two callers own the key's baton")
	case <-time.After(100 * time.Millisecond):
	}
	if n := qs.waiting()["k"]; n != 1 {
		t.Fatalf("%d waiting, want 1", n)
	}
	// The second caller hands its baton on with a lock: the third gets both.
	l := &Lock{key: "k"}
	if !second.handTo(l, qs.forceNow("k"), func(waiter) bool { return true }, func(waiter) {}) {
		t.Fatal("handTo found no waiter")
	}
	third := <-got
	if third.handed != l {
		t.Fatalf("the third caller took %p, want the handed lock %p", third.handed, l)
	}
	second.pass(false) // spent by handTo: a no-op
	third.tn.pass(false)
	if n := len(qs.m); n != 0 {
		t.Fatalf("%d lines left after every baton was spent", n)
	}
}

// Every way a Lock is made gives it its state explicitly: a reader that joins its
// client's group has no round to keep and starts held (the zero state is provisional,
// which would refuse HandOver's and renewals' checks in ways nobody asked for).
func TestJoinedReaderStartsHeld(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	r1 := mustAcquire(t, c, "doc", read)
	c.readers.mu.Lock()
	c.readers.m["doc"].window = time.Minute // take joiners whatever the machine's speed
	c.readers.mu.Unlock()
	r2, err := c.Acquire(ctx, "doc", read)
	if err != nil {
		t.Fatal(err)
	}
	if r2.readGroup() == nil || r2.readGroup() != r1.readGroup() {
		t.Fatal("the second reader did not join the first one's group")
	}
	r2.mu.Lock()
	st := r2.state
	r2.mu.Unlock()
	if st != held {
		t.Fatalf("joined reader's state %v, want held", st)
	}
	for _, l := range []*Lock{r2, r1} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
