package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A lock renewed by KeepAlive stays held for 5 x ttl.
func TestKeepAliveHoldsPastTTL(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 600 * time.Millisecond
	opt.NodeTimeout = 150 * time.Millisecond
	other := newTestClient(t, servers, opt)
	obs := &countingObserver{}
	opt.Observer = obs
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "ka", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(opt.TTL/3, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * opt.TTL)
	for time.Now().Before(deadline) {
		select {
		case <-l.done.Done():
			t.Fatalf("lost while renewing: %v", l.err())
		case <-time.After(opt.TTL / 2):
		}
		if _, err := other.Acquire(ctx, "ka", AcquireOptions{}); !isBusy(err) {
			t.Fatalf("another client got the key while it was renewed: %v", err)
		}
	}
	if l.Info().Renewals < 10 {
		t.Fatalf("renewals = %d over 5 x ttl at ttl/3, want >= 10", l.Info().Renewals)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// After Release: no renewal is in flight any more (one counted by the lock but not yet
	// reported to the observer).
	if ok, calls := obs.renewOK.Load(), obs.calls.Load(); ok != int64(l.Info().Renewals) || calls < 3*ok {
		t.Fatalf("observer saw %d good renewals (lock says %d) and %d node calls", ok, l.Info().Renewals, calls)
	}
	if _, err := other.Acquire(ctx, "ka", AcquireOptions{}); err != nil {
		t.Fatalf("key not free after release: %v", err)
	}
}

// Cutting a majority mid-hold signals loss no later than the end of validity, so the
// holder stops before any other client can have the key.
func TestKeepAliveSignalsLossWhenMajorityCut(t *testing.T) {
	servers := redistest.StartN(t, 5)
	opt := fastOptions()
	opt.TTL = time.Second
	opt.NodeTimeout = 100 * time.Millisecond
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "cut", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(opt.TTL/3, 0); err != nil {
		t.Fatal(err)
	}
	// Mid-hold: once renewed, so that the validity below is a renewal's.
	if !eventually(3*time.Second, func() bool { return l.Info().Renewals >= 1 }) {
		t.Fatal("timed out waiting for: a first renewal")
	}
	for _, s := range servers[:3] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	until := l.validUntil() // validity as of the last successful renewal
	select {
	case <-l.done.Done():
	case <-time.After(2 * opt.TTL):
		t.Fatal("loss not signalled")
	}
	lostAt := time.Now()
	if !isLost(l.err()) {
		t.Fatalf("Err = %v, want a LostError", l.err())
	}
	// The signal comes at the end of validity at the latest (small slack for the timer
	// goroutine to be scheduled); keys on the nodes live until at least validity + drift.
	if slack := lostAt.Sub(until); slack > drift(opt.TTL, opt.DriftFactor)+50*time.Millisecond {
		t.Fatalf("loss signalled %v after validity ended", slack)
	}
	for _, s := range servers[:3] {
		_ = s.Resume()
	}
	_ = l.Release(ctx)
}

// max_hold caps the total hold: the lock is marked lost and renewals stop.
func TestKeepAliveMaxHold(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(context.Background(), "maxhold", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(c.opt.TTL/3, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.done.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("max_hold did not end the hold")
	}
	var lost *LostError
	if !errors.As(l.err(), &lost) || lost.Reason != LostMaxHold {
		t.Fatalf("Err = %v, want max_hold", l.err())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type countingObserver struct{ calls, renewOK, renewErr atomic.Int64 }

func (o *countingObserver) NodeCall(node, op string, rtt time.Duration, err error) { o.calls.Add(1) }
func (o *countingObserver) Renewal(err error) {
	if err == nil {
		o.renewOK.Add(1)
	} else {
		o.renewErr.Add(1)
	}
}

// Many held locks are renewed in one script call per node per tick, not one per lock.
func TestRenewalsAreBatched(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 900 * time.Millisecond
	opt.NodeTimeout = 200 * time.Millisecond
	obs := &extendCounter{}
	opt.Observer = obs
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	const locks = 50
	var held []*Lock
	for i := 0; i < locks; i++ {
		l, err := c.Acquire(ctx, fmt.Sprintf("batch-%d", i), AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.KeepAlive(opt.TTL/3, 0); err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var short *Lock
	if !eventually(10*time.Second, func() bool {
		short = nil
		for _, l := range held {
			if l.Info().Renewals < 3 {
				short = l
				return false
			}
		}
		return true
	}) {
		t.Fatalf("%s renewed %d times, want >= 3", short.key, short.Info().Renewals)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	renewals := 0
	for _, l := range held {
		renewals += l.Info().Renewals
	}
	calls := obs.extends.Load()
	// One call per lock per node would be renewals*3; batched it is a small multiple of
	// the ticks. Allow a tenth of the unbatched count.
	if calls*10 > int64(renewals*3) {
		t.Fatalf("%d extend calls for %d renewals on 3 nodes: not batched", calls, renewals)
	}
	t.Logf("%d renewals in %d extend calls", renewals, calls)
}

type extendCounter struct{ extends atomic.Int64 }

func (o *extendCounter) NodeCall(node, op string, rtt time.Duration, err error) {
	if op == "extend" {
		o.extends.Add(1)
	}
}
func (o *extendCounter) Renewal(error) {}

// A key deleted on every node behind the holder's back (an operator's force release from
// another instance) is not put back by the holder's renewals: the holder loses the lock
// (reason vanished) at its next renewal and the key stays gone.
func TestRenewalDoesNotUndoForceRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(context.Background(), "forced", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(300*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	// The acquire returned at a quorum: the last node's SET may still be on its way, and
	// landing after the deletes it would stand (that is not a renewal's doing). And a
	// renewal that overlaps the deletes may still find the key on a quorum and rightly
	// re-take the node already emptied: delete just after a renewal, far from the next.
	<-l.settled
	if !eventually(3*time.Second, func() bool { return l.Info().Renewals >= 1 }) {
		t.Fatal("timed out waiting for: a first renewal")
	}
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.Del(context.Background(), defaultPrefix+"forced").Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	select {
	case <-l.done.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the holder did not notice its key was deleted on every node")
	}
	var le *LostError
	if !errors.As(l.err(), &le) || le.Reason != LostVanished {
		t.Fatalf("lost with %v, want reason %q", l.err(), LostVanished)
	}
	// A negative check, so a sleep: three renew intervals pass (nothing marks that no
	// renewal will come).
	time.Sleep(900 * time.Millisecond)
	for _, s := range servers {
		if _, ok := rawGet(t, s, "forced"); ok {
			t.Fatalf("%s: the deleted key was re-created by a renewal", s.Addr())
		}
	}
	_ = l.Release(context.Background())
}

// A node restarted without persistence lost the key; once its quarantine is over, the
// holder's renewals put the key back there (the lock still holds on a quorum), so the
// restarted node rejoins instead of wearing the quorum down.
func TestRenewalRetakesRestartedNode(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = time.Second
	c := newTestClient(t, servers, opt)
	waitRunIDs(t, c)
	l, err := c.Acquire(context.Background(), "rejoin", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	want := l.value // not a node's copy: the lock may stand on a quorum without that node
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	var got string
	if !eventually(5*time.Second, func() bool { // quarantine (ttl + drift) and a renewal
		var ok bool
		got, ok = rawGet(t, servers[0], "rejoin")
		return ok
	}) {
		t.Fatal("the restarted node never got the key back")
	}
	if got != want {
		t.Fatal("the restarted node holds another value")
	}
	if err := l.err(); err != nil {
		t.Fatalf("lock lost: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
