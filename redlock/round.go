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
