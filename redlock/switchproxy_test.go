package redlock

import (
	"net"
	"sync"
	"testing"
)

// switchProxy is one address in front of a Redis server, as a failover proxy or a
// virtual IP is: it forwards TCP connections to its upstream, and switchTo moves every
// open connection to another server WITHOUT closing the client's side (each connection's
// upstream is closed and dialled anew), so a client keeps its connections across a
// failover and sends no hello. Switch only while the clients are idle: a reply in flight
// is lost. stall drops what the upstream sends from now on (a replication link that
// stops delivering: the replica sees nothing more), while the upstream still reads.
type switchProxy struct {
	t  testing.TB
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	upstream string
	stalled  bool
	pipes    []*switchPipe
	closed   bool
}

type switchPipe struct {
	client net.Conn
	server net.Conn // current upstream, guarded by switchProxy.mu
}

func newSwitchProxy(t testing.TB, upstream string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{t: t, ln: ln, upstream: upstream}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.closed = true
		for _, pp := range p.pipes {
			pp.client.Close()
			pp.server.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			s, err := net.Dial("tcp", p.upstream)
			if err != nil || p.closed {
				p.mu.Unlock()
				c.Close()
				if s != nil {
					s.Close()
				}
				continue
			}
			pp := &switchPipe{client: c, server: s}
			p.pipes = append(p.pipes, pp)
			p.mu.Unlock()
			p.wg.Go(func() { p.fromClient(pp) })
			p.wg.Go(func() { p.fromServer(pp, s) })
		}
	})
	return p
}

func (p *switchProxy) addr() string { return p.ln.Addr().String() }

// stall drops everything the upstream sends from now on.
func (p *switchProxy) stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// switchTo moves every connection, open and future, to upstream.
func (p *switchProxy) switchTo(upstream string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = upstream
	for _, pp := range p.pipes {
		s, err := net.Dial("tcp", upstream)
		if err != nil {
			p.t.Fatalf("switch to %s: %v", upstream, err)
		}
		old := pp.server
		pp.server = s
		old.Close() // its fromServer ends without closing the client
		p.wg.Go(func() { p.fromServer(pp, s) })
	}
}

// fromServer forwards s's replies to the client while s is the pipe's upstream; when
// the upstream itself ends the connection (not a switch), the client's is closed too.
func (p *switchProxy) fromServer(pp *switchPipe, s net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		p.mu.Lock()
		current, stalled := pp.server == s, p.stalled
		p.mu.Unlock()
		if n > 0 && current && !stalled {
			_, _ = pp.client.Write(buf[:n])
		}
		if err != nil {
			if current {
				pp.client.Close()
			}
			return
		}
	}
}

// fromClient forwards what the client sends to the pipe's current upstream.
func (p *switchProxy) fromClient(pp *switchPipe) {
	buf := make([]byte, 64<<10)
	for {
		n, err := pp.client.Read(buf)
		p.mu.Lock()
		s := pp.server
		if n > 0 {
			_, _ = s.Write(buf[:n])
		}
		p.mu.Unlock()
		if err != nil {
			s.Close()
			return
		}
	}
}
