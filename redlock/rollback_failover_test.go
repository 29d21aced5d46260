package redlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A node gone back in time behind one address does not vote (rollback.go). Node 1 is one
// address (a proxy that keeps the client connections, as a failover proxy or a virtual IP
// does) in front of a master M. The data marker reached the standby long ago; then the
// standby falls behind; A takes k on a bare majority {1,2,3}; B reads node 1 (a lock of
// another key) after A's grant; node 1 then serves the standby, which lacks k but has M's
// marker, and M dies. Nodes 4 and 5 are free by then, so without the write sequence B
// would hold k on {1,4,5} while A trusts its lock: B's grant from node 1 carries a
// sequence not above what B read there, so it is no vote.
//
// Two standbys: a real replica whose replication link stalls (its link runs through a
// proxy that stops delivering), promoted with a real REPLICAOF NO ONE; and a server
// restarted from an RDB snapshot made before A's lock. Each with B's first try as the
// acquire script and as the plain SET (a writer that may wait). And a client C that read
// nothing of node 1 since the standby's point in time does not count it either, once B's
// sighting deleted its marker.
func TestFailoverToALaggingStandbyDoesNotVote(t *testing.T) {
	skipShort(t)
	for _, standby := range []string{"replica", "snapshot"} {
		for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
			t.Run(standby+"/wait="+wait.String(), func(t *testing.T) {
				failoverToLaggingStandby(t, standby, wait)
			})
		}
	}
}

func failoverToLaggingStandby(t *testing.T, standby string, wait time.Duration) {
	ctx := context.Background()
	dir := t.TempDir()
	m := redistest.StartN(t, 1, redistest.Options{Args: []string{"--dir", dir, "--repl-diskless-sync-delay", "0"}})[0]
	others := redistest.StartN(t, 4)
	node1 := newSwitchProxy(t, m.Addr())
	urls := append([]string{"redis://" + node1.addr()}, redistest.URLs(others)...)
	opt := fastOptions()
	// No health check during the test (only grants see), and a loose node timeout: a call
	// timed out on a loaded machine closes its connection, and a new one's hello would see
	// the run_id change before any grant does.
	opt.TTL, opt.HealthInterval, opt.NodeTimeout = 30*time.Second, time.Hour, 2*time.Second
	a := newClientURLs(t, urls, opt)
	b := newClientURLs(t, urls, opt)
	c := newClientURLs(t, urls, opt) // reads nothing of node 1 after A's grant

	// The standby has M's marker (and everything else written so far).
	var r *redistest.Server
	switch standby {
	case "replica":
		r = redistest.StartN(t, 1)[0]
		link := newSwitchProxy(t, m.Addr())
		if _, err := r.Command("REPLICAOF", "127.0.0.1", portOf(t, link.addr())); err != nil {
			t.Fatal(err)
		}
		waitReplicated(t, m, r)
		defer link.stall() // the link stalls now: nothing M writes from here reaches r
		link.stall()
	case "snapshot":
		if _, err := m.Command("SAVE"); err != nil {
			t.Fatal(err)
		}
		r = redistest.StartN(t, 1, redistest.Options{Args: []string{"--dir", dir}})[0] // loads M's snapshot
	}
	marker := defaultPrefix + markerName
	standbyMarker := getOn(t, r, marker)
	if mm := getOn(t, m, marker); mm == "" || mm != standbyMarker {
		t.Fatalf("standby's marker %q, M's %q: want the same", standbyMarker, mm)
	}

	// A takes k on a bare majority: 4 and 5 are held by someone else.
	for _, s := range others[2:] {
		setOn(t, s, defaultPrefix+"k", "someone else")
	}
	la, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	defer func() { _ = la.Release(ctx) }()
	takenAt := time.Now()
	// B reads node 1 after A's grant: a lock of another key.
	lo, err := b.Acquire(ctx, "other", AcquireOptions{})
	if err != nil {
		t.Fatalf("B, another key: %v", err)
	}
	_ = lo.Release(ctx)
	// The round was decided by a quorum: wait until node 1's reply is in too.
	seqM := getOn(t, m, defaultPrefix+writeSeqName)
	if !eventually(5*time.Second, func() bool { return strconv.FormatInt(b.nodes[0].seqSeen(), 10) == seqM }) {
		t.Fatalf("B's reading of node 1's write sequence: %d, want M's %s", b.nodes[0].seqSeen(), seqM)
	}
	if v := getOn(t, r, defaultPrefix+"k"); v != "" {
		t.Fatalf("the standby has A's lock (%q): it does not lag", v)
	}

	// The failover: node 1 now serves the standby, on the same client connections.
	if standby == "replica" {
		if _, err := r.Command("REPLICAOF", "NO", "ONE"); err != nil {
			t.Fatal(err)
		}
	}
	node1.switchTo(r.Addr())
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, s := range others[2:] {
		delOn(t, s, defaultPrefix+"k")
	}

	lb, err := b.Acquire(ctx, "k", AcquireOptions{Wait: wait})
	if took := time.Since(takenAt); took > opt.TTL/2 {
		// A's lock may have lapsed (its validity is less than the ttl): B's grant would
		// then be right, and the test could not tell. A 30 s ttl makes this a machine
		// stalled for 15 s, which is a failure of the run, not a pass.
		t.Fatalf("B asked %v after A's grant, past half A's ttl: too slow to judge", took)
	}
	if err == nil {
		_ = lb.Release(ctx)
		t.Fatalf("B took k on node 1's standby and the two free nodes while A holds it (A's lock valid %v more; B's reading of node 1's sequence %d, the standby's now %q)",
			opt.TTL-time.Since(takenAt), b.nodes[0].seqSeen(), getOn(t, r, defaultPrefix+writeSeqName))
	}
	if !isBusy(err) && !isUnavailable(err) {
		t.Fatalf("B: %v, want busy or unavailable", err)
	}
	// Quarantined from B's grant on (a data loss); a new connection B opens meanwhile (a
	// waiter's) may see the run_id change too and call it a restart.
	if until, cause := b.nodes[0].quarantine(time.Now()); until.IsZero() {
		t.Fatalf("node 1 not quarantined by B (%q)", cause)
	}
	// B's sighting deleted the standby's marker: every other client's next grant there
	// sees it gone (dataloss.go).
	if !eventually(5*time.Second, func() bool { return getOn(t, r, marker) != standbyMarker }) { // deleted, maybe re-created by a hello since
		_, cause := b.nodes[0].quarantine(time.Now())
		t.Fatalf("the standby's marker was not deleted after B saw it go back in time (B's quarantine: %q)", cause)
	}
	// So C, which read no sequence of node 1 since the standby's point in time (its only
	// reading was before any grant), does not count node 1's grant either.
	if lc, err := c.Acquire(ctx, "k", AcquireOptions{}); err == nil {
		_ = lc.Release(ctx)
		t.Fatal("C took k on node 1's standby after B saw it go back in time, while A holds it")
	}
}

// newClientURLs is newTestClient for URLs that are not all redistest servers.
func newClientURLs(t testing.TB, urls []string, opt Options) *Client {
	t.Helper()
	c, err := New(urls, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	firstContact(c)
	return c
}

func portOf(t testing.TB, addr string) string {
	t.Helper()
	_, port, ok := strings.Cut(addr, ":")
	if _, err := strconv.Atoi(port); !ok || err != nil {
		t.Fatalf("no port in %q", addr)
	}
	return port
}

// waitReplicated waits until r is linked to m and has applied everything m wrote.
func waitReplicated(t testing.TB, m, r *redistest.Server) {
	t.Helper()
	offset := func(s *redistest.Server, field string) string {
		info, err := s.Command("INFO", "replication")
		if err != nil {
			return ""
		}
		return parseInfoField(info, field)
	}
	if !eventually(10*time.Second, func() bool {
		mo := offset(m, "master_repl_offset")
		return offset(r, "master_link_status") == "up" && mo != "" && offset(r, "master_repl_offset") == mo
	}) {
		t.Fatal("the replica did not catch up with its master")
	}
}

func rawClient(s *redistest.Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
}

func getOn(t testing.TB, s *redistest.Server, key string) string {
	t.Helper()
	rc := rawClient(s)
	defer rc.Close()
	v, err := rc.Get(context.Background(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("GET on %s: %v", s.Addr(), err)
	}
	return v
}

func setOn(t testing.TB, s *redistest.Server, key, value string) {
	t.Helper()
	rc := rawClient(s)
	defer rc.Close()
	if err := rc.Set(context.Background(), key, value, time.Minute).Err(); err != nil {
		t.Fatalf("SET on %s: %v", s.Addr(), err)
	}
}

func delOn(t testing.TB, s *redistest.Server, key string) {
	t.Helper()
	rc := rawClient(s)
	defer rc.Close()
	if err := rc.Del(context.Background(), key).Err(); err != nil {
		t.Fatalf("DEL on %s: %v", s.Addr(), err)
	}
}
