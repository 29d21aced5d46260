package caddyredlock

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// tunnelBackend serves Upgrade requests as a line protocol: "work D" keeps it busy for D
// (uninterrupted, as an upstream that does not notice its client left), then answers
// "done"; the client's EOF ends the session (the backend closes its side). The upstream
// counts the whole session as inside the key, so a request overlapping unfinished work
// counts as an overlap. started counts the "work" messages it took up.
type tunnelBackend struct{ started atomic.Int32 }

func (b *tunnelBackend) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") == "" {
		io.WriteString(w, "plain") // the plain requests of the same key
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: lines\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "work "); ok {
			dur, _ := time.ParseDuration(d)
			b.started.Add(1)
			time.Sleep(dur) // the work: what a request after the tunnel must not overlap
			io.WriteString(brw, "done\n")
			brw.Flush()
		}
	}
}

// openTunnel sends an Upgrade request for path through Caddy and returns the switched
// connection.
func openTunnel(t *testing.T, s *site, path string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: lines\r\n\r\n", path)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	return c.(*net.TCPConn), br
}

// A tunnel that ends early on Caddy's side (the client resets the connection, or
// reverse_proxy's stream_timeout) leaves the upstream working on the last message: the
// lock drains one ttl, so the next request of the key never overlaps that work. A clean
// close on both sides releases at once; a lost lock closes the tunnel.
func TestTunnelEndDrainsUnlessClean(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	backend := &tunnelBackend{}
	up := newUpstream(t, 0, backend.serve)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix tunnel:
		key res
		ttl 2s
		wait 10s
		node_timeout 300ms
	}
	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
		stream_timeout 1500ms
	}`, redisLine(servers), up.addr))
	adm := newAdmClient(s)
	c := &http.Client{Timeout: 20 * time.Second}
	// next sends a plain request for the same key and checks it did not overlap the work.
	next := func(t *testing.T) {
		t.Helper()
		if code, body, _ := get(t, c, "GET", s.url+"/plain", nil); code != 200 {
			t.Fatalf("plain request: %d %s", code, body)
		}
		if _, overlaps, _ := up.snapshot(); overlaps != 0 {
			t.Fatalf("a request reached the upstream while the tunnel's last message was still being worked on: %v", up.overlapLog)
		}
	}

	t.Run("client reset", func(t *testing.T) {
		conn, _ := openTunnel(t, s, "/ws")
		before := backend.started.Load()
		fmt.Fprintf(conn, "work 800ms\n")
		if !eventually(5*time.Second, func() bool { return backend.started.Load() > before }) {
			t.Fatal("the backend never took up the message")
		}
		_ = conn.SetLinger(0)
		_ = conn.Close() // RST: the tunnel ends at once on the read error
		next(t)
	})

	t.Run("stream_timeout", func(t *testing.T) {
		conn, br := openTunnel(t, s, "/ws")
		defer conn.Close()
		fmt.Fprintf(conn, "work 2500ms\n") // still working when the tunnel is cut at 1.5s
		if _, err := br.ReadString('\n'); err == nil {
			t.Fatal("the tunnel outlived stream_timeout")
		}
		next(t)
	})

	t.Run("clean close", func(t *testing.T) {
		conn, br := openTunnel(t, s, "/ws")
		fmt.Fprintf(conn, "work 10ms\n")
		if line, err := br.ReadString('\n'); err != nil || line != "done\n" {
			t.Fatalf("reply: %q %v", line, err)
		}
		_ = conn.CloseWrite() // FIN: the backend ends the session, Caddy passes its end back
		if _, err := br.ReadString('\n'); err != io.EOF {
			t.Fatalf("after FIN: %v, want EOF", err)
		}
		conn.Close()
		// Released at once, not drained.
		if !eventually(5*time.Second, func() bool { l := adm.locks(t); return l.Held == 0 && l.Draining == 0 }) {
			t.Fatalf("after a clean close: %+v", adm.locks(t))
		}
		next(t)
	})

	t.Run("lost lock closes the tunnel", func(t *testing.T) {
		conn, br := openTunnel(t, s, "/ws")
		defer conn.Close()
		var r map[string]any
		adm.json(t, "DELETE", "/redlock/keys?key=res", &r)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadString('\n'); err == nil || isTimeout(err) {
			t.Fatalf("the tunnel stayed open after its lock was lost: %v", err)
		}
	})
	noKeysLeft(t, servers, "tunnel:")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
