package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A round's tally from synthetic replies: votes, tokens, refusals, failures, held-back
// young grants and silent nodes, case by case (no round is run).
func TestTallyRound(t *testing.T) {
	servers := redistest.StartN(t, 5)
	opt := fastOptions()
	opt.HealthInterval = time.Hour // nothing the test sets is overwritten meanwhile
	c := newTestClient(t, servers, opt)
	waitRunIDs(t, c)
	old := time.Now().Add(-time.Hour).UnixNano()
	reset := func() {
		for _, n := range c.nodes {
			n.startedAt.Store(old)
			n.record("acquire", 0, nil) // answered
		}
	}
	grant := func(i int, token int64, reserved bool) nodeReply {
		return nodeReply{idx: i, ok: true, token: token, reserved: reserved}
	}
	busy := func(i int, pttl time.Duration) nodeReply { return nodeReply{idx: i, busy: true, pttl: pttl} }
	failed := func(i int) nodeReply { return nodeReply{idx: i, err: errors.New("boom")} }

	t.Run("a quorum with one token, two busy", func(t *testing.T) {
		reset()
		tl := c.tallyRound([]nodeReply{grant(0, 7, true), grant(1, 7, true), grant(2, 7, true), busy(3, 900*time.Millisecond), busy(4, 300*time.Millisecond)})
		if len(tl.granted) != 3 || tl.token != 7 || !tl.same || !tl.reserved || tl.nbusy != 2 || tl.minPTTL != 300*time.Millisecond || len(tl.errs) != 0 {
			t.Fatalf("%+v", tl)
		}
		if !tl.answered[3] || !tl.answered[4] || tl.answered[0] {
			t.Fatalf("answered %v: only the busy nodes are definitive", tl.answered)
		}
	})
	t.Run("tokens differ, one without the reserve", func(t *testing.T) {
		reset()
		tl := c.tallyRound([]nodeReply{grant(0, 5, true), grant(1, 9, false), grant(2, 7, true)})
		if tl.token != 9 || tl.same || tl.reserved {
			t.Fatalf("%+v: want token 9, not same, not reserved", tl)
		}
	})
	t.Run("a young node's grant is held back", func(t *testing.T) {
		reset()
		c.nodes[2].startedAt.Store(time.Now().UnixNano())
		tl := c.tallyRound([]nodeReply{grant(0, 1, true), grant(1, 1, true), grant(2, 1, true)})
		if len(tl.granted) != 2 || tl.heldBack != 1 {
			t.Fatalf("%+v: want 2 votes, 1 held back", tl)
		}
	})
	t.Run("failures name their node", func(t *testing.T) {
		reset()
		tl := c.tallyRound([]nodeReply{grant(0, 1, true), failed(1), failed(2)})
		if len(tl.errs) != 2 || tl.errs[0].(nodeError).node != c.nodes[1].addr {
			t.Fatalf("%+v", tl.errs)
		}
	})
	t.Run("a silent node that did not reply is a failure", func(t *testing.T) {
		reset()
		c.nodes[4].record("acquire", 0, context.DeadlineExceeded) // no answer
		tl := c.tallyRound([]nodeReply{grant(0, 1, true), grant(1, 1, true), grant(2, 1, true), busy(3, time.Second)})
		if len(tl.errs) != 1 || tl.errs[0].(nodeError).node != c.nodes[4].addr {
			t.Fatalf("%+v: want node 5 as a failure", tl.errs)
		}
	})
}
