package redlock

import (
	"sync"
)

// round collects the node replies of one acquire round as the batchers deliver them. The
// caller is woken once, when the outcome is known (a quorum of votes, or too many refusals
// for one), not once per reply, and the round settles (every node replied) without a
// goroutine of its own: on the hot path of every request, each wake-up counts.
type round struct {
	c       *Client
	mu      sync.Mutex
	replies []nodeReply   // in arrival order
	decided bool          // decide is closed
	decide  chan struct{} // closed once the outcome is known, or every node replied
	settled chan struct{} // closed once every node replied
}

func newRound(c *Client) *round {
	return &round{c: c, replies: make([]nodeReply, 0, len(c.nodes)),
		decide: make(chan struct{}), settled: make(chan struct{})}
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
	return votes >= c.quorum || no > len(c.nodes)-c.quorum
}

// snapshot returns the replies received so far.
func (r *round) snapshot() []nodeReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nodeReply(nil), r.replies...)
}
