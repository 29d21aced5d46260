package sim

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// The network: every delivery (a write reaching a node, a reply or a release notice
// reaching a client, a connection opened or closed) is an event of the world's one queue,
// ordered by simulated time and sequence, and run by the world's one loop. Each
// connection is FIFO in each direction (TCP): a delivery never overtakes an earlier one
// of the same direction. Faults act on the deliveries (delays, partitions holding them
// until the heal, requests and replies lost with their connection, notices lost,
// duplicated or late) and on the nodes (world.go).

// event is one thing that happens at a simulated instant. Events of one instant run in
// a fixed order: the world's own (faults, their ends, restarts) first, in the order they
// were scheduled, then the deliveries, by node, client and their order on that link. Two
// deliveries that land at one instant from two clients, or from one client's sends to
// two nodes, run in the same order whichever goroutine the Go scheduler ran first (a
// single sequence number would number them in the scheduler's order).
type event struct {
	at   time.Time
	link int32  // -1: the world's; else node<<16 | client
	seq  uint64 // the world's sequence, or the link's
	fn   func()
}

func (e *event) before(o *event) bool {
	if !e.at.Equal(o.at) {
		return e.at.Before(o.at)
	}
	if e.link != o.link {
		return e.link < o.link
	}
	return e.seq < o.seq
}

// eventQueue is a binary min-heap of events.
type eventQueue []*event

func (q *eventQueue) push(e *event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) pop() *event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = nil
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].before(h[l]) {
			m = r
		}
		if !h[m].before(h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// loop runs the world's events until stop is closed. Every node command runs here.
func (w *World) loop(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		w.mu.Lock()
		if len(w.q) == 0 {
			w.mu.Unlock()
			select {
			case <-w.wake:
			case <-stop:
				return
			}
			continue
		}
		e := w.q[0]
		if d := time.Until(e.at); d > 0 {
			w.mu.Unlock()
			t.Reset(d)
			select {
			case <-t.C:
			case <-w.wake:
				if !t.Stop() {
					<-t.C
				}
			case <-stop:
				return
			}
			continue
		}
		w.q.pop()
		w.mu.Unlock()
		w.exec.Lock()
		e.fn()
		w.exec.Unlock()
	}
}

// at schedules fn at t (at least now).
func (w *World) at(t time.Time, fn func()) {
	w.mu.Lock()
	w.atLocked(t, fn)
	w.mu.Unlock()
}

func (w *World) atLocked(t time.Time, fn func()) {
	w.seq++
	w.push(&event{at: t, link: -1, seq: w.seq, fn: fn})
}

// onLink schedules fn at t as a delivery on link l (w.mu held).
func (w *World) onLink(l *link, t time.Time, fn func()) {
	l.seq++
	w.push(&event{at: t, link: int32(l.ni)<<16 | int32(l.ci), seq: l.seq, fn: fn})
}

func (w *World) push(e *event) {
	w.q.push(e)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// conn is a client's end of a connection to a node (a net.Conn for go-redis).
type conn struct {
	w      *World
	client int
	node   *Node
	id     int // its number among the link's connections
	link   *link

	mu        sync.Mutex
	rbuf      []byte
	eof       bool // the node closed it (a restart, a dropped connection)
	closed    bool // closed here
	rdl       time.Time
	readable  chan struct{} // a delivery, EOF, a close or the read deadline passing
	deadTimer *time.Timer   // signals readable at the read deadline (SetReadDeadline)

	// The node's side, touched by the world loop only.
	sess     *Session
	in       []byte
	epoch    int  // the node's incarnation when it accepted the connection
	dead     bool // black-holed: a request or reply was lost (the network dropped it)
	toNode   time.Time
	toCli    time.Time
	accepted bool
	finSeen  bool
	// setup counts the connection's first writes (go-redis's HELLO, then the hello
	// pipeline of transport.onConnect): they and their replies take no simulated time,
	// and fail at once when the node cannot answer (world.go, toNode).
	setup   int
	replied int // replies sent so far
}

var _ net.Conn = (*conn)(nil)

func (c *conn) Read(b []byte) (int, error) {
	for {
		c.mu.Lock()
		switch {
		case len(c.rbuf) > 0:
			n := copy(b, c.rbuf)
			c.rbuf = c.rbuf[n:]
			c.mu.Unlock()
			return n, nil
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case c.eof:
			c.mu.Unlock()
			return 0, io.EOF
		case !c.rdl.IsZero() && !time.Now().Before(c.rdl):
			c.mu.Unlock()
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
		c.mu.Unlock()
		<-c.readable // a delivery, EOF, a close, or the deadline's timer (SetReadDeadline)
	}
}

func (c *conn) signal() {
	select {
	case c.readable <- struct{}{}:
	default:
	}
}

func (c *conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	data := append([]byte(nil), b...)
	c.w.toNode(c, data)
	return len(b), nil
}

func (c *conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.signal()
	c.w.fin(c)
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return simAddr("client") }
func (c *conn) RemoteAddr() net.Addr { return simAddr(c.node.addr) }
func (c *conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return nil
}

// SetReadDeadline arms the deadline's timer, which wakes a waiting Read (to return the
// timeout) when it passes: one timer per deadline set (go-redis sets one per command),
// not one per wait, and no wake-up for a deadline that only moved later.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	switch {
	case t.IsZero():
		if c.deadTimer != nil {
			c.deadTimer.Stop()
		}
	case c.deadTimer == nil:
		c.deadTimer = time.AfterFunc(time.Until(t), c.signal)
	default:
		c.deadTimer.Reset(time.Until(t))
	}
	c.mu.Unlock()
	return nil
}
func (c *conn) SetWriteDeadline(time.Time) error { return nil } // writes never block

type simAddr string

func (a simAddr) Network() string { return "tcp" }
func (a simAddr) String() string  { return string(a) }

// dial opens a connection from client ci to node n, as a go-redis Dialer. It never
// blocks: go-redis dials with mutexes held (PubSub.mu), and a goroutine waiting on a
// mutex is not durably blocked, so simulated time would stop. A node that is down
// refuses at once; a link that is cut gives a connection whose traffic waits for the
// heal, so its first reply times out as a dial would.
func (w *World) dial(ctx context.Context, ci int, n *Node) (net.Conn, error) {
	w.mu.Lock()
	now := time.Now()
	down := n.downLocked(now)
	d := w.delayLocked(ci, n.idx)
	w.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	c := &conn{w: w, client: ci, node: n, readable: make(chan struct{}, 1), setup: 2}
	w.mu.Lock()
	c.link = w.links[ci][n.idx]
	c.link.conns++
	c.id = c.link.conns
	_ = d
	c.toNode = now
	w.mu.Unlock()
	w.exec.Lock()
	w.accept(c)
	w.exec.Unlock()
	w.stats.dials.Add(1)
	return c, nil
}
