package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

	// exec is held while the nodes run anything: by the loop around each event, and
	// by a connection's setup, which runs on the client's goroutine (toNode).
	exec  sync.Mutex
	mu    sync.Mutex
	q     eventQueue
	seq   uint64
	wake  chan struct{}
	links [][]*link // [client][node]
	cuts  []cut     // partitions and client pauses: deliveries held until the end
	t0    time.Time
	wall0 int64 // µs

	nodes []*Node
	stats worldStats
	trace *tracer
	last  atomic.Pointer[string]

	recorded [][]string // node 0's commands (Config.Record)
	fp       uint64     // the fingerprint of what the nodes ran, and when (replays)

	onForce       func(client int, key string)
	onForceLanded func(key string, client int)
	forceSHA      map[string]bool
	onGC          func(client int, until time.Time)
	onHold        func(client int, key string, wait, hold time.Duration, fence bool)
	// seqRead is the highest write sequence client ci took in from the node at addr,
	// false before the client started (the rollback program: rollback_program.go).
	seqRead func(ci int, addr string) (int64, bool)
	// rollbacks: the rollback program's replacements run and left out.
	rollbacks, rollbacksLeftOut int

	// The state judge (backing.go): the ledger, when its next check by expiry is due, and
	// the quarantine a node that lost data stands for its holders.
	g          *ledger
	judgeAt    time.Time
	quarantine time.Duration
	lead       time.Duration // how far from its clock a node takes a proposed token (fencing.go)
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
	// lagFrom..lagTo: what is sent on the link then (either way) arrives lagBy late,
	// what is sent after on time (the late-value program: faults.go, lateValue)
	lagFrom, lagTo time.Time
	lagBy          time.Duration
	seq            uint64 // deliveries scheduled on the link (their order within an instant)
	conns          int    // connections opened on the link (their numbers)
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
	fp      uint64         // the node's fingerprint (mixCmd)
	names   map[string]int // random values by order of first use here (mixCmd)
	lostAt  time.Time      // it last lost data (the state judge: backing.go)
	// replicaData is its replica's data, as of replicaAt (replication.go).
	replicaData map[string]*value
	replicaAt   time.Time
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
	w := &World{seed: seed, cfg: cfg, wake: make(chan struct{}, 1), t0: time.Now(), fp: 0xcbf29ce484222325}
	w.wall0 = w.t0.UnixMicro()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := range cfg.Nodes {
		n := &Node{w: w, idx: i, addr: fmt.Sprintf("n%d:6379", i), rate: 1, conns: map[*Session]*conn{}, snaps: map[int]map[string]*value{},
			fp: 0xcbf29ce484222325}
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
	if !now.Before(l.lagFrom) && now.Before(l.lagTo) {
		d += l.lagBy
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
	if c.dead {
		w.mu.Unlock()
		return
	}
	if c.setup > 0 {
		// Connection setup takes no simulated time, and runs here, on the writer's
		// goroutine, not as an event: go-redis holds PubSub.mu across a subscriber
		// connection's setup, and a goroutine waiting on a mutex is not durably
		// blocked, so neither synctest's clock nor the world's loop (which runs an
		// event only once every goroutine is durably blocked) would move while the
		// setup waited for them. So the setup's commands run now and their replies are
		// there to read at once, and a node that cannot answer now (down, paused, cut
		// off) resets the connection at once instead of letting it time out.
		c.setup--
		now := time.Now()
		n := c.node
		ok := !n.down && !n.paused && !w.cutLocked(c.client, n.idx, now)
		c.toNode = now
		w.mu.Unlock()
		w.exec.Lock()
		defer w.exec.Unlock()
		if ok && c.accepted && c.epoch == n.epoch && c.sess != nil && !c.sess.gone {
			w.process(c, data)
		} else {
			w.reset(c)
		}
		return
	}
	defer w.mu.Unlock()
	l := c.link
	if l.loss > 0 && l.chance(time.Now(), 3) < l.loss {
		c.dead = true // the request is lost, and so is the connection
		w.stats.lostReq.Add(1)
		w.mix(c.node, 1, uint64(time.Since(w.t0)), uint64(c.node.idx)<<32|uint64(c.client)<<16|uint64(c.id))
		w.note("net", "c%d->n%d conn %d: request lost", c.client, c.node.idx, c.id)
		return
	}
	c.toNode = w.sendAtLocked(c.client, c.node.idx, c.toNode)
	w.onLink(c.link, c.toNode, func() { w.atNode(c, data) })
}

// fin tells the node that the client closed the connection.
func (w *World) fin(c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.toNode = w.sendAtLocked(c.client, c.node.idx, c.toNode)
	w.onLink(c.link, c.toNode, func() {
		n := c.node
		if c.sess != nil && c.epoch == n.epoch {
			delete(n.conns, c.sess)
			c.sess.Close()
		}
		c.finSeen = true
	})
}

// accept opens the node's side of a connection (at its dial, under w.exec).
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
		canonical(args)
		w.stats.requests.Add(1)
		if w.cfg.Fingerprint {
			w.mixCmd(c, args)
		}
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
	w.judge()
}

// canonical puts the channels of a SUBSCRIBE or UNSUBSCRIBE of several in order. go-redis
// re-subscribes a reconnected subscriber to the channels it knows in map order, and the
// confirmations come back in the order asked: left alone, a replay would hear them in
// another order. Their order means nothing to Redis.
func canonical(args []string) {
	if len(args) > 2 && (strings.EqualFold(args[0], "subscribe") || strings.EqualFold(args[0], "unsubscribe")) {
		slices.Sort(args[1:])
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
	if reply && c.replied < 2 { // the setup's replies, there at once (toNode)
		c.replied++
		c.toCli = time.Now()
		c.deliver(data)
		return
	}
	if reply {
		c.replied++
	}
	l := c.link
	if reply && l.loss > 0 && l.chance(time.Now(), 4) < l.loss {
		c.dead = true // the command ran; its reply is lost, and so is the connection
		w.stats.lostRep.Add(1)
		w.mix(c.node, 2, uint64(time.Since(w.t0)), uint64(c.node.idx)<<32|uint64(c.client)<<16|uint64(c.id))
		w.note("net", "n%d->c%d conn %d: reply lost", c.node.idx, c.client, c.id)
		return
	}
	if reply {
		w.stats.replies.Add(1)
	}
	at := w.sendAtLocked(c.client, c.node.idx, c.toCli)
	at = at.Add(extra)
	c.toCli = at
	w.onLink(c.link, at, func() { c.deliver(data) })
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
	defer w.mu.Unlock()
	c.dead = true
	eof := func() {
		c.mu.Lock()
		c.eof = true
		c.mu.Unlock()
		c.signal()
	}
	if c.replied < 2 { // a connection still in setup: at once (toNode)
		c.toCli = time.Now()
		eof()
		return
	}
	at := time.Now().Add(w.delayLocked(c.client, c.node.idx))
	if at.Before(c.toCli) {
		at = c.toCli
	}
	c.toCli = at
	w.onLink(c.link, at, eof)
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
	slices.SortFunc(cs, func(a, b *conn) int {
		if a.client != b.client {
			return a.client - b.client
		}
		return a.id - b.id
	})
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

func (w *World) hold(f fault) {
	if w.onHold != nil {
		w.onHold(f.client, f.key, f.by, f.dur, f.fence)
	}
}

func (w *World) gc(ci int, until time.Time) {
	if w.onGC != nil {
		w.onGC(ci, until)
	}
}

// isForce reports whether a command runs a force release's delete (by its script's text:
// the one that sends the 'force' notice; its read step deletes nothing).
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
	return strings.Contains(src, "redis.call('PUBLISH', ARGV[1], 'force')")
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

// mixCmd adds a command a node runs to the schedule's fingerprints: the instant, the
// node, the client, the connection and the arguments. Two runs of a seed whose
// fingerprints agree ran the same commands in the same order at the same instants
// (SIM_REPLAY). The node's own fingerprint leaves out the order of commands on other
// nodes and names the random values (lock values, client ids, markers: 26 characters of
// crypto/rand's base32) by their order of first use on the node: two runs agree on it
// when every node ran the same commands at the same instants, up to which of two
// goroutines drew which random value at one instant.
func (w *World) mixCmd(c *conn, args []string) {
	at, who := uint64(time.Since(w.t0)), uint64(c.node.idx)<<32|uint64(c.client)<<16|uint64(c.id)
	w.fp = fnv(w.fp, at, who)
	n := c.node
	n.fp = fnv(n.fp, at, who)
	for _, a := range args {
		w.fp = fnvString(w.fp, a)
		n.fp = n.mixNamed(n.fp, a)
	}
}

// mixNamed hashes a with its random names replaced by their numbers on the node.
func (n *Node) mixNamed(h uint64, a string) uint64 {
	run := 0
	for i := 0; i <= len(a); i++ {
		if i < len(a) && (a[i] >= 'A' && a[i] <= 'Z' || a[i] >= '2' && a[i] <= '7') {
			run++
			continue
		}
		if run == 26 {
			name := a[i-26 : i]
			k, ok := n.names[name]
			if !ok {
				if n.names == nil {
					n.names = map[string]int{}
				}
				k = len(n.names)
				n.names[name] = k
			}
			h = fnvString(h, a[:i-26])
			h = fnv(h, uint64(k)|1<<40)
			a, i = a[i:], 0
		}
		run = 0
	}
	return fnvString(h, a)
}

// mix adds numbers to the fingerprints (world loop), the node's too.
func (w *World) mix(n *Node, xs ...uint64) {
	if !w.cfg.Fingerprint {
		return
	}
	w.fp = fnv(w.fp, xs...)
	n.fp = fnv(n.fp, xs...)
}

func fnv(h uint64, xs ...uint64) uint64 {
	for _, x := range xs {
		h ^= x
		h *= 0x100000001b3
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return fnv(h, uint64(len(s)))
}

// fingerprints returns the schedule's fingerprint and the nodes' (mixCmd).
func (w *World) fingerprints() (strict, perNode uint64) {
	perNode = 0xcbf29ce484222325
	for _, n := range w.nodes {
		perNode = fnv(perNode, n.fp)
	}
	return w.fp, perNode
}
