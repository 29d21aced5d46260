package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A limit waiter queued behind an exclusive holder of the same key (one client, two
// routes) must not be handed that holder's lock: it holds no place of the key, and
// another client could then hold all n places at once (n+1 holders). It takes a place.
func TestHandoffNeverGivesALimitWaiterAnExclusiveLock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	excl, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, a, "k", AcquireOptions{Wait: 5 * time.Second, Limit: 2})
	if err := excl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := receive(t, waiter)
	defer got.Release(ctx)
	if got.Info().Handed {
		t.Fatal("the limit waiter was handed the exclusive lock")
	}
	// The waiter holds one of the 2 places: another client gets the other one, and no more.
	other, err := b.Acquire(ctx, "k", AcquireOptions{Limit: 2})
	if err != nil {
		t.Fatalf("the second place: %v", err)
	}
	defer other.Release(ctx)
	if third, err := b.Acquire(ctx, "k", AcquireOptions{Limit: 2}); err == nil {
		third.Release(ctx)
		t.Fatal("3 holders of a limit-2 key")
	} else if !isBusy(err) {
		t.Fatalf("third holder: %v, want busy", err)
	}
}

// The locks of several keys taken together and single-key locks are never handed to each
// other, and an exclusive lock never goes to a waiter of another ttl or fencing.
func TestHandoffStaysWithinAMode(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	cases := []struct {
		name        string
		holderMulti bool
		waiter      AcquireOptions
		waiterMulti bool
		handed      bool
	}{
		{"exclusive to exclusive", false, AcquireOptions{}, false, true},
		{"exclusive to several keys", false, AcquireOptions{}, true, false},
		{"several keys to exclusive", true, AcquireOptions{}, false, false},
		{"several keys to several keys", true, AcquireOptions{}, true, true},
		{"exclusive to fencing", false, AcquireOptions{Fencing: true}, false, false},
		{"exclusive to limit", false, AcquireOptions{Limit: 3}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			take := func(o AcquireOptions, multi bool) (*Lock, error) {
				if multi {
					ls, err := c.AcquireAll(ctx, []string{"m"}, o)
					if err != nil {
						return nil, err
					}
					return ls[0], nil
				}
				return c.Acquire(ctx, "m", o)
			}
			holder, err := take(AcquireOptions{}, tc.holderMulti)
			if err != nil {
				t.Fatal(err)
			}
			before := c.queues.waiting()["m"]
			got := make(chan *Lock, 1)
			o := tc.waiter
			o.Wait = 5 * time.Second
			go func() {
				l, err := take(o, tc.waiterMulti)
				if err != nil {
					t.Errorf("waiter: %v", err)
					close(got)
					return
				}
				got <- l
			}()
			if !eventually(3*time.Second, func() bool { return c.queues.waiting()["m"] == before+1 }) {
				t.Fatal("timed out waiting for: waiter queued")
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := receive(t, got)
			if l.Info().Handed != tc.handed {
				t.Fatalf("handed = %v, want %v", l.Info().Handed, tc.handed)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
