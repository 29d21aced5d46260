package redlock

import (
	"sync"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// Waiting
//
// Within one Client, waiters for one key form a FIFO (queue.go); only the head contends
// in Redis. The head subscribes to the key's release channel on every node (one
// subscriber connection per node per Client) and waits until enough nodes confirmed the
// subscription that any majority includes one of them (watch.ready), so a release cannot
// slip between its try and its sleep. Release publishes on every node it deletes from.

// notifier carries release notices: a holder's release script PUBLISHes on the key's
// channel on every node; a process keeps ONE subscriber connection per node
// (transport.Subscription) and adds or drops channels as keys start and stop being
// awaited. A lost notice only costs a jittered retry (acquire.go), never safety.
type notifier struct {
	c    *Client
	mu   sync.Mutex
	m    map[string]*watch // by channel
	subs []*transport.Subscription
}

// watch is one awaited channel.
type watch struct {
	n       *notifier
	channel string
	refs    int
	// gen is closed by the next notice and replaced (guarded by the notifier's mu):
	// every caller of this process waiting on the key wakes at once (the readers that
	// queued behind a writer go in together), not one per notice.
	gen chan struct{}
	// ready is closed once enough nodes confirmed the subscription that any majority
	// overlaps them: a release after that point cannot go unnoticed.
	ready     chan struct{}
	confirmed []bool
	nconf     int
}

func newNotifier(c *Client) *notifier {
	nt := &notifier{c: c, m: map[string]*watch{}}
	for i, n := range c.nodes {
		s := n.tr.Subscribe(c.ctx)
		nt.subs = append(nt.subs, s)
		c.goBackground(func() { s.Apply(c.ctx) })
		c.goBackground(func() { s.Listen(func(m transport.Notice) { nt.receive(i, m) }) })
	}
	return nt
}

// needed is how many nodes must confirm a subscription: N - quorum + 1 meets every majority.
func (nt *notifier) needed() int { return len(nt.c.nodes) - nt.c.quorum + 1 }

func (nt *notifier) watch(channel string) *watch {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if w := nt.m[channel]; w != nil {
		w.refs++
		return w
	}
	w := &watch{n: nt, channel: channel, refs: 1, gen: make(chan struct{}), ready: make(chan struct{}),
		confirmed: make([]bool, len(nt.subs))}
	nt.m[channel] = w
	for _, s := range nt.subs {
		s.Add(channel)
	}
	return w
}

func (w *watch) unwatch() {
	nt := w.n
	nt.mu.Lock()
	defer nt.mu.Unlock()
	w.refs--
	if w.refs > 0 || nt.m[w.channel] != w {
		return
	}
	delete(nt.m, w.channel)
	for _, s := range nt.subs {
		s.Remove(w.channel)
	}
}

// next returns a channel closed by the next notice: taken before a try, it wakes its
// caller for a notice that comes during the try too, so none slips past.
func (w *watch) next() <-chan struct{} {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.gen
}

// poke wakes everyone of this process who watches channel: a release notice from a
// node, or this client's own release (Lock.releaseInRedis). Every copy of a release's
// notice wakes whoever took a wake-up since the last one: a waiter the first copy woke may
// have tried before the release reached the other nodes, and only their copies tell it
// the key is free there now (without them it would sleep a whole retry delay). It costs a
// waiter refused for good one more try per release at most: the copies come within a
// round trip, while it is still trying.
func (nt *notifier) poke(channel string) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	w := nt.m[channel]
	if w == nil {
		return
	}
	close(w.gen)
	w.gen = make(chan struct{})
}

// receive dispatches one node's notices and subscription confirmations (on that node's
// Listen goroutine).
func (nt *notifier) receive(idx int, m transport.Notice) {
	if !m.Subscribed {
		if m.Payload == nt.c.id {
			return // our own release: Lock.releaseInRedis wakes local waiters (poke)
		}
		nt.poke(m.Channel)
		return
	}
	nt.mu.Lock()
	if w := nt.m[m.Channel]; w != nil && !w.confirmed[idx] {
		w.confirmed[idx] = true
		w.nconf++
		if w.nconf == nt.needed() {
			close(w.ready)
		}
	}
	nt.mu.Unlock()
}

func (nt *notifier) close() {
	for _, s := range nt.subs {
		_ = s.Close() // ends Listen
	}
}
