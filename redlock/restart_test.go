package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Two nodes of three restart without persistence while A holds the key. Were they to
// vote at once, B would win them and two clients would hold the key. The delayed-restart
// rule keeps them out until ttl + drift has passed, by which time A's lock has lapsed.
func TestRestartedNodesDoNotVoteDuringQuarantine(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 1500 * time.Millisecond
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	waitRunIDs(t, b)
	ctx := context.Background()
	la, err := a.Acquire(ctx, "restart", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[:2] {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = b.Acquire(ctx, "restart", AcquireOptions{})
	if err == nil {
		t.Fatal("B acquired while A's lock was still valid: restarted nodes voted")
	}
	if la.validity() > 0 && !isUnavailable(err) && !isBusy(err) {
		t.Fatalf("unexpected error: %v", err)
	}
	// Both restarts are seen (by a new connection or the next health check) and quarantined.
	if !eventually(3*time.Second, func() bool {
		q := 0
		for _, s := range b.Status().Nodes {
			if !s.QuarantinedUntil.IsZero() {
				q++
			}
		}
		return q == 2
	}) {
		t.Fatal("timed out waiting for: two nodes quarantined")
	}
	if _, err := b.Acquire(ctx, "restart", AcquireOptions{}); err == nil && la.validity() > 0 {
		t.Fatal("B acquired during the quarantine while A's lock was valid")
	}
	// After the quarantine the nodes vote again and B gets the key. Wait for the end of
	// the quarantine the client reports, not for a fixed time: it starts when the restart
	// is first seen, which is as late as B's first acquire after it.
	if !eventually(10*time.Second, func() bool {
		for _, s := range b.Status().Nodes {
			if !s.QuarantinedUntil.IsZero() {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("quarantine not over: %+v", b.Status().Nodes)
	}
	lb, err := b.Acquire(ctx, "restart", AcquireOptions{Wait: 3 * opt.TTL})
	if err != nil {
		t.Fatalf("after quarantine: %v", err)
	}
	_ = lb.Release(ctx)
}

// A client that never saw the nodes before (a Caddy start or reload) cannot notice a
// restart by its run_id. A holds the key on nodes 0-2 (3 and 4 lost it: deleted here);
// node 0 restarts empty. Were new client B to count node 0's vote, nodes 0, 3 and 4 would
// give it the key A holds. Node 0's uptime gives it away: it is held back like a restart.
func TestNewClientHoldsBackYoungNode(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 5)
	opt := fastOptions()
	a := newTestClient(t, servers, opt)
	ctx := context.Background()
	// Let the nodes age past a quarantine and well apart from node 0's coming restart
	// (start times are known to within a couple of seconds): only node 0 will be young.
	time.Sleep(opt.TTL + 4*time.Second) // the nodes' age (uptime): a duration under test
	la, err := a.Acquire(ctx, "young", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[3:] {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.Del(ctx, defaultPrefix+"young").Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	if err := servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	b := newTestClient(t, servers, opt)
	_, err = b.Acquire(ctx, "young", AcquireOptions{})
	if err == nil {
		t.Fatal("new client B acquired the key A holds: the just-restarted node voted")
	}
	if !isBusy(err) || la.validity() <= 0 {
		t.Fatalf("B: %v (A's validity %v), want busy", err, la.validity())
	}
	waitRunIDs(t, b)
	if st := b.Status().Nodes[0]; st.QuarantinedUntil.IsZero() {
		t.Fatalf("node 0 not shown as quarantined: %+v", st)
	}
	for i, st := range b.Status().Nodes[1:] {
		if !st.QuarantinedUntil.IsZero() {
			t.Fatalf("node %d (old) shown quarantined: %+v", i+1, st)
		}
	}
}

// Nodes that all started just now (a new deployment) are a fresh start: a new client
// uses them at once, first try included.
func TestFreshNodesVoteAtOnce(t *testing.T) {
	servers := redistest.StartN(t, 5)
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(context.Background(), "fresh", AcquireOptions{})
	if err != nil {
		t.Fatalf("first acquire on fresh nodes: %v", err)
	}
	_ = l.Release(context.Background())
	waitRunIDs(t, c)
	for i, st := range c.Status().Nodes {
		if !st.QuarantinedUntil.IsZero() {
			t.Fatalf("fresh node %d shown quarantined", i)
		}
	}
}

// freshStart compares start times, not how young each node looked when first seen: nodes
// started within a couple of seconds of each other, and still young, are one fresh start
// however late a client first sees them; a node that started alone, later, is not, nor
// one that started with nodes no longer young; unseen nodes never count.
func TestFreshStartByStartTimes(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions()) // quarantine: ttl 2s + drift
	waitRunIDs(t, c)                              // first sightings done: nothing overwrites the start times set below
	now := time.Now()
	for _, tc := range []struct {
		name   string
		starts []time.Duration // per node, before now; < 0: not seen yet
		fresh  bool            // for node 2
	}{
		{"together", []time.Duration{time.Second, time.Second, 0}, true},
		{"alone, later", []time.Duration{time.Hour, time.Hour, 0}, false},
		{"with one other", []time.Duration{time.Hour, 0, 0}, true},
		{"with others no longer young", []time.Duration{2100 * time.Millisecond, 2100 * time.Millisecond, 0}, false},
		{"others unseen", []time.Duration{-1, -1, 0}, false},
		{"itself unseen", []time.Duration{0, 0, -1}, false},
	} {
		for i, nd := range c.nodes {
			if tc.starts[i] < 0 {
				nd.startedAt.Store(0)
			} else {
				nd.startedAt.Store(now.Add(-tc.starts[i]).UnixNano())
			}
		}
		if got := freshStartOf(c.nodes[2].facts(), c.allFacts(), c.quorum, c.quarantine(), time.Now()); got != tc.fresh {
			t.Errorf("%s: freshStart = %v, want %v", tc.name, got, tc.fresh)
		}
	}
}

// Redis reports uptime as floor(now) - floor(start): a run reported 1 s old may have
// started a moment ago. The start is taken as late as that allows, and the hold-back
// follows the longest ttl any client announced to the nodes, not the one known when the
// node was first seen.
func TestYoungWindowIsConservative(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	n := &node{addr: "test", c: c} // not one of c's nodes: nothing else observes it
	n.observe("run_id:abc\r\nuptime_in_seconds:1\r\n", transport.Reply{})
	if age := time.Since(time.Unix(0, n.startedAt.Load())); age < 0 || age > 500*time.Millisecond {
		t.Fatalf("uptime 1 s dated the start %v ago, want about now", age)
	}
	if until := n.youngUntil(time.Now()); time.Until(until) < time.Second {
		t.Fatalf("young until %v from now, want about ttl 2s", time.Until(until))
	}
	// Another client, with a 10s ttl, starts using the node: it announces its bound, and
	// c's next health check reads it.
	long := fastOptions()
	long.TTL = 10 * time.Second
	other := newTestClient(t, servers, long)
	if _, err := other.Acquire(context.Background(), "long", AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	if !eventually(3*time.Second, func() bool { return c.bound() == 10*time.Second }) {
		t.Fatal("timed out waiting for: c learns the 10s bound")
	}
	// c's own node started long ago (as seen once, which sticks): n, started alone, is
	// no fresh start.
	waitRunIDs(t, c)
	c.nodes[0].startedAt.Store(time.Now().Add(-time.Hour).UnixNano())
	if until := n.youngUntil(time.Now()); time.Until(until) < 9*time.Second {
		t.Fatalf("after a 10s lock: young for %v more, want about 10s", time.Until(until))
	}
	if q := n.quarantinedUntil(time.Now()); q.IsZero() {
		t.Fatal("a young node that started alone is not held back")
	}
}
