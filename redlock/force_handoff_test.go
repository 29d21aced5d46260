package redlock

import (
	"context"
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
// the key's turn on: the Acquire still owns it, gives the lock up and tries again. Passing
// it let a second caller of this client contend for the key at the same time, and the
// first one's release later passed the turn a second time. (Found by
// TestForceReleaseDuringHandoff under load: two owners' rounds interleaved on one key.)
func TestForceReleaseLeavesTheTurnWithTheAcquire(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, c)
	ctx := context.Background()
	const key = "turn"
	ttl := 2 * time.Second
	// The first caller owns the turn and its round just won (as in tryOnce and try).
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
		t.Fatalf("the queued Acquire ran (%v) while the first still owned the key's turn", err)
	case <-time.After(300 * time.Millisecond):
	}
	if l.keep(&tn) || tn == nil {
		t.Fatal("kept a lock that a force release marked lost, or gave it the turn")
	}
	c.abandon(l)
	tn.pass(false) // the first caller gives the turn back
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("queued Acquire: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued Acquire never got the turn")
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

// A force release of a lock handed to a waiter that has not taken it yet (its turn came
// with the lock) must leave the turn with that waiter, which then contends for the key
// itself: passing the turn on let a newcomer contend at the same time. (Found with an
// event log under TestForceReleaseDuringHandoff.)
func TestForceReleaseOfAHandedLockLeavesTheTurnWithItsWaiter(t *testing.T) {
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
	// A waiter queues (as turn does), and is handed the lock with the turn; it has not
	// run yet to take it.
	c.queues.mu.Lock()
	q := c.queues.m[key]
	w := waiter{ch: make(chan struct{}), ttl: ttl, since: time.Now()}
	q.waiters = append(q.waiters, w)
	q.refs++
	tn := &turn{qs: c.queues, q: q} // the waiter's turn, as take makes it
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
	// A newcomer must queue behind the waiter, not find the turn free.
	got := acquireLater(ctx, c, key)
	select {
	case err := <-got:
		t.Fatalf("a newcomer ran (%v) while the waiter owned the key's turn", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The waiter takes what it was handed: a force-released lock, which it gives up,
	// keeping the turn; it then gives the turn back.
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
		t.Fatal("the newcomer never got the turn")
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
