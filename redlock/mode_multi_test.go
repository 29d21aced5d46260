package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Transfers A->B, B->A, B->C, C->A ... at once from two clients: all finish (no
// deadlock), and no account is in two transfers at once.
func TestAcquireAllTransfersNoDeadlock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	pairs := [][2]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a"}, {"a", "c"}, {"c", "b"}}
	var inside [3]atomic.Int32
	var done atomic.Int32
	var wg sync.WaitGroup
	for ci := 0; ci < 2; ci++ {
		c := newTestClient(t, servers, fastOptions())
		for w := 0; w < 6; w++ {
			wg.Go(func() {
				for i := 0; i < 6; i++ {
					p := pairs[(w+i+ci)%len(pairs)]
					locks, err := c.AcquireAll(context.Background(), []string{"acct:" + p[0], "acct:" + p[1]}, AcquireOptions{Wait: 20 * time.Second, Fencing: true})
					if err != nil {
						t.Errorf("transfer %v: %v", p, err)
						return
					}
					if len(locks) != 2 || locks[0].key >= locks[1].key {
						t.Errorf("locks not in sorted order: %v %v", locks[0].key, locks[1].key)
					}
					for _, acct := range p {
						if n := inside[acct[0]-'a'].Add(1); n != 1 {
							t.Errorf("account %s in %d transfers at once", acct, n)
						}
					}
					time.Sleep(2 * time.Millisecond) // the transfer: a workload's duration
					for _, acct := range p {
						inside[acct[0]-'a'].Add(-1)
					}
					for _, l := range locks {
						if err := l.Release(context.Background()); err != nil {
							t.Errorf("release: %v", err)
						}
					}
					done.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if done.Load() != 72 {
		t.Fatalf("%d of 72 transfers done", done.Load())
	}
}

// All or nothing: a key held elsewhere fails the set, and the keys taken before it are
// free again. Duplicates are merged; too many keys and no key are refused.
func TestAcquireAllAllOrNothing(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	held := mustAcquire(t, b, "k2", AcquireOptions{})
	_, err := a.AcquireAll(context.Background(), []string{"k3", "k1", "k2"}, AcquireOptions{Wait: 100 * time.Millisecond})
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Key != "k2" {
		t.Fatalf("AcquireAll with k2 held elsewhere: %v, want busy on k2", err)
	}
	// k1 was taken before k2 failed: it is free again (k3 was never tried).
	l := mustAcquire(t, b, "k1", AcquireOptions{Wait: time.Second})
	_ = l.Release(context.Background())
	_ = held.Release(context.Background())

	locks, err := a.AcquireAll(context.Background(), []string{"x", "y", "x"}, AcquireOptions{Wait: time.Second})
	if err != nil || len(locks) != 2 {
		t.Fatalf("duplicates: %d locks, %v", len(locks), err)
	}
	for _, l := range locks {
		_ = l.Release(context.Background())
	}
	many := make([]string, MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	if _, err := a.AcquireAll(context.Background(), many, AcquireOptions{}); err == nil {
		t.Fatal("more than MaxKeys keys accepted")
	}
	if _, err := a.AcquireAll(context.Background(), nil, AcquireOptions{}); err == nil {
		t.Fatal("no key accepted")
	}
	if _, err := a.AcquireAll(context.Background(), []string{"m1"}, AcquireOptions{Wait: -time.Second}); err == nil || !strings.Contains(err.Error(), "wait must be >= 0") {
		t.Fatalf("a negative wait: %v, want it refused as Acquire refuses it", err)
	}
	// Every mode: a shared set and a limited set.
	for _, o := range []AcquireOptions{{Shared: true}, {Limit: 2}} {
		locks, err := a.AcquireAll(context.Background(), []string{"m2", "m1"}, o)
		if err != nil || !slices.EqualFunc(locks, []string{"m1", "m2"}, func(l *Lock, k string) bool { return l.key == k }) {
			t.Fatalf("%+v: %v", o, err)
		}
		for _, l := range locks {
			_ = l.Release(context.Background())
		}
	}
}
