package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// (Found by review.) force releases of a key (by the same client) racing acquires of it (local
// handoffs, pipelined and not). Invariant checked whenever no force release is under
// way: a lock Acquire returned that is not marked lost has its value on a quorum of
// nodes (else it is "valid while its keys are gone").
func TestForceReleaseVsAcquire(t *testing.T) {
	skipShort(t)
	for _, nopipe := range []bool{false, true} {
		servers := redistest.StartN(t, 3)
		opt := fastOptions()
		opt.DisablePipelining = nopipe
		c := newTestClient(t, servers, opt)
		waitRunIDs(t, c)
		ctx := context.Background()
		var (
			forcing  sync.RWMutex
			checked  atomic.Int64
			lostSeen atomic.Int64
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := c.Acquire(ctx, "forced", AcquireOptions{Wait: time.Second, Fencing: g%2 == 0})
					if err != nil {
						continue
					}
					time.Sleep(time.Duration(rand.IntN(800)) * time.Microsecond) // a random hold: the interleavings under test
					forcing.RLock()
					if l.err() == nil {
						st, err := c.Inspect(ctx, "forced")
						if err == nil && l.err() == nil && c.holding("forced") == l {
							checked.Add(1)
							if !st.HeldHere {
								t.Errorf("pipelining=%v: lock (handed %v, attempts %d) valid (%v left) while its value is on no quorum: %+v",
									!nopipe, l.Info().Handed, l.Info().Attempts, l.validity(), st.Nodes)
							}
						}
					} else {
						lostSeen.Add(1)
					}
					forcing.RUnlock()
					if rand.IntN(2) == 0 && l.HandOver() {
						continue
					}
					_ = l.Release(ctx)
				}
			})
		}
		wg.Go(func() {
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				forcing.Lock()
				_, _ = c.ForceRelease(ctx, "forced")
				forcing.Unlock()
				time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond) // the force releases' random pace
			}
			close(stop)
		})
		wg.Wait()
		t.Logf("pipelining=%v: checked %d, lost %d", !nopipe, checked.Load(), lostSeen.Load())
	}
}

// Focused on the handoff window: two callers per key hand the lock back and forth
// (Release with the other one queued) while force releases of the key run back to back.
// A force release that runs entirely between the releaser's endLocally (the lock is
// "released", so ForceRelease's markLost is a no-op) and its handTo (forcing is back to
// 0) deletes the value, and the lock is then handed on as valid.
func TestForceReleaseDuringHandoff(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	c := newTestClient(t, servers, opt)
	waitRunIDs(t, c)
	ctx := context.Background()
	keys := []string{"ho1", "ho2", "ho3", "ho4", "ho5", "ho6"}
	var (
		bad, checked atomic.Int64
		wg           sync.WaitGroup
	)
	stop := make(chan struct{})
	for _, key := range keys {
		var forcing sync.RWMutex
		for range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := c.Acquire(ctx, key, AcquireOptions{Wait: time.Second})
					if err != nil {
						continue
					}
					{ // every holder checks: the force release waiting for the write lock then runs while the holder releases
						forcing.RLock()
						if l.err() == nil {
							// The lock's own value, node by node (not Inspect, which compares
							// with the client's last registered lock of the key: for a moment
							// that can be another caller's lock being given up).
							on, err := valueOnNodes(ctx, c, key, l.value)
							if err == nil && l.err() == nil {
								checked.Add(1)
								if on < c.quorum && bad.Add(1) == 1 {
									t.Errorf("lock (handed %v) valid (%v left) while its value is on %d nodes", l.Info().Handed, l.validity(), on)
								}
							}
						}
						forcing.RUnlock()
					}
					_ = l.Release(ctx)
				}
			})
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				forcing.Lock()
				_, _ = c.ForceRelease(ctx, key)
				forcing.Unlock()
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // the force releases' random pace
			}
		})
	}
	dur := 3 * time.Second
	if s := os.Getenv("REDLOCK_STRESS_SECONDS"); s != "" {
		n, _ := strconv.Atoi(s)
		dur = time.Duration(n) * time.Second
	}
	time.Sleep(dur) // the stress's duration
	close(stop)
	wg.Wait()
	t.Logf("handed locks checked %d, valid with keys gone %d", checked.Load(), bad.Load())
}

// A force release that falls between a round's win and its Acquire keeping the lock
// (the lock is registered, so ForceRelease marks it lost and releases it) must not pass
// the key's baton on: the Acquire still owns it, gives the lock up and tries again. Passing
// it let a second caller of this client contend for the key at the same time, and the
// first one's release later passed the baton a second time. (Found by
// TestForceReleaseDuringHandoff under load: two owners' rounds interleaved on one key.)
func TestForceReleaseLeavesTheBatonWithTheAcquire(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, c)
	ctx := context.Background()
	const key = "turn"
	ttl := 2 * time.Second
	// The first caller owns the baton and its round just won (as in tryOnce and try).
	tn, _, _, err := c.queues.take(ctx, key, waiter{ttl: ttl, since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	settled := make(chan struct{})
	close(settled)
	c.pending.add(1) // the round's count, which newLock ends
	l := c.newLock(c.names(key), key, "first:1", ttl, false, mode{}, time.Now(), 1,
		attemptResult{validity: time.Second, roundStart: time.Now(), settled: settled})
	// A second caller queues behind it.
	got := acquireLater(ctx, c, key)
	if !eventually(3*time.Second, func() bool { return c.Status().Waiting[key] == 1 }) {
		t.Fatal("timed out waiting for: the second Acquire queues")
	}
	if _, err := c.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("the queued Acquire ran (%v) while the first still owned the key's baton", err)
	case <-time.After(300 * time.Millisecond):
	}
	if l.keep(&tn) || tn == nil {
		t.Fatal("kept a lock that a force release marked lost, or gave it the baton")
	}
	c.abandon(l)
	tn.pass(false) // the first caller gives the baton back
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("queued Acquire: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued Acquire never got the baton")
	}
}

// valueOnNodes counts the nodes whose key holds value, read through the client's own
// connections.
func valueOnNodes(ctx context.Context, c *Client, key, value string) (int, error) {
	n := 0
	for _, nd := range c.nodes {
		r := nd.tr.Do(ctx, "get", defaultPrefix+key)
		v, err := r.Text()
		if err != nil && !r.IsNil() {
			return 0, err
		}
		if v == value {
			n++
		}
	}
	return n, nil
}

// A force release of a lock handed to a waiter that has not taken it yet (its baton came
// with the lock) must leave the baton with that waiter, which then contends for the key
// itself: passing the baton on let a newcomer contend at the same time. (Found with an
// event log under TestForceReleaseDuringHandoff.)
func TestForceReleaseOfAHandedLockLeavesTheBatonWithItsWaiter(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, c)
	ctx := context.Background()
	const key = "handed-turn"
	ttl := c.opt.TTL
	held, err := c.Acquire(ctx, key, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A waiter queues (as baton does), and is handed the lock with the baton; it has not
	// run yet to take it.
	c.queues.mu.Lock()
	q := c.queues.m[key]
	w := waiter{ch: make(chan struct{}), ttl: ttl, since: time.Now()}
	q.waiters = append(q.waiters, w)
	q.refs++
	tn := &baton{qs: c.queues, q: q} // the waiter's baton, as take makes it
	c.queues.mu.Unlock()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.ch:
	default:
		t.Fatal("the lock was not handed to the waiter")
	}
	if _, err := c.ForceRelease(ctx, key); err != nil {
		t.Fatal(err)
	}
	// A newcomer must queue behind the waiter, not find the baton free.
	got := acquireLater(ctx, c, key)
	select {
	case err := <-got:
		t.Fatalf("a newcomer ran (%v) while the waiter owned the key's baton", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The waiter takes what it was handed: a force-released lock, which it gives up,
	// keeping the baton; it then gives the baton back.
	handed := tn.takeHanded()
	if handed == nil || handed.keep(&tn) || tn == nil {
		t.Fatalf("took %v, want a force-released lock that is not kept", handed)
	}
	c.abandon(handed)
	tn.pass(false)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("newcomer: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the newcomer never got the baton")
	}
}

// acquireLater runs an Acquire of key (waiting up to 5 s) and its Release on another
// goroutine; the channel gets the outcome.
func acquireLater(ctx context.Context, c *Client, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, key, AcquireOptions{Wait: 5 * time.Second})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	return got
}

// (Found by the simulation, seeds 144522392612 and 144522393418: a false alarm of its
// ledger, and the promise it now checks.) Another client's force release frees a fenced
// lock of client a, which learns it only at the lock's next renewal; a local handoff
// before then takes no round trip, so the handed lock holds the same deleted values.
// Client c takes the key after the force: its token comes from counters the freed lock's
// reserve had raised, so it is above every token the freed lock may hand on, and the
// handed lock (token + 1) is below it: fenced storage refuses the handed lock's writes.
// The handed lock is lost at its next renewal (docs/safety.md, "Force release").
func TestHandoffOfALockAnotherClientForceReleased(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	fence := AcquireOptions{Wait: 5 * time.Second, Fencing: true}
	l, err := a.Acquire(ctx, "k", fence)
	if err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, a, "k", fence)
	res, err := b.ForceRelease(ctx, "k")
	if err != nil || res.Deleted != len(servers) {
		t.Fatalf("force release: %+v, %v", res, err)
	}
	lc, err := c.Acquire(ctx, "k", AcquireOptions{Wait: time.Second, Fencing: true})
	if err != nil {
		t.Fatalf("c after the force release: %v", err)
	}
	defer func() { _ = lc.Release(ctx) }()
	if lc.Token() <= l.Token()+int64(a.opt.HandoffLimit) {
		t.Fatalf("c's token %d not above a's %d and its handoff reserve %d", lc.Token(), l.Token(), a.opt.HandoffLimit)
	}
	if !l.HandOver() {
		t.Fatal("a did not hand its lock on (it cannot know of b's force release without a round trip)")
	}
	next := receive(t, waiter)
	defer func() { _ = next.Release(ctx) }()
	if !next.Info().Handed || next.Token() != l.Token()+1 {
		t.Fatalf("a's waiter: handed %v token %d, want a handed lock with token %d", next.Info().Handed, next.Token(), l.Token()+1)
	}
	if next.Token() >= lc.Token() {
		t.Fatalf("the handed lock's token %d is not below c's %d: fenced storage would take its writes", next.Token(), lc.Token())
	}
	// Its next renewal finds c's value on every node: lost.
	lctx, cancel := next.Context(ctx)
	defer cancel()
	if err := next.KeepAlive(20*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the handed lock of a force-released lock was not lost at its renewal")
	}
	var lost *LostError
	if !errors.As(context.Cause(lctx), &lost) || lost.Reason != LostTaken {
		t.Fatalf("the handed lock ended with %v, want a LostError (%s)", context.Cause(lctx), LostTaken)
	}
}
