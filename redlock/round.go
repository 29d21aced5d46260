package redlock

import (
	"sync"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// round collects the node replies of one acquire round as the batchers deliver them. The
// caller is woken once, when the outcome is known (a quorum of votes, or too many refusals
// for one), not once per reply, and the round settles (every node replied) without a
// goroutine of its own: on the hot path of every request, each wake-up counts.
type round struct {
	c       *Client
	sent    time.Time  // when the calls went out: each reply's round trip counts from here
	kinds   []sentKind // what went to each node, for reading its reply (Deliver)
	kindBuf [8]sentKind
	mu      sync.Mutex
	replies []nodeReply   // in arrival order
	decided bool          // decide is closed
	decide  chan struct{} // closed once the outcome is known, or every node replied
	settled chan struct{} // closed once every node replied
}

// sentKind is what a round sent a node.
type sentKind uint8

const (
	sentScript sentKind = iota // the acquire script (scriptReply)
	sentPlain                  // a plain SET with the marker's GET behind it (plainReply)
	sentEvict                  // the script, asked for the eviction count too
)

func newRound(c *Client) *round {
	r := &round{c: c, replies: make([]nodeReply, 0, len(c.nodes)),
		decide: make(chan struct{}), settled: make(chan struct{})}
	r.kinds = r.kindBuf[:0]
	if len(c.nodes) > len(r.kindBuf) {
		r.kinds = make([]sentKind, 0, len(c.nodes))
	}
	r.kinds = r.kinds[:len(c.nodes)]
	return r
}

// Deliver takes node i's reply to the round's acquire (transport.Sink): on a batcher's
// goroutine, never blocking.
func (r *round) Deliver(i int, reply transport.Reply) {
	nd, kind := r.c.nodes[i], r.kinds[i]
	var rep nodeReply
	if kind == sentPlain {
		rep = plainReply(reply)
	} else {
		rep = scriptReply(reply)
	}
	nd.record("acquire", time.Since(r.sent), rep.err)
	if kind == sentEvict && rep.ok && rep.evicted < 0 {
		nd.warnNoEvictions()
	}
	r.add(acquireReply(i, nd, rep))
}

// add records one node's reply; it never blocks (it runs on a batcher's goroutine).
func (r *round) add(rep nodeReply) {
	r.mu.Lock()
	r.replies = append(r.replies, rep)
	all := len(r.replies) == len(r.c.nodes)
	if !r.decided && (all || r.decisiveLocked()) {
		r.decided = true
		close(r.decide)
	}
	r.mu.Unlock()
	if all {
		close(r.settled)
	}
}

// decisiveLocked reports whether the replies so far decide the round: a quorum of votes
// (a young node's grant votes only on a fresh start), or more refusals and failures than
// a quorum can spare. A young node's grant that does not vote yet is neither: it may
// still, as more nodes are seen.
//
// A node that is silent (its last command got no answer: paused, unreachable) and has not
// replied yet counts as a refusal: waiting for it would cost every split round (say 2
// grants and 2 refusals of 5, two instances contending for a hot key) a whole node
// timeout, for a vote that is not coming. Counting a possible grant as a refusal can only
// fail a round, never win one: safe. Its reply, if it comes, is still counted by the
// tally, and its next answer clears it.
func (r *round) decisiveLocked() bool {
	c := r.c
	votes, no := 0, 0
	for _, rep := range r.replies {
		switch {
		case c.votes(rep):
			votes++
		case rep.ok:
		default:
			no++
		}
	}
	if votes >= c.quorum || no > len(c.nodes)-c.quorum {
		return true
	}
	for i, nd := range c.nodes {
		if nd.silent() && !r.repliedLocked(i) {
			no++
		}
	}
	return no > len(c.nodes)-c.quorum
}

func (r *round) repliedLocked(idx int) bool {
	for _, rep := range r.replies {
		if rep.idx == idx {
			return true
		}
	}
	return false
}

// snapshot returns the replies received so far.
func (r *round) snapshot() []nodeReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nodeReply(nil), r.replies...)
}
