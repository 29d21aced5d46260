package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// The two ways a client sends a command to every node (internal/transport): Node.Call
// for the scripts of the lock path (acquire, release), which go through each node's
// batcher, and onAll for the rest (commit, extend, retake, inspect, force release), each
// on a connection of its own. Both bound every call by node_timeout and record it for
// the Observer.

// onAll runs f on every node at once, each call bounded by node_timeout and recorded as
// op, and returns as soon as need nodes said yes or that became impossible (need <= 0:
// when every node answered; transport.OnAll). Errors name their node. Replies still on
// the way finish on their own timeout: with need > 0, f must not write anything the
// caller reads.
func (c *Client) onAll(ctx context.Context, op string, need int,
	f func(ctx context.Context, i int, nd *node) (bool, error)) (yes, no int, errs []error) {
	return transport.OnAll(ctx, c.links, op, need, func(ctx context.Context, i int) (bool, error) {
		return f(ctx, i, c.nodes[i])
	})
}

// releaseOnNodes runs compare-and-delete (plus the release notice) on every node not
// skipped and returns once a quorum of nodes deleted our value, or every node answered
// (bounded by node_timeout): a silent minority node must not hold up the next holder,
// who needs a quorum only (a hot key would otherwise hand over once per node timeout
// while one node is paused). The remaining replies land in the background; the release
// to the silent node stays in its batcher's order, behind our SET, and the next holder's
// SET to it queues behind the release. It returns how many nodes deleted our value so
// far, whether the notice reached another client's waiters on any node so far
// (subscribed: this client listens on the key's channel itself, so one receiver is
// ours), and the errors so far (all of them unless a quorum deleted).
func (c *Client) releaseOnNodes(ctx context.Context, nm names, value string, skip []bool, subscribed bool) (int, bool, []error) {
	own := int64(0)
	if subscribed {
		own = 1
	}
	sent := 0
	for i := range c.nodes {
		if skip == nil || !skip[i] {
			sent++
		}
	}
	if sent == 0 {
		return 0, false, nil
	}
	var cmd *transport.Command
	switch {
	case nm.shared:
		cmd = transport.NewCommand(readReleaseScript, []string{nm.lock, nm.counter, nm.writer, nm.readers}, value, nm.channel, c.id)
	case nm.turn != "":
		// Readers that waited for this writer get their turn (scripts.go, readgroup.go).
		cmd = transport.NewCommand(releaseScript, []string{nm.lock, nm.turn}, value, c.id, c.readersTurn().Milliseconds(),
			c.readersTurnMax().Milliseconds())
	case !strings.HasPrefix(nm.channel, nm.lock) || nm.channel[len(nm.lock):] != channelSuffix:
		// A place of a limited key: its waiters listen on the key's channel.
		cmd = transport.NewCommand(releaseScript, []string{nm.lock}, value, c.id, nm.channel)
	default:
		// No readers' turn to give (AcquireOptions.NoReaders).
		cmd = transport.NewCommand(releaseScript, []string{nm.lock}, value, c.id)
	}
	t := &releaseTally{c: c, sent: time.Now(), left: sent, quorum: c.quorum, own: own, done: make(chan struct{})}
	c.pending.add(sent)
	for i, nd := range c.nodes {
		if skip != nil && skip[i] {
			continue
		}
		nd.tr.Send(ctx, cmd, t, i)
	}
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deleted, t.others, append([]error(nil), t.errs...)
}

// releaseTally collects a release's replies, under a mutex, and signals once, by the
// last reply or the quorum's: one wake-up for the caller instead of one per node.
type releaseTally struct {
	c        *Client
	sent     time.Time // when the calls went out
	mu       sync.Mutex
	left     int
	quorum   int
	own      int64 // receivers of the notice that are this client
	deleted  int
	others   bool
	errs     []error
	signaled bool
	done     chan struct{}
}

// Deliver takes node i's reply to the release (transport.Sink): on a batcher's goroutine,
// never blocking.
func (t *releaseTally) Deliver(i int, reply transport.Reply) {
	defer t.c.pending.done()
	nd := t.c.nodes[i]
	r, err := reply.Int64()
	nd.record("release", time.Since(t.sent), err)
	if err != nil {
		err = fmt.Errorf("%s: %w", nd.addr, err)
	}
	t.add(r, err)
}

// add counts one node's reply: r is 1 + the notice's receivers when it deleted our
// value, 0 when the node did not have it.
func (t *releaseTally) add(r int64, err error) {
	t.mu.Lock()
	switch {
	case err != nil:
		t.errs = append(t.errs, err)
	case r >= 1:
		t.deleted++
	}
	// Where our own subscription is not confirmed this undercounts, never overcounts: a
	// yield is never made up.
	if r-1-t.own > 0 {
		t.others = true
	}
	t.left--
	wake := !t.signaled && (t.left == 0 || t.deleted >= t.quorum)
	t.signaled = t.signaled || wake
	t.mu.Unlock()
	if wake {
		close(t.done)
	}
}

// pendingCalls counts release calls still on their way, also after their caller
// returned (releaseOnNodes returns at a quorum of deletes), and acquire rounds until
// their grants are kept or given back: shutdown lets them land before it closes the
// connections, or a key would stand for a ttl.
type pendingCalls struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (p *pendingCalls) add(k int) {
	p.mu.Lock()
	if p.n == 0 {
		p.zero = make(chan struct{})
	}
	p.n += k
	p.mu.Unlock()
}

func (p *pendingCalls) done() {
	p.mu.Lock()
	p.n--
	if p.n == 0 {
		close(p.zero)
	}
	p.mu.Unlock()
}

// wait waits until no call is pending, at most d (each call ends by its deadline).
func (p *pendingCalls) wait(d time.Duration) {
	p.mu.Lock()
	if p.n == 0 {
		p.mu.Unlock()
		return
	}
	zero := p.zero
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
	case <-t.C:
	}
}
