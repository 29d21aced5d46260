package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// World is one schedule's simulated world: the nodes, the network between them and the
// clients, and the event queue every delivery goes through. Everything in it runs
// inside one testing/synctest bubble, so time.Now is the bubble's simulated clock.
type World struct {
	seed uint64
	cfg  Config

	mu     sync.Mutex
	q      eventQueue
	seq    uint64
	wake   chan struct{}
	nconns int
	links  [][]*link // [client][node]
	cuts   []cut     // partitions and client pauses: deliveries held until the end
	t0     time.Time
	wall0  int64 // µs

	nodes []*Node
	stats worldStats
	trace *tracer
	last  atomic.Pointer[string]

	recorded [][]string // node 0's commands (Config.Record)

	onForce       func(client int, key string)
	onForceLanded func(key string, client int)
	forceSHA      map[string]bool
	onGC          func(client int, until time.Time)
}

type worldStats struct {
	dials, requests, replies, notices, lostReq, lostRep, noticeLost, noticeDup atomic.Int64
}

// link is the path between one client and one node. Its delays and losses are drawn by
// draw: a hash of the seed, the link, the instant and what is drawn, not a stream: the
// goroutines that send at one simulated instant run in an order the Go scheduler picks,
// and a stream would hand them its numbers in that order, so one reordering would shift
// every later draw of the schedule.
type link struct {
	seed    uint64
	ci, ni  int
	base    time.Duration // one-way delay
	jitter  time.Duration
	loss    float64 // a request or reply lost (its connection black-holed)
	slowTo  time.Time
	slowBy  time.Duration
	noticeP float64 // a release notice lost, duplicated or late
}

// cut is a partition of client from node (node -1: from every node, a process pause)
// from..to: deliveries on the link wait for to (TCP retransmits), dials time out.
type cut struct {
	client, node int
	from, to     time.Time
}

// Node is one simulated Redis server on the network.
type Node struct {
	w      *World
	idx    int
	addr   string
	srv    *Server
	rate   float64 // the node clock's rate against the clients' (drift)
	offset time.Duration

	// Guarded by w.mu (dials read them).
	down   bool
	paused bool
	epoch  int

	// The world loop's alone.
	conns   map[*Session]*conn
	backlog []pending
	snaps   map[int]map[string]*value
	runs    int
}

type pending struct {
	c    *conn
	data []byte
}

func (n *Node) downLocked(time.Time) bool { return n.down }

// clockUS is the node's wall clock, µs.
func (n *Node) clockUS() int64 {
	el := time.Since(n.w.t0)
	return n.w.wall0 + n.offset.Microseconds() + int64(float64(el.Microseconds())*n.rate)
}

func newWorld(seed uint64, cfg Config) *World {
	w := &World{seed: seed, cfg: cfg, wake: make(chan struct{}, 1), t0: time.Now()}
	w.wall0 = w.t0.UnixMicro()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := range cfg.Nodes {
		n := &Node{w: w, idx: i, addr: fmt.Sprintf("n%d:6379", i), rate: 1, conns: map[*Session]*conn{}, snaps: map[int]map[string]*value{}}
		n.srv = NewServer(n.addr, n.clockUS, w.runID(n))
		n.srv.push = n.push
		w.nodes = append(w.nodes, n)
	}
	for ci := range cfg.Clients {
		row := make([]*link, cfg.Nodes)
		for ni := range cfg.Nodes {
			row[ni] = &link{seed: seed, ci: ci, ni: ni,
				base:   time.Duration(100+r.IntN(1900)) * time.Microsecond,
				jitter: time.Duration(50+r.IntN(500)) * time.Microsecond}
		}
		w.links = append(w.links, row)
	}
	return w
}

// runID is a node's run_id for its current run: 40 hex digits, from the seed.
func (w *World) runID(n *Node) string {
	n.runs++
	h := sha1hex(fmt.Sprintf("%d/%d/%d", w.seed, n.idx, n.runs))
	return h
}

// cutLocked reports whether client ci's deliveries to or from node ni are held now.
func (w *World) cutLocked(ci, ni int, now time.Time) bool {
	_, ok := w.healLocked(ci, ni, now)
	return ok
}

// healLocked returns when the cuts covering the link at now end.
func (w *World) healLocked(ci, ni int, now time.Time) (time.Time, bool) {
	end, cutNow := now, false
	for changed := true; changed; {
		changed = false
		for _, c := range w.cuts {
			if c.client == ci && (c.node == ni || c.node < 0) && !end.Before(c.from) && end.Before(c.to) {
				end, cutNow, changed = c.to, true, true
			}
		}
	}
	return end, cutNow
}

// delayLocked draws one one-way delay on a link.
func (w *World) delayLocked(ci, ni int) time.Duration {
	l := w.links[ci][ni]
	now := time.Now()
	d := l.base + time.Duration(l.draw(now, 1)%uint64(l.jitter+1))
	if now.Before(l.slowTo) {
		d += time.Duration(l.draw(now, 2) % uint64(l.slowBy+1))
	}
	return d
}

// sendAtLocked is when a delivery sent now on the link arrives: after its delay, after
// the link's cuts heal, and never before the previous delivery in that direction.
func (w *World) sendAtLocked(ci, ni int, last time.Time) time.Time {
	now := time.Now()
	at := now
	if heal, cut := w.healLocked(ci, ni, now); cut {
		at = heal
	}
	at = at.Add(w.delayLocked(ci, ni))
	if at.Before(last) {
		at = last
	}
	return at
}

// toNode sends a client's bytes to the node.
func (w *World) toNode(c *conn, data []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.dead {
		return
	}
	if c.setup > 0 {
		// Connection setup takes no simulated time. go-redis holds PubSub.mu across a
		// subscriber connection's setup, and a goroutine waiting on a mutex is not
		// durably blocked: synctest's clock would stop while the setup waits for it. So
		// the setup's commands run now, and a node that cannot answer now (down,
		// paused, cut off) resets the connection at once instead of letting it time out.
		c.setup--
		now := time.Now()
		n := c.node
		if n.down || n.paused || w.cutLocked(c.client, n.idx, now) {
			c.dead = true
			w.atLocked(now, func() { w.reset(c) })
			return
		}
		c.toNode = now
		w.atLocked(now, func() { w.atNode(c, data) })
		return
	}
	l := c.link
	if l.loss > 0 && l.chance(time.Now(), 3) < l.loss {
		c.dead = true // the request is lost, and so is the connection
		w.stats.lostReq.Add(1)
		w.note("net", "c%d->n%d conn %d: request lost", c.client, c.node.idx, c.id)
		return
	}
	c.toNode = w.sendAtLocked(c.client, c.node.idx, c.toNode)
	w.atLocked(c.toNode, func() { w.atNode(c, data) })
}

// fin tells the node that the client closed the connection.
func (w *World) fin(c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.toNode = w.sendAtLocked(c.client, c.node.idx, c.toNode)
	w.atLocked(c.toNode, func() {
		n := c.node
		if c.sess != nil && c.epoch == n.epoch {
			delete(n.conns, c.sess)
			c.sess.Close()
		}
		c.finSeen = true
	})
}

// accept opens the node's side of a connection (world loop).
func (w *World) accept(c *conn) {
	n := c.node
	w.mu.Lock()
	down := n.down
	w.mu.Unlock()
	if down {
		w.reset(c)
		return
	}
	c.sess = n.srv.NewSession()
	c.epoch = n.epoch
	c.accepted = true
	n.conns[c.sess] = c
}

// atNode runs a delivery's commands on the node (world loop).
func (w *World) atNode(c *conn, data []byte) {
	n := c.node
	w.mu.Lock()
	down, paused := n.down, n.paused
	w.mu.Unlock()
	if down || !c.accepted || c.epoch != n.epoch || c.sess == nil || c.sess.gone {
		return // reset: the node restarted or dropped the connection
	}
	if paused {
		n.backlog = append(n.backlog, pending{c, data})
		return
	}
	w.process(c, data)
}

func (w *World) process(c *conn, data []byte) {
	c.in = append(c.in, data...)
	var out []byte
	for {
		args, used, err := parseRequest(c.in)
		if err == errIncomplete {
			break
		}
		if err != nil {
			out = errReply("ERR Protocol error: " + err.Error()).append(out)
			c.in = nil
			break
		}
		c.in = c.in[used:]
		w.stats.requests.Add(1)
		if w.trace != nil {
			w.note("cmd", "n%d c%d conn %d: %s", c.node.idx, c.client, c.id, traceArgs(args))
		}
		if w.onForceLanded != nil && w.isForce(args) && len(args) > 3 {
			w.onForceLanded(strings.TrimPrefix(args[3], "redlock:"), c.client)
		}
		if w.cfg.Record && c.node.idx == 0 {
			w.recorded = append(w.recorded, args)
		}
		for _, r := range c.sess.Exec(args) {
			out = r.append(out)
		}
	}
	if len(c.in) == 0 {
		c.in = nil
	}
	if len(out) > 0 {
		w.toClient(c, out, 0, true)
	}
}

// toClient sends the node's bytes to the client; reply says whether they answer a
// request (which may be lost with its connection).
func (w *World) toClient(c *conn, data []byte, extra time.Duration, reply bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.dead {
		return
	}
	if reply && c.replied < 2 { // the setup's replies (toNode)
		c.replied++
		at := time.Now()
		if at.Before(c.toCli) {
			at = c.toCli
		}
		c.toCli = at
		w.atLocked(at, func() { c.deliver(data) })
		return
	}
	if reply {
		c.replied++
	}
	l := c.link
	if reply && l.loss > 0 && l.chance(time.Now(), 4) < l.loss {
		c.dead = true // the command ran; its reply is lost, and so is the connection
		w.stats.lostRep.Add(1)
		w.note("net", "n%d->c%d conn %d: reply lost", c.node.idx, c.client, c.id)
		return
	}
	if reply {
		w.stats.replies.Add(1)
	}
	at := w.sendAtLocked(c.client, c.node.idx, c.toCli)
	at = at.Add(extra)
	c.toCli = at
	w.atLocked(at, func() { c.deliver(data) })
}

func (c *conn) deliver(data []byte) {
	c.mu.Lock()
	if !c.closed {
		c.rbuf = append(c.rbuf, data...)
	}
	c.mu.Unlock()
	c.signal()
}

// reset ends a connection from the node's side: the client reads EOF after what is
// already on its way.
func (w *World) reset(c *conn) {
	if c.sess != nil {
		delete(c.node.conns, c.sess)
		c.sess.Close()
	}
	c.epoch = -1
	w.mu.Lock()
	at := time.Now().Add(w.delayLocked(c.client, c.node.idx))
	if c.replied < 2 {
		at = time.Now() // a connection still in setup (toNode)
	}
	if at.Before(c.toCli) {
		at = c.toCli
	}
	c.toCli = at
	c.dead = true
	w.atLocked(at, func() {
		c.mu.Lock()
		c.eof = true
		c.mu.Unlock()
		c.signal()
	})
	w.mu.Unlock()
}

// push delivers a pub/sub message (a release notice) to a subscriber connection, with
// the link's notice faults: lost, duplicated or late.
func (n *Node) push(s *Session, r reply) {
	c := n.conns[s]
	if c == nil {
		return
	}
	w := n.w
	data := r.append(nil)
	n.w.stats.notices.Add(1)
	l := c.link
	if l.noticeP > 0 {
		w.mu.Lock()
		x := l.chance(time.Now(), 5)
		w.mu.Unlock()
		switch {
		case x < l.noticeP/3:
			w.stats.noticeLost.Add(1)
			return
		case x < 2*l.noticeP/3:
			w.stats.noticeDup.Add(1)
			w.toClient(c, data, 0, false)
		case x < l.noticeP:
			w.toClient(c, data, 30*time.Millisecond, false)
			return
		}
	}
	w.toClient(c, data, 0, false)
}

// dropConns resets every connection of the node (a restart, or connections dropped).
func (w *World) dropConns(n *Node) {
	list := make([]*conn, 0, len(n.conns))
	for _, c := range n.conns {
		list = append(list, c)
	}
	sortConns(list)
	for _, c := range list {
		w.reset(c)
	}
}

func sortConns(cs []*conn) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].id < cs[j-1].id; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

func traceArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if len(a) > 40 {
			a = a[:12] + "…"
		}
		b.WriteString(fmt.Sprintf("%q", a))
	}
	return b.String()
}

func (w *World) force(ci int, key string) {
	if w.onForce != nil {
		w.onForce(ci, key)
	}
}

func (w *World) gc(ci int, until time.Time) {
	if w.onGC != nil {
		w.onGC(ci, until)
	}
}

// isForce reports whether a command runs the force-release script (by its text).
func (w *World) isForce(args []string) bool {
	switch strings.ToUpper(args[0]) {
	case "EVAL":
		return len(args) > 1 && isForceSrc(args[1])
	case "EVALSHA":
		if len(args) < 2 {
			return false
		}
		if w.forceSHA == nil {
			w.forceSHA = map[string]bool{}
		}
		f, ok := w.forceSHA[args[1]]
		if !ok {
			if src, known := sources.Load(strings.ToLower(args[1])); known {
				f = isForceSrc(src.(string))
				w.forceSHA[args[1]] = f
			}
		}
		return f
	}
	return false
}

func isForceSrc(src string) bool {
	return strings.HasPrefix(strings.TrimSpace(src), "local n = redis.call('DEL', KEYS[1])")
}

// draw is the link's random number for what (a small constant) at instant t.
func (l *link) draw(t time.Time, what uint64) uint64 {
	x := l.seed ^ uint64(t.UnixNano())*0x9e3779b97f4a7c15 ^ uint64(l.ci+1)<<48 ^ uint64(l.ni+1)<<40 ^ what<<56
	// splitmix64
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// chance is draw as a number in [0, 1).
func (l *link) chance(t time.Time, what uint64) float64 {
	return float64(l.draw(t, what)>>11) / (1 << 53)
}
