package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// A node restarted without persistence a moment after a deployment's first locks looks,
// by INFO's whole-second uptime, as started together with the others; a client that
// meets the nodes only then must still hold it back: its marker was made after the
// others', with another mark. Were uptimes enough, it would vote, and a lock held on a
// bare majority that included it could be taken a second time (the simulation's late
// client found exactly that).
func TestNodeRestartedAfterAFreshStartIsHeldBack(t *testing.T) {
	servers := redistest.StartN(t, 5)
	a := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, a) // a marked every node on its first contact, and read the markers
	if _, err := a.Acquire(context.Background(), "fresh-restart", AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := servers[4].Restart(); err != nil {
		t.Fatal(err)
	}
	b := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, b)
	for i, st := range b.Status().Nodes {
		young := st.QuarantineCause == QuarantineYoung
		if i == 4 && !young {
			t.Fatalf("node restarted after the fresh start votes for a new client: %+v", st)
		}
		if i != 4 && !st.QuarantinedUntil.IsZero() {
			t.Fatalf("node %d of the fresh start held back: %+v", i, st)
		}
	}
}

// A second client meeting a fresh deployment that the first has marked uses it at once:
// the nodes share the first client's mark.
func TestSecondClientOfAFreshStartVotesAtOnce(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, a)
	b := newTestClient(t, servers, fastOptions())
	waitRunIDs(t, b)
	for i, st := range b.Status().Nodes {
		if !st.QuarantinedUntil.IsZero() {
			t.Fatalf("fresh node %d held back for the second client: %+v", i, st)
		}
	}
	l, err := b.Acquire(context.Background(), "fresh-second", AcquireOptions{})
	if err != nil {
		t.Fatalf("second client on fresh nodes: %v", err)
	}
	_ = l.Release(context.Background())
}

// The fresh-start rule itself: a quorum of young nodes started together counts only if
// their markers were made by their own processes, with one mark, within markedTogether.
func TestFreshStartNeedsOneMark(t *testing.T) {
	now := time.Now()
	node := func(mark string, marked time.Duration) nodeFacts {
		f := nodeFacts{startedAt: now.Add(-time.Second), mark: mark}
		if marked >= 0 {
			f.markedAt = now.Add(-marked)
		}
		return f
	}
	q := 3 * time.Second
	for _, tc := range []struct {
		name  string
		nodes []nodeFacts // the judged node is the last
		fresh bool
	}{
		{"one mark", []nodeFacts{node("A", 0), node("A", 0), node("A", 10*time.Millisecond)}, true},
		{"the judged node marked by another client", []nodeFacts{node("A", 0), node("A", 0), node("B", 0)}, false},
		{"one node of another mark", []nodeFacts{node("A", 0), node("B", 0), node("A", 0)}, false},
		{"same mark, made later (a hello held up)", []nodeFacts{node("A", 2*time.Second), node("A", 2*time.Second), node("A", 0)}, false},
		{"no mark (a marker of another process)", []nodeFacts{node("", 0), node("", 0), node("", 0)}, false},
		{"age unknown", []nodeFacts{node("A", -1), node("A", -1), node("A", -1)}, false},
	} {
		f := tc.nodes[len(tc.nodes)-1]
		if got := freshStartOf(f, tc.nodes, 3, q, now); got != tc.fresh { // a quorum of all three
			t.Errorf("%s: freshStart = %v, want %v", tc.name, got, tc.fresh)
		}
	}
}

// A marker counts as a mark only when the node's current process made it: one loaded from
// disk (a restart with persistence that lost its last writes) or from a replica carries
// another run_id, and so does an older client's marker, which has none.
func TestRestoredMarkerIsNoFreshStart(t *testing.T) {
	const run = "0123456789012345678901234567890123456789"
	for _, tc := range []struct{ value, runID, want string }{
		{"M/" + run + ":1700000000000", run, "M"},
		{"M/" + run + ":1700000000000", "9999999999999999999999999999999999999999", ""},
		{"M/:1700000000000", run, ""},           // the user may not run INFO in a script
		{"M:1700000000000", run, ""},            // an older client's marker
		{"M/" + run + ":1700000000000", "", ""}, // INFO without run_id
		{"", run, ""},
	} {
		if got := markOf(tc.value, tc.runID); got != tc.want {
			t.Errorf("markOf(%q, %q) = %q, want %q", tc.value, tc.runID, got, tc.want)
		}
	}
	// And through observe: a node whose marker was made by another process is no part
	// of a fresh start.
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	n := &node{addr: "test", c: c}
	ann := transport.NewReply([]any{int64(2000), "M/" + run + ":" + "1", int64(2), int64(0), int64(0), int64(0)}, nil)
	n.observe("run_id:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nuptime_in_seconds:0\r\n", ann)
	if f := n.facts(); f.mark != "" {
		t.Fatalf("a restored marker gave the mark %q", f.mark)
	}
}
