package redlock

import (
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// A grant is judged against the highest sequence read before its round was sent, never
// against a reading taken in after it (a health check's on another connection, or a grant
// of another round): on an unbroken history such a reading may be above the grant's, and
// no loss is seen. A grant not above the reading before its round is a node gone back.
func TestGrantSequenceJudgedAgainstTheReadingBeforeItsRound(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	now := time.Now()
	for _, tc := range []struct {
		name            string
		seen, seq, sent int64 // the client's reading now, the grant's sequence, the reading when sent
		wentBack        bool
	}{
		{"above the reading when sent, below a later one", 10, 5, 3, false},
		{"above every reading", 4, 5, 4, false},
		{"first reading", 0, 7, 0, false},
		{"check off (no sequence)", 4, -1, 4, false},
		{"equal to the reading when sent", 10, 3, 3, true},
		{"below it: a node restarted empty", 10, 1, 9, true},
	} {
		n := &node{addr: "test", c: c, evicted: -1} // not one of c's nodes, not connected
		n.seq.Store(tc.seen)
		until := n.grantHolds(nodeReply{ok: true, seq: tc.seq, seqBefore: seqReading{seq: tc.sent}, evicted: -1}, now)
		if got := !until.IsZero(); got != tc.wentBack {
			t.Errorf("%s: held back %v, want %v", tc.name, got, tc.wentBack)
			continue
		}
		if tc.wentBack {
			if _, cause := n.quarantine(now); cause != QuarantineDataLoss {
				t.Errorf("%s: quarantine cause %q, want %q", tc.name, cause, QuarantineDataLoss)
			}
			if n.seqSeen() != tc.seq {
				t.Errorf("%s: reading %d after the loss, want the new history's %d", tc.name, n.seqSeen(), tc.seq)
			}
		} else if want := max(tc.seen, tc.seq); n.seqSeen() != want {
			t.Errorf("%s: reading %d, want %d", tc.name, n.seqSeen(), want)
		}
	}
}

// A health check (or a new connection's hello) judges the sequence it reads against the
// reading the client had when it sent it, which the announce echoes: below it, the node
// went back in time with its marker (a failover or an older snapshot where INFO shows no
// run_id, or the same one), and it is quarantined and its marker forgotten (deleted, to
// tell the other clients: rollback.go). Above it, a later reading taken in first is no
// alarm.
func TestHealthCheckSeesASequenceGoneBack(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	info := "uptime_in_seconds:3600\r\nevicted_keys:0\r\n" // no run_id
	ann := func(seq, before, epoch int64) transport.Reply {
		return transport.NewReply([]any{int64(2000), "m1/:1", int64(100_000_000), seq, before, epoch}, nil)
	}
	n := &node{addr: "test", c: c, evicted: -1} // not one of c's nodes, not connected
	n.observe(info, ann(10, 0, 0))
	n.seq.Store(20) // a grant's reading taken in after this check was sent
	n.observe(info, ann(12, 10, 0))
	if until, cause := n.quarantine(time.Now()); !until.IsZero() {
		t.Fatalf("a reading above the one it was sent with: quarantined (%q)", cause)
	}
	n.observe(info, ann(7, 20, 0))
	if until, cause := n.quarantine(time.Now()); until.IsZero() || cause != QuarantineDataLoss {
		t.Fatalf("a sequence below the reading it was sent with: quarantined until %v (%q), want %q", until, cause, QuarantineDataLoss)
	}
	n.mu.Lock()
	marker, due := n.marker, n.markerDue
	n.mu.Unlock()
	if marker != "" || !due || n.seqSeen() != 7 {
		t.Fatalf("after the rollback: marker %q, due %v, reading %d; want forgotten, due, 7 (the new history's)", marker, due, n.seqSeen())
	}
	// A reply to a check sent before that loss was seen (the epoch before) is neither
	// judged nor taken in: it may have read either history.
	lossSeen := n.lossSeen
	n.observe(info, ann(30, 20, 0))
	if n.seqSeen() != 7 || n.lossSeen != lossSeen {
		t.Fatalf("a reply of the epoch before the loss: reading %d, loss seen %v (was %v); want 7, unchanged", n.seqSeen(), n.lossSeen, lossSeen)
	}
}
