package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// rawSet writes a value under a lock key on one node directly, as another client would.
func rawSet(t testing.TB, s *redistest.Server, key, value string, ttl time.Duration) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	if err := rc.Set(context.Background(), defaultPrefix+key, value, ttl).Err(); err != nil {
		t.Fatal(err)
	}
}

// holdThenRestartNode0: node 2 holds a stray value for "shared" (500ms left); a takes the
// key on nodes 0 and 1 and keeps it alive; node 0 then restarts without its data.
func holdThenRestartNode0(t *testing.T, a *Client, servers []*redistest.Server) *Lock {
	t.Helper()
	ctx := context.Background()
	rawSet(t, servers[2], "shared", "stray", 500*time.Millisecond)
	la, err := a.Acquire(ctx, "shared", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = la.Release(ctx) })
	if err := la.KeepAlive(time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	return la
}

// wantNoSecondHolder: b tries "shared" for 2s (past the stray's expiry and b's own ttl)
// and must not get it while la is valid.
func wantNoSecondHolder(t *testing.T, b *Client, la *Lock) {
	t.Helper()
	ctx := context.Background()
	if lb, err := b.Acquire(ctx, "shared", AcquireOptions{Wait: 2 * time.Second}); err == nil {
		defer lb.Release(ctx)
		if la.validity() > 0 {
			t.Fatalf("B acquired while A's lock is valid for %v more: two holders", la.validity())
		}
	}
}

// The restart quarantine must cover the longest ttl ANY client uses on the nodes, not
// this client's own. Node 2 holds a stray value for the key; A (ttl 3s) holds nodes 0
// and 1; node 0 restarts empty. B (ttl 500ms) saw the restart. Were B to quarantine node
// 0 for its own ttl only, it would win nodes 0 and 2 once the stray expired, while A's
// lock (renewals inconclusive: node 0 out, node 2 not ours) was still valid.
func TestQuarantineCoversOtherClientsTTL(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	optA := fastOptions()
	optA.TTL = 3 * time.Second
	optB := fastOptions()
	optB.TTL = 500 * time.Millisecond
	a := newTestClient(t, servers, optA)
	b := newTestClient(t, servers, optB)
	waitRunIDs(t, b)
	// Like any client that ran for a while next to A, B has read A's announcement.
	eventually(time.Second, func() bool { return b.bound() == optA.TTL }) // checked at the end

	la := holdThenRestartNode0(t, a, servers)
	if !eventually(3*time.Second, func() bool { return !b.Status().Nodes[0].QuarantinedUntil.IsZero() }) {
		t.Fatal("timed out waiting for: B sees node 0 restart")
	}
	// Tries for 2s, well past the stray's expiry and B's own ttl.
	wantNoSecondHolder(t, b, la)
	if b.bound() != optA.TTL {
		t.Fatalf("B's bound is %v, want A's ttl %v", b.bound(), optA.TTL)
	}
}

// The same for a brand-new client (a Caddy start or reload) that never saw the restart:
// the young-node hold-back uses the bound the nodes remember, not the new client's ttl.
func TestYoungNodeHoldBackCoversOtherClientsTTL(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	optA := fastOptions()
	optA.TTL = 3 * time.Second
	a := newTestClient(t, servers, optA)
	// Let the nodes age past A's quarantine and apart from node 0's coming restart, so
	// that node 0 alone will be young (not a fresh start).
	time.Sleep(optA.TTL + startedTogether + time.Second) // the nodes' age (uptime): a duration under test
	la := holdThenRestartNode0(t, a, servers)
	optB := fastOptions()
	optB.TTL = 500 * time.Millisecond
	b := newTestClient(t, servers, optB)
	wantNoSecondHolder(t, b, la)
	if b.bound() != optA.TTL {
		t.Fatalf("B's bound is %v, want A's ttl %v", b.bound(), optA.TTL)
	}
}

// A lock longer than the client's MaxTTL is refused: the quarantine would not cover it.
func TestAcquireAboveMaxTTLRefused(t *testing.T) {
	servers := redistest.StartN(t, 1)
	opt := fastOptions()
	opt.MaxTTL = 3 * time.Second
	c := newTestClient(t, servers, opt)
	if _, err := c.Acquire(context.Background(), "k", AcquireOptions{TTL: 4 * time.Second}); err == nil {
		t.Fatal("acquired with ttl 4s above max_ttl 3s")
	}
	l, err := c.Acquire(context.Background(), "k", AcquireOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
	if _, err := New(redistest.URLs(servers), Options{TTL: 5 * time.Second, MaxTTL: time.Second}); err == nil {
		t.Fatal("New accepted a ttl above max_ttl")
	}
}

// A bound no client of ours wrote (found by review: 9.2e12 ms overflowed the quarantine
// into a negative one, and a restarted node voted at once) is not believed and is
// replaced by the next announcement; nor is a value without an expiry, which would
// freeze restarted nodes out for good. A sane bound with an expiry is followed.
func TestBoundReadingsAreSane(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name   string
		stored string
		expiry time.Duration // 0: none
		want   time.Duration // the bound the client ends up with
	}{
		{"huge", "9200000000000", time.Hour, 2 * time.Second},
		{"no expiry", "3000", 0, 2 * time.Second},
		{"not a number", "x", time.Hour, 2 * time.Second},
		{"sane", "3000", time.Hour, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			ctx := context.Background()
			for _, s := range servers {
				rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
				if err := rc.Set(ctx, defaultPrefix+boundName, tc.stored, tc.expiry).Err(); err != nil {
					t.Fatal(err)
				}
				rc.Close()
			}
			opt := fastOptions() // ttl 2s
			a := newTestClient(t, servers, opt)
			b := newTestClient(t, servers, opt)
			waitRunIDs(t, b)
			waitChecks(t, a, 3) // a few health checks: A's announcements
			waitChecks(t, b, 3) // and B's readings
			if got := b.bound(); got != tc.want {
				t.Fatalf("bound %v, want %v", got, tc.want)
			}
			if q := b.quarantine(); q < tc.want {
				t.Fatalf("quarantine %v, below the bound %v", q, tc.want)
			}
			// A restart still quarantines: A holds nodes 0 and 1, node 0 restarts empty.
			rawSet(t, servers[2], "bounded", "other", 10*time.Second)
			la, err := a.Acquire(ctx, "bounded", AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer la.Release(ctx)
			rc := redis.NewClient(&redis.Options{Addr: servers[2].Addr()})
			rc.Del(ctx, defaultPrefix+"bounded")
			rc.Close()
			if err := servers[0].Restart(); err != nil {
				t.Fatal(err)
			}
			if lb, err := b.Acquire(ctx, "bounded", AcquireOptions{Wait: time.Second}); err == nil {
				defer lb.Release(ctx)
				if la.validity() > 0 {
					t.Fatalf("two holders: A valid for %v more, B acquired after node 0 restarted", la.validity())
				}
			}
		})
	}
}
