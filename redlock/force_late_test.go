package redlock

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A force release whose step to a node is held up (the forcing client cut off from it,
// its commands waiting in the network: TCP retransmits them when the link heals) must,
// when it lands after the call gave up, free nothing that came after: here a holder
// granted by a bare majority that includes that node (another client holds the other
// two), which would otherwise lose that node and let a third client take the key on it
// and the other two once they are free. Held: both steps (the read, and with it the
// delete), or the delete alone (the read answered). Before the force release read what
// held the key and deleted only that, its one script deleted whatever held the key when
// it landed.
//
// Pausing the node itself (SIGSTOP) cannot order this: a paused node runs what waits on
// its sockets as it resumes, before any later holder's SET can reach it. So the forcing
// client reaches that node through a proxy that holds what it sends.
func TestLateForceDeleteSparesALaterHolder(t *testing.T) {
	skipShort(t)
	for _, held := range []string{"read", "delete"} {
		t.Run(held, func(t *testing.T) { lateForceDelete(t, held) })
	}
}

func lateForceDelete(t *testing.T, held string) {
	servers := redistest.StartN(t, 5)
	px := newHoldProxy(t, servers[2].Addr())
	urls := redistest.URLs(servers)
	urls[2] = "redis://" + px.addr()
	opt := fastOptions()
	opt.TTL = 20 * time.Second // no lock lapses on a loaded machine before it is judged
	// One client meets the new nodes first and marks them all (a fresh start needs one
	// client's marks: voting.go); the others then read its markers and vote at once.
	// Every client waits until every node votes for it: the test needs all five.
	a := newTestClient(t, servers, opt)
	waitVoting(t, a)
	forcer, err := New(urls, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeForGood(forcer) })
	b := newTestClient(t, servers, opt)
	for _, c := range []*Client{forcer, b} {
		waitVoting(t, c)
	}
	ctx := context.Background()
	everywhere := func(key string) *Lock {
		t.Helper()
		l, err := a.Acquire(ctx, key, AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !eventually(3*time.Second, func() bool {
			for _, s := range servers {
				if v, ok := rawGet(t, s, key); !ok || v != l.value {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("%s not on every node", key)
		}
		return l
	}
	// Every node runs both steps once, so the held one finds its script loaded when it
	// lands (EVALSHA; NOSCRIPT there would run nothing and prove nothing).
	everywhere("warm")
	if res, err := forcer.ForceRelease(ctx, "warm"); err != nil || res.Deleted != 5 {
		t.Fatalf("warm-up force release: %+v, %v", res, err)
	}

	first := everywhere("k")
	nm := forcer.names("k")
	if held == "read" {
		px.holdAll()
	} else {
		px.holdFrom([]byte(nm.channel)) // only the delete names the release channel
	}
	res, err := forcer.ForceRelease(ctx, "k")
	if err == nil || res.Nodes[2].Err == nil || res.Answered != 4 || res.Deleted != 4 {
		t.Fatalf("force release with node 2 cut off: %+v, %v; want node 2's error and 4 deletes", res, err)
	}
	for i, s := range servers {
		if _, ok := rawGet(t, s, "k"); ok != (i == 2) {
			t.Fatalf("after the force release, node %d has the key: %v (want only node 2, whose delete is held)", i, ok)
		}
	}
	// The first holder goes (its own release reaches node 2), and another client holds
	// nodes 3 and 4 (a minority), so the next holder's majority is nodes 0, 1 and 2.
	_ = first.Release(ctx)
	if !eventually(3*time.Second, func() bool { _, ok := rawGet(t, servers[2], "k"); return !ok }) {
		t.Fatal("k still on node 2 after the first holder's release")
	}
	other := func(cmd ...any) {
		t.Helper()
		for _, s := range servers[3:] {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
			err := rc.Do(ctx, cmd...).Err()
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	other("set", nm.lock, "other", "px", 60000)
	next, err := b.Acquire(ctx, "k", AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("next holder, on nodes 0, 1 and 2: %v", err)
	}
	defer next.Release(ctx)
	if v, _ := rawGet(t, servers[2], "k"); v != next.value {
		t.Fatal("the next holder is not on node 2")
	}
	noScript := noScriptErrors(t, servers[2])
	px.release([]byte(nm.writer)) // the force's held step reaches node 2 and runs
	if noScriptErrors(t, servers[2]) != noScript {
		t.Fatal("the held step found no script on node 2: nothing was tested")
	}
	if v, _ := rawGet(t, servers[2], "k"); v != next.value {
		t.Errorf("the force release's held step (%s held) ran late and freed node 2 under the holder that came after it", held)
	}
	other("del", nm.lock) // the other client's holder goes: nodes 2, 3 and 4 would be free
	if l, err := a.Acquire(ctx, "k", AcquireOptions{}); err == nil {
		_ = l.Release(ctx)
		t.Errorf("a second holder took k on nodes 2, 3 and 4 while the next holder held it")
	} else if !isBusy(err) {
		t.Errorf("a second holder: %v, want busy", err)
	}
}

// A force release's delete, run after other holders came (as when it lands late), frees
// only what its read saw, in every form a key is held: a writer's value, a limited key's
// places, readers' entries (a later reader keeps the name), a waiting writer's mark, and
// a key of another type (deleted while it still is one).
func TestForceDeleteFreesOnlyWhatItRead(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	c := newTestClient(t, []*redistest.Server{srv}, fastOptions())
	other := newTestClient(t, []*redistest.Server{srv}, fastOptions())
	waitUsable(t, c)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	ctx := context.Background()
	// force runs the read, then meanwhile, then the delete, and returns what it deleted.
	force := func(key string, meanwhile func()) int64 {
		t.Helper()
		nm, keys := c.forceKeys(key)
		dkeys, argv, err := forceRead(ctx, c.nodes[0], keys, nm.channel)
		if err != nil || dkeys == nil {
			t.Fatalf("read of %s: %v %v", key, dkeys, err)
		}
		meanwhile()
		n, err := forceReleaseScript.Run(ctx, c.nodes[0].tr, dkeys, argv...).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	do := func(cmd ...any) {
		t.Helper()
		if err := rc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	get := func(name string) string { return rc.Get(ctx, name).Val() }

	// A writer, then a later one.
	w, _ := c.forceKeys("w")
	do("set", w.lock, "first", "px", 60000)
	do("set", w.writer, "waiter1:", "px", 60000)
	if n := force("w", func() {
		do("set", w.lock, "later", "px", 60000)
		do("set", w.writer, "waiter2:", "px", 60000)
	}); n != 0 || get(w.lock) != "later" || get(w.writer) != "waiter2:" {
		t.Errorf("writer: deleted %d, left %q and mark %q; want the later holder and mark kept", n, get(w.lock), get(w.writer))
	}
	if n := force("w", func() {}); n != 1 || get(w.lock) != "" || get(w.writer) != "" {
		t.Errorf("writer, nothing meanwhile: deleted %d, left %q and mark %q", n, get(w.lock), get(w.writer))
	}

	// Places: place 3 taken again meanwhile, place 5 not.
	places := c.slotNames("lim", MaxLimit)
	do("set", places[3].lock, "first", "px", 60000)
	do("set", places[5].lock, "five", "px", 60000)
	if n := force("lim", func() { do("set", places[3].lock, "later", "px", 60000) }); n != 1 ||
		get(places[3].lock) != "later" || get(places[5].lock) != "" {
		t.Errorf("places: deleted %d, left %q and %q; want place 3's later holder only", n, get(places[3].lock), get(places[5].lock))
	}

	// Readers: a reader of another client comes meanwhile.
	r1, err := c.Acquire(ctx, "rd", AcquireOptions{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var r2 *Lock
	rd, _ := c.forceKeys("rd")
	if n := force("rd", func() {
		if r2, err = other.Acquire(ctx, "rd", AcquireOptions{Shared: true}); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("readers: deleted %d, want 1 (the first reader's entry)", n)
	}
	if e := rc.ZRange(ctx, rd.readers, 0, -1).Val(); len(e) != 1 || e[0] != r2.value {
		t.Errorf("readers left: %q, want only the later reader's entry", e)
	}
	if get(rd.lock) != sharedMarker || rc.PTTL(ctx, rd.lock).Val() <= 0 {
		t.Errorf("the later reader's key name: %q, want the readers' marker with an expiry", get(rd.lock))
	}
	if _, err := other.Acquire(ctx, "rd", AcquireOptions{}); !isBusy(err) {
		t.Errorf("a writer while the later reader holds: %v, want busy", err)
	}
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	// Readers gone, a writer came meanwhile.
	r3, err := c.Acquire(ctx, "rw", AcquireOptions{Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var wr *Lock
	rw, _ := c.forceKeys("rw")
	force("rw", func() {
		_ = r3.Release(ctx)
		if wr, err = other.Acquire(ctx, "rw", AcquireOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if get(rw.lock) != wr.value {
		t.Errorf("a writer after the readers: the name holds %q, want the writer's value", get(rw.lock))
	}
	_ = wr.Release(ctx)

	// Another client's lock of another type, then a string holder.
	x, _ := c.forceKeys("x")
	do("hset", x.lock, "holder", "1")
	if n := force("x", func() { do("del", x.lock); do("set", x.lock, "later", "px", 60000) }); n != 0 || get(x.lock) != "later" {
		t.Errorf("another type, then a string holder: deleted %d, left %q", n, get(x.lock))
	}
	do("del", x.lock)
	do("hset", x.lock, "holder", "1")
	if n := force("x", func() {}); n != 1 || rc.Exists(ctx, x.lock).Val() != 0 {
		t.Errorf("another type: deleted %d, want it gone", n)
	}
}

// noScriptErrors reads how many NOSCRIPT errors the node answered so far.
// waitVoting waits until every node votes for c (usable, markers read, no quarantine).
func waitVoting(t *testing.T, c *Client) {
	t.Helper()
	waitUsable(t, c)
	if !eventually(5*time.Second, func() bool {
		for _, s := range c.Status().Nodes {
			if !s.Votes {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every node votes: %+v", c.Status().Nodes)
	}
}

func noScriptErrors(t *testing.T, s *redistest.Server) int {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_NOSCRIPT:count="); ok {
			n, _ := strconv.Atoi(rest)
			return n
		}
	}
	return 0
}

// holdProxy forwards TCP connections to a node and can hold what the clients send, as a
// cut link whose traffic waits to be retransmitted: from now (holdAll), or from the first
// write that contains a needle (holdFrom), on every connection. The node's replies flow
// meanwhile. release delivers what was held.
type holdProxy struct {
	t        testing.TB
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	holding bool
	needle  []byte
	pipes   []*heldPipe
}

type heldPipe struct {
	client, server *net.TCPConn
	held           []byte // sent by the client while held, not delivered yet
	clientGone     bool   // the client closed its side
	serverGone     chan struct{}
}

func newHoldProxy(t testing.TB, upstream string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{t: t, ln: ln, upstream: upstream}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, pp := range p.pipes {
			pp.client.Close()
			pp.server.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			pp := &heldPipe{client: c.(*net.TCPConn), server: s.(*net.TCPConn), serverGone: make(chan struct{})}
			p.mu.Lock()
			p.pipes = append(p.pipes, pp)
			p.mu.Unlock()
			wg.Go(func() { p.fromClient(pp) })
			wg.Go(func() { p.fromServer(pp) })
		}
	})
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

func (p *holdProxy) holdAll() {
	p.mu.Lock()
	p.holding = true
	p.mu.Unlock()
}

func (p *holdProxy) holdFrom(needle []byte) {
	p.mu.Lock()
	p.needle = needle
	p.mu.Unlock()
}

// fromServer forwards the node's replies until the node closes the connection (a client
// gone meanwhile does not end it: serverGone says the node read everything sent).
func (p *holdProxy) fromServer(pp *heldPipe) {
	buf := make([]byte, 64<<10)
	for {
		n, err := pp.server.Read(buf)
		if n > 0 {
			_, _ = pp.client.Write(buf[:n])
		}
		if err != nil {
			close(pp.serverGone)
			pp.client.Close()
			return
		}
	}
}

// fromClient forwards what the client sends, or holds it.
func (p *holdProxy) fromClient(pp *heldPipe) {
	buf := make([]byte, 64<<10)
	for {
		n, err := pp.client.Read(buf)
		p.mu.Lock()
		if n > 0 {
			if p.needle != nil && bytes.Contains(buf[:n], p.needle) {
				p.holding, p.needle = true, nil
			}
			if p.holding {
				pp.held = append(pp.held, buf[:n]...)
			} else {
				_, _ = pp.server.Write(buf[:n])
			}
		}
		if err != nil {
			pp.clientGone = true
			if !p.holding || len(pp.held) == 0 {
				_ = pp.server.CloseWrite()
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// release stops holding and delivers what was held, then waits until the node has run
// it on every connection whose held bytes contain witness: such a connection is one the
// client closed after its call timed out, so the node reads the held commands, then the
// end of the connection, and closes it.
func (p *holdProxy) release(witness []byte) {
	p.t.Helper()
	var wait []*heldPipe
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		open := false
		for _, pp := range p.pipes {
			open = open || bytes.Contains(pp.held, witness) && !pp.clientGone
		}
		if !open || time.Now().After(deadline) {
			break
		}
		p.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	p.holding = false
	for _, pp := range p.pipes {
		if len(pp.held) == 0 {
			continue
		}
		if bytes.Contains(pp.held, witness) {
			wait = append(wait, pp)
		}
		_, _ = pp.server.Write(pp.held)
		pp.held = nil
		if pp.clientGone {
			_ = pp.server.CloseWrite()
		}
	}
	p.mu.Unlock()
	if len(wait) == 0 {
		p.t.Fatal("holdProxy: nothing held carried the witness")
	}
	for _, pp := range wait {
		select {
		case <-pp.serverGone:
		case <-time.After(5 * time.Second):
			p.t.Fatal("holdProxy: the node did not close a connection whose client had closed it")
		}
	}
}
