package redlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// flushScenario is the scenario up to the flush: A holds key k on nodes 1 and 2
// (a stray value held node 3 when A asked), then node 1 loses its data without a restart
// (FLUSHALL) and the stray value lapses. Both clients had read every node's marker.
type flushScenario struct {
	servers []*redistest.Server
	a, b    *Client
	held    *Lock
	flushed time.Time
}

func newFlushScenario(t *testing.T, opt Options) *flushScenario {
	ctx := context.Background()
	servers := redistest.StartN(t, 3)
	raw := func(s *redistest.Server) *redis.Client {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	if err := raw(servers[2]).Set(ctx, defaultPrefix+"k", "stray", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	fs := &flushScenario{servers: servers, a: newTestClient(t, servers, opt), b: newTestClient(t, servers, opt)}
	waitMarkers(t, fs.a)
	waitMarkers(t, fs.b)
	held, err := fs.a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Release(ctx) })
	<-held.settled // A's SET on node 3 was refused there, not still on its way
	fs.held, fs.flushed = held, time.Now()
	if err := raw(servers[0]).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw(servers[2]).Del(ctx, defaultPrefix+"k").Err(); err != nil {
		t.Fatal(err)
	}
	return fs
}

// After the flush, B's next health checks see node 1's marker gone: it does not vote, and
// B does not get the key (it would hold it on nodes 1 and 3 while A trusts its lock).
func TestFlushedNodeDoesNotVote(t *testing.T) {
	fs := newFlushScenario(t, fastOptions())
	// B's next health checks see it (they run every 50ms here).
	if !eventually(3*time.Second, func() bool {
		return fs.b.Status().Nodes[0].LastCheck.After(fs.flushed.Add(100 * time.Millisecond))
	}) {
		t.Fatal("timed out waiting for: two health checks of node 1 by B after the flush")
	}
	st := fs.b.Status().Nodes[0]
	if st.QuarantineCause != QuarantineDataLoss || st.Votes || st.QuarantinedUntil.IsZero() {
		t.Fatalf("node 1 after FLUSHALL: cause %q, votes %v, until %v; want data_loss, not voting", st.QuarantineCause, st.Votes, st.QuarantinedUntil)
	}
	if l, err := fs.b.Acquire(context.Background(), "k", AcquireOptions{}); err == nil {
		l.Release(context.Background())
		t.Fatal("B took the key on the flushed node and node 3 while A held it on nodes 1 and 2")
	}
}

// Between two health checks: B acquires right after the flush, before its next health
// check reads node 1's marker (found by TestStressMixedModes in about one run in four
// before the acquire script returned the marker). Node 1 grants the key again, but its
// grant carries no marker: no vote, node 1 quarantined at once, and B does not get the key.
// Both ways a grant reads the marker: the acquire script (a caller that will not wait: its
// one try is a last try) and a plain first try's GET behind its SET (a caller that may
// wait; its later tries run the script).
func TestFlushWindowTwoHolders(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{{"script", 0}, {"plain first try", 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			opt := fastOptions()
			opt.HealthInterval = time.Second // the default: the window is one interval
			fs := newFlushScenario(t, opt)
			ctx := context.Background()
			if l, err := fs.b.Acquire(ctx, "k", AcquireOptions{Wait: tc.wait}); err == nil {
				defer l.Release(ctx)
				if fs.held.Info().Validity > 0 {
					t.Fatalf("TWO HOLDERS: B took the key on the flushed node 1 and node 3 (validity %v) while A still trusts it (validity %v)",
						l.Info().Validity, fs.held.Info().Validity)
				}
			}
			if st := fs.b.Status().Nodes[0]; st.QuarantineCause != QuarantineDataLoss || st.Votes {
				t.Fatalf("node 1 after B's grant without its marker: cause %q, votes %v; want data_loss, not voting", st.QuarantineCause, st.Votes)
			}
		})
	}
}

// waitMarkers waits until the client has read every node's data marker.
func waitMarkers(t testing.TB, c *Client) {
	t.Helper()
	if !eventually(3*time.Second, func() bool {
		for _, s := range c.Status().Nodes {
			if !s.Marker {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: every node's marker read")
	}
}

// announceReply builds announceScript's reply for observe.
func announceReply(bound int64, value string, now int64) transport.Reply {
	return transport.NewReply([]any{bound, value, now, int64(0), int64(0), int64(0)}, nil)
}

// The detection rule on synthetic INFO and announce replies (no sleeping): a changed
// marker or more evicted keys is a data loss, with or without a run_id; a changed run_id
// is a restart; the same readings again are nothing.
func TestObserveSeesDataLoss(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	info := func(runID string, evicted int) string {
		s := "uptime_in_seconds:3600\r\nevicted_keys:" + itoa(evicted) + "\r\n"
		if runID != "" {
			s = "run_id:" + runID + "\r\n" + s
		}
		return s
	}
	// lru and noLimit: a node that may evict, and one without a memory limit.
	lru := func(evicted int) string {
		return info("r1", evicted) + "maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n"
	}
	noLimit := func(evicted int) string {
		return info("r1", evicted) + "maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n"
	}
	cases := []struct {
		name       string
		first      string
		firstMark  string
		second     string
		secondMark string
		want       QuarantineCause
	}{
		{"nothing changed", info("r1", 0), "m1:1", info("r1", 0), "m1:1", ""},
		{"restart", info("r1", 0), "m1:1", info("r2", 0), "m1:1", QuarantineRestart},
		{"flush", info("r1", 0), "m1:1", info("r1", 0), "m2:5", QuarantineDataLoss},
		{"eviction", info("r1", 3), "m1:1", info("r1", 4), "m1:1", QuarantineDataLoss},
		{"no run_id, restarted empty", info("", 0), "m1:1", info("", 0), "m2:9", QuarantineDataLoss},
		{"no run_id, nothing changed", info("", 0), "m1:1", info("", 0), "m1:1", ""},
		{"eviction by a node that could not evict at the last reading", noLimit(3), "m1:1", noLimit(4), "m1:1", QuarantineDataLoss},
		{"eviction count reset (CONFIG RESETSTAT)", noLimit(4), "m1:1", noLimit(0), "m1:1", QuarantineDataLoss},
		{"first sight of a node that may evict and has evicted", lru(5), "m1:1", lru(5), "m1:1", QuarantineDataLoss},
		{"first sight of a node that has evicted but may not now", noLimit(5), "m1:1", noLimit(5), "m1:1", ""},
		{"a node that may evict and has not", lru(0), "m1:1", lru(0), "m1:1", ""},
	}
	for _, tc := range cases {
		n := &node{addr: "test", c: c, evicted: -1}                         // not one of c's nodes
		n.observe(tc.first, announceReply(2000, tc.firstMark, 100_000_000)) // markers a day old
		n.observe(tc.second, announceReply(2000, tc.secondMark, 100_000_000))
		until, cause := n.quarantine(time.Now())
		if cause != tc.want || (tc.want != "") == until.IsZero() {
			t.Errorf("%s: quarantined until %v for %q, want cause %q", tc.name, until, cause, tc.want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Which INFO replies say a node may evict (its grants then carry its eviction count).
func TestMayEvict(t *testing.T) {
	for info, want := range map[string]bool{
		"maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n":        false, // no limit: nothing to evict for
		"maxmemory:1048576\r\nmaxmemory_policy:noeviction\r\n":   false,
		"maxmemory:1048576\r\nmaxmemory_policy:volatile-ttl\r\n": true,
		"maxmemory:1048576\r\nmaxmemory_policy:allkeys-lfu\r\n":  true,
		"run_id:x\r\n": true, // no such fields (a proxy, another server): it may
	} {
		if got := mayEvict(info); got != want {
			t.Errorf("mayEvict(%q) = %v, want %v", info, got, want)
		}
	}
}

// A node met for the first time whose marker is younger than a quarantine (its data was
// lost just before this client started) is young, as a node with a short uptime is.
func TestYoungMarkerHoldsANodeBack(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	n := &node{addr: "test", c: c, evicted: -1}
	n.observe("run_id:r1\r\nuptime_in_seconds:3600\r\n", announceReply(2000, "m:1000", 1500)) // 500ms old
	if until, cause := n.quarantine(time.Now()); until.IsZero() || cause != QuarantineYoung {
		t.Fatalf("a marker 500ms old: until %v cause %q, want young", until, cause)
	}
}

// The voting rule itself, case by case, on synthetic facts and a fixed time.
func TestQuarantineOf(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	q := 10 * time.Second
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	old := nodeFacts{startedAt: ago(time.Hour)}
	cases := []struct {
		name   string
		self   nodeFacts
		others []nodeFacts // the other nodes of a 3-node client (quorum 2)
		until  time.Time
		cause  QuarantineCause
	}{
		{"long started", old, []nodeFacts{old, old}, time.Time{}, ""},
		{"never seen", nodeFacts{}, []nodeFacts{old, old}, time.Time{}, ""},
		{"restart seen 1s ago", nodeFacts{lossSeen: ago(time.Second), lossCause: QuarantineRestart, startedAt: ago(time.Hour)},
			[]nodeFacts{old, old}, now.Add(9 * time.Second), QuarantineRestart},
		{"data loss seen 1s ago", nodeFacts{lossSeen: ago(time.Second), lossCause: QuarantineDataLoss, startedAt: ago(time.Hour)},
			[]nodeFacts{old, old}, now.Add(9 * time.Second), QuarantineDataLoss},
		{"loss seen a quarantine ago", nodeFacts{lossSeen: ago(q), lossCause: QuarantineDataLoss, startedAt: ago(time.Hour)},
			[]nodeFacts{old, old}, time.Time{}, ""},
		{"loss seen a quarantine ago, marker not read since", nodeFacts{lossSeen: ago(q), lossCause: QuarantineDataLoss, markerDue: true,
			startedAt: ago(time.Hour)}, []nodeFacts{old, old}, now, QuarantineDataLoss},
		{"young alone", nodeFacts{startedAt: ago(2 * time.Second)}, []nodeFacts{old, old}, now.Add(8 * time.Second), QuarantineYoung},
		{"young with another (fresh start)", nodeFacts{startedAt: ago(2 * time.Second), mark: "A", markedAt: ago(2 * time.Second)},
			[]nodeFacts{{startedAt: ago(3 * time.Second), mark: "A", markedAt: ago(2 * time.Second)}, old}, time.Time{}, ""},
		{"young with another, marked by another client", nodeFacts{startedAt: ago(2 * time.Second), mark: "B", markedAt: ago(2 * time.Second)},
			[]nodeFacts{{startedAt: ago(3 * time.Second), mark: "A", markedAt: ago(2 * time.Second)}, old}, now.Add(8 * time.Second), QuarantineYoung},
		{"young with another, 5s apart", nodeFacts{startedAt: ago(2 * time.Second)},
			[]nodeFacts{{startedAt: ago(7 * time.Second)}, old}, now.Add(8 * time.Second), QuarantineYoung},
		{"fresh start does not lift a loss seen", nodeFacts{lossSeen: ago(time.Second), lossCause: QuarantineDataLoss, startedAt: ago(time.Second)},
			[]nodeFacts{{startedAt: ago(time.Second)}, {startedAt: ago(time.Second)}}, now.Add(9 * time.Second), QuarantineDataLoss},
	}
	for _, tc := range cases {
		all := append([]nodeFacts{tc.self}, tc.others...)
		until, cause := quarantineOf(tc.self, all, 2, q, now)
		if !until.Equal(tc.until) || cause != tc.cause {
			t.Errorf("%s: %v %q, want %v %q", tc.name, until, cause, tc.until, tc.cause)
		}
	}
}

// A second data loss inside the marker's re-read window: B's grant saw node 1's marker
// gone (a first FLUSHALL) and quarantined it, but with max_ttl + drift shorter than the
// health interval (400ms here; B's health checks are a minute apart, so none re-reads the
// marker) the quarantine ends before B reads the marker again. Node 1 then grants A the
// key, loses it in a second FLUSHALL, and grants it to B: B must not count that grant (it
// has no marker to check it against) until it has read the marker again.
func TestSecondFlushBeforeTheMarkerIsReadAgain(t *testing.T) {
	ctx := context.Background()
	servers := redistest.StartN(t, 3)
	raw := func(s *redistest.Server) *redis.Client {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	node1, node3 := raw(servers[0]), raw(servers[2])
	opt := fastOptions()
	opt.TTL, opt.MaxTTL = 400*time.Millisecond, 400*time.Millisecond
	bOpt := opt
	bOpt.HealthInterval = time.Minute // no health check re-reads the marker during the test
	b := newTestClient(t, servers, bOpt)
	waitMarkers(t, b)
	// The permission probe's subscription is a new connection, whose hello would read
	// the marker again: let it pass first (B opens no other connection meanwhile).
	waitUsable(t, b)

	// The first loss, seen by B's grant.
	if err := node1.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	probe, err := b.Acquire(ctx, "probe", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-probe.settled // node 1's grant may come after the round was decided
	_ = probe.Release(ctx)
	st := b.Status().Nodes[0]
	if st.QuarantineCause != QuarantineDataLoss || st.Votes {
		t.Fatalf("node 1 after B's grant without its marker: cause %q, votes %v; want data_loss, not voting", st.QuarantineCause, st.Votes)
	}
	// A (a new client: its hello re-creates node 1's marker) waits until node 1 votes for
	// it (its marker older than a quarantine: not on a fresh start, which ends as the
	// other nodes' markers age), and B's quarantine of node 1 runs out meanwhile.
	a := newTestClient(t, servers, opt)
	if !eventually(3*time.Second, func() bool {
		now := time.Now()
		return a.Status().Nodes[0].Votes && a.nodes[0].youngUntil(now).IsZero() && now.After(st.QuarantinedUntil)
	}) {
		t.Fatal("timed out waiting for: node 1 votes for A, and B's quarantine of it ran out")
	}
	// A holds k on nodes 1 and 2 (a stray value holds node 3 when A asks, then goes).
	if err := node3.Set(ctx, defaultPrefix+"k", "stray", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	<-held.settled // A's SET on node 3 was refused there, not still on its way
	if err := node3.Del(ctx, defaultPrefix+"k").Err(); err != nil {
		t.Fatal(err)
	}
	// The second loss.
	if err := node1.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := b.Acquire(ctx, "k", AcquireOptions{}); err == nil {
		defer l.Release(ctx)
		if held.Info().Validity > 0 {
			t.Fatalf("TWO HOLDERS: B took the key on node 1 (flushed twice, its marker not read since the first) and node 3 while A still trusts it (validity %v)",
				held.Info().Validity)
		}
	}
	if st := b.Status().Nodes[0]; st.Votes {
		t.Fatalf("node 1 votes for B before B read its marker again (cause %q)", st.QuarantineCause)
	}
}

// evictLocks makes s evict its keys with the shortest ttl (lock keys) under memory
// pressure while sparing the data marker: s runs maxmemory-policy volatile-ttl, sampling
// every volatile key. Decoys that expire after the locks but long before the marker (an
// hour) absorb the rest of the eviction; maxmemory drops below the memory in use for one
// moment, then goes back. It returns s's evicted_keys after.
func evictLocks(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	pad := strings.Repeat("x", 16<<10)
	for i := range 20 {
		if err := rc.Set(ctx, "decoy:"+strconv.Itoa(i), pad, 30*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mem, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(parseInfoField(mem, "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Setting maxmemory evicts at once, until the memory in use is below it.
	if err := rc.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-(64<<10), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
		t.Fatal(err)
	}
	stats, err := rc.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(parseInfoField(stats, "evicted_keys"), 10, 64)
	return n
}

// An eviction that spares the data marker: A holds k on nodes 1 and 2 (a stray value
// held node 3 when A asked), node 2 evicts k under memory pressure (volatile-ttl picks
// the lock before the marker, which lives an hour), and B asks before any health check
// of its reads INFO again (a minute apart here). Node 2's marker is unchanged, so its
// grant passes the marker check; but node 2 may evict, so the grant carries its eviction
// count, which moved since B read it: no vote, and B does not get the key.
func TestEvictionSparingTheMarkerDoesNotLendAVote(t *testing.T) {
	ctx := context.Background()
	plain := redistest.StartN(t, 2)
	evicting := redistest.StartN(t, 1, redistest.Options{Args: []string{"--maxmemory", "64mb",
		"--maxmemory-policy", "volatile-ttl", "--maxmemory-samples", "64"}})[0]
	servers := []*redistest.Server{plain[0], evicting, plain[1]}
	bOpt := fastOptions()
	bOpt.HealthInterval = time.Minute // the eviction falls between two health checks
	b := newTestClient(t, servers, bOpt)
	waitMarkers(t, b)
	waitUsable(t, b) // the probe's new connection reads INFO too: let it pass first
	if !b.nodes[1].canEvict.Load() || b.nodes[0].canEvict.Load() {
		t.Fatalf("canEvict: node 1 %v, node 2 %v; want false, true", b.nodes[0].canEvict.Load(), b.nodes[1].canEvict.Load())
	}
	a := newTestClient(t, servers, fastOptions())
	waitMarkers(t, a)
	node3 := redis.NewClient(&redis.Options{Addr: servers[2].Addr()})
	defer node3.Close()
	if err := node3.Set(ctx, defaultPrefix+"k", "stray", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	<-held.settled // A's SET on node 3 was refused there, not still on its way
	if err := node3.Del(ctx, defaultPrefix+"k").Err(); err != nil {
		t.Fatal(err)
	}
	marker, _ := rawGet(t, evicting, markerName)
	if evicted := evictLocks(t, evicting); evicted == 0 {
		t.Fatal("node 2 evicted nothing")
	}
	if _, ok := rawGet(t, evicting, "k"); ok {
		t.Fatal("node 2 still holds k: the eviction spared it")
	}
	if m, ok := rawGet(t, evicting, markerName); !ok || m != marker {
		t.Fatalf("node 2's marker went with the eviction (present %v): the scenario is the marker's case", ok)
	}
	if l, err := b.Acquire(ctx, "k", AcquireOptions{}); err == nil {
		defer l.Release(ctx)
		if held.Info().Validity > 0 {
			t.Fatalf("TWO HOLDERS: B took the key on node 2 (which evicted it, its marker spared) and node 3 while A still trusts it (validity %v)",
				held.Info().Validity)
		}
	}
	if st := b.Status().Nodes[1]; st.QuarantineCause != QuarantineDataLoss || st.Votes {
		t.Fatalf("node 2 after B's grant with its eviction count grown: cause %q, votes %v; want data_loss, not voting", st.QuarantineCause, st.Votes)
	}
}
