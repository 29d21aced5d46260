package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Several independent clients (as separate processes would be) hammer a few keys; the
// critical section of each key must never be entered twice at once.
func TestMutualExclusion(t *testing.T) {
	servers := redistest.StartN(t, 5)
	const clients, workers, iterations, keys = 4, 4, 25, 3
	var inside [keys]atomic.Int32
	var entered atomic.Int64
	var wg sync.WaitGroup
	for ci := 0; ci < clients; ci++ {
		c := newTestClient(t, servers, fastOptions())
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iterations; i++ {
					k := (ci + w + i) % keys
					l, err := c.Acquire(context.Background(), fmt.Sprintf("mutex-%d", k), AcquireOptions{Wait: 10 * time.Second})
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if n := inside[k].Add(1); n != 1 {
						t.Errorf("key %d: %d holders at once", k, n)
					}
					entered.Add(1)
					time.Sleep(time.Millisecond) // the hold: a workload's duration
					inside[k].Add(-1)
					if err := l.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if got, want := entered.Load(), int64(clients*workers*iterations); got != want {
		t.Fatalf("entered %d critical sections, want %d", got, want)
	}
}

// Release compares values: a holder whose lock expired cannot delete the next holder's key,
// and its extend reports the loss.
func TestReleaseNeverDeletesAnotherHoldersKey(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 700 * time.Millisecond
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	ctx := context.Background()
	la, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-la.done.Done() // expires: nobody renews it
	if !isLost(la.err()) {
		t.Fatalf("lost reason = %v, want a LostError", la.err())
	}
	lb, err := b.Acquire(ctx, "k", AcquireOptions{Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	if _, err := la.extend(ctx); !isLost(err) {
		t.Fatalf("extend of expired lock: %v, want a LostError", err)
	}
	_ = la.Release(ctx)
	st, err := b.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !st.QuorumHeld || !st.HeldHere || st.Present < 2 {
		t.Fatalf("B's lock was disturbed by A's release: %+v", st)
	}
}

// An extend after another client took the key says "taken" at once.
func TestExtendAfterTakeoverReportsLoss(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = time.Second
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	ctx := context.Background()
	la, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// B forces the key away (as an operator would) and takes it.
	if _, err := b.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	_, err = la.extend(ctx)
	var lost *LostError
	if !errors.As(err, &lost) || lost.Reason != LostTaken {
		t.Fatalf("extend after takeover: %v, want LostError{taken}", err)
	}
	select {
	case <-la.done.Done():
	default:
		t.Fatal("Context not cancelled after a definitive extend failure")
	}
}
