package sim

import (
	"container/heap"
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

// event is one thing that happens at a simulated instant.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
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
		heap.Pop(&w.q)
		w.mu.Unlock()
		e.fn()
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
	heap.Push(&w.q, &event{at: t, seq: w.seq, fn: fn})
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
	id     int
	link   *link

	mu        sync.Mutex
	rbuf      []byte
	eof       bool // the node closed it (a restart, a dropped connection)
	closed    bool // closed here
	rdl       time.Time
	readable  chan struct{} // a delivery, EOF or a deadline change
	deadTimer *time.Timer

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
		}
		dl := c.rdl
		c.mu.Unlock()
		var tc <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			}
			if c.deadTimer == nil {
				c.deadTimer = time.NewTimer(d)
			} else {
				c.deadTimer.Reset(d)
			}
			tc = c.deadTimer.C
		}
		select {
		case <-c.readable:
		case <-tc:
		}
		if tc != nil {
			c.deadTimer.Stop()
		}
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
func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	c.signal()
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
	w.nconns++
	c.id = w.nconns
	c.link = w.links[ci][n.idx]
	_ = d
	c.toNode = now
	w.atLocked(now, func() { w.accept(c) })
	w.mu.Unlock()
	w.stats.dials.Add(1)
	return c, nil
}
