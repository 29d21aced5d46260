package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// counterLead returns how far (µs) a node's fencing counter for key is ahead of its clock.
func counterLead(t *testing.T, s *redistest.Server, key string) int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	ctx := context.Background()
	v, err := rc.Get(ctx, defaultPrefix+key+counterSuffix).Result()
	if err != nil {
		t.Fatalf("counter on %s: %v", s.Addr(), err)
	}
	counter, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	now, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return counter - now.UnixMicro()
}

// setCounters puts every node's counter for key lead µs ahead of the first node's clock,
// the same value everywhere, as earlier reserves would have (a large handoff reserve, or
// grants faster than the reserve).
func setCounters(t *testing.T, servers []*redistest.Server, key string, lead time.Duration) {
	t.Helper()
	ctx := context.Background()
	var value int64
	for i, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if i == 0 {
			now, err := rc.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			value = now.Add(lead).UnixMicro()
		}
		if err := rc.Set(ctx, defaultPrefix+key+counterSuffix, value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
}

// The handoff reserve is capped: with fencing it is taken in µs of the nodes' clocks.
func TestHandoffLimitCapped(t *testing.T) {
	servers := redistest.StartN(t, 1)
	opt := fastOptions()
	opt.HandoffLimit = 1_000_000
	if _, err := New(redistest.URLs(servers), opt); err == nil {
		t.Fatalf("HandoffLimit %d accepted, above the cap %d", opt.HandoffLimit, maxHandoffLimit)
	}
}

// Counters ahead of the clocks are not pushed further by the reserve: each acquire then
// adds one token, not the reserve. Today's counters start 1s ahead; after 50 acquires
// with the largest reserve they must have moved by about 50 µs, not 50 reserves.
func TestReserveDoesNotDriftAhead(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.HandoffLimit = maxHandoffLimit
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	setCounters(t, servers, "drift", time.Second)
	var first, last int64
	const n = 50
	for i := range n {
		l, err := c.Acquire(ctx, "drift", AcquireOptions{Fencing: true, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = l.Token()
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Each acquire adds 1 (the grant); the time passing does not count, the counters
	// being ahead of the clock throughout.
	if grew := last - first; grew > 2*n {
		t.Fatalf("tokens grew by %d over %d acquires ahead of the clock: the reserve (%d) drifts them further", grew, n, maxHandoffLimit)
	}
}

// A hot key with the largest reserve keeps its counters within a reserve of the clock,
// and a rolling restart of every node without data (each waited out past its quarantine)
// still gives a larger token than every token before it.
func TestTokensAfterRollingRestart(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 500 * time.Millisecond // short quarantine
	opt.HandoffLimit = maxHandoffLimit
	c := newTestClient(t, servers, opt)
	waitRunIDs(t, c)
	ctx := context.Background()
	var last int64
	for range 300 {
		l, err := c.Acquire(ctx, "rolling", AcquireOptions{Fencing: true, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	maxLead := c.tokenLead().Microseconds() + maxHandoffLimit + 2
	for i, s := range servers {
		if lead := counterLead(t, s, "rolling"); lead > maxLead {
			t.Fatalf("node %d: counter %d µs ahead of its clock, want at most the lead and reserve, %d", i, lead, maxLead)
		}
	}
	for i, s := range servers {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		if !eventually(3*time.Second, func() bool { return !c.Status().Nodes[i].QuarantinedUntil.IsZero() }) {
			t.Fatal("timed out waiting for: restart seen")
		}
		if !eventually(10*time.Second, func() bool { return c.Status().Nodes[i].QuarantinedUntil.IsZero() }) {
			t.Fatalf("node %d's quarantine not over: %+v", i, c.Status().Nodes[i])
		}
	}
	l, err := c.Acquire(ctx, "rolling", AcquireOptions{Fencing: true, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= last {
		t.Fatalf("after a rolling restart: token %d, not above the last one before (%d)", l.Token(), last)
	}
}
