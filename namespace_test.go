package caddyredlock

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A reload that changes where keys live (here the prefix) while a request of the old
// config holds its lock is warned about: new requests for the same resource lock another
// Redis key and do not wait for it. A reload that keeps the namespace (another ttl) is
// not.
func TestReloadChangingNamespaceWarns(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 1500*time.Millisecond, nil)
	body := func(prefix, ttl string, extra ...string) string {
		return fmt.Sprintf(`
	redlock {
		%s
		prefix %s
		ttl %s
		%s
	}
%s`, redisLine(servers), prefix, ttl, strings.Join(extra, "\n"), proxyTo(up))
	}
	s := startCaddy(t, "", body("ns1:", "2s"))
	const warning = "config reload changed where keys live"
	c := &http.Client{Timeout: 10 * time.Second}
	holdDuring := func(reload func()) {
		before, _, _ := up.snapshot() // hits so far: wait for this request's own
		var wg sync.WaitGroup
		wg.Go(func() { get(t, c, "GET", s.url+"/doc", nil) })
		if !eventually(3*time.Second, func() bool { hits, _, _ := up.snapshot(); return hits > before }) {
			t.Fatal("request did not reach the upstream")
		}
		reload()
		wg.Wait()
	}
	holdDuring(func() { s.reload(t, body("ns1:", "3s")) })
	if s.logContains(warning) {
		t.Fatal("warned about a reload that kept the namespace")
	}
	holdDuring(func() { s.reload(t, body("ns2:", "3s")) })
	if !eventually(2*time.Second, func() bool { return s.logContains(warning, `"changed":["prefix"]`, `"held_locks":1`) }) {
		t.Fatal("no warning for a reload that changed the prefix while a lock was held")
	}
	// A limit lives in places of its own: holders of limit 1 and of limit 2 do not see
	// each other.
	holdDuring(func() { s.reload(t, body("ns2:", "3s", "limit 2")) })
	if !eventually(2*time.Second, func() bool { return s.logContains(warning, `"changed":["limit"]`, `"held_locks":1`) }) {
		t.Fatal("no warning for a reload that changed the limit while a lock was held")
	}
}

// A writer gives waiting readers their turn at release only where some live handler
// takes keys shared: the count is per node set and prefix (key templates aside), and
// follows handlers going live and leaving.
func TestReadersOnCountsSharedHandlersWhereKeysLive(t *testing.T) {
	nodes := "redis://test-readers-on-" + t.Name()
	mk := func(prefix string, shared bool) *Handler {
		h := &Handler{s: &settings{}, ns: namespace{nodes: nodes, prefix: prefix, keys: "{path.0}"}}
		if shared {
			h.s.shared = map[string]bool{"GET": true}
		}
		return h
	}
	reader, writer, elsewhere := mk("p:", true), mk("p:", false), mk("q:", false)
	for _, h := range []*Handler{reader, writer, elsewhere} {
		h.goLive()
	}
	if n := writer.readers.Load(); n != 1 {
		t.Errorf("writer's node set and prefix: %d handlers take keys shared, want 1", n)
	}
	if n := elsewhere.readers.Load(); n != 0 {
		t.Errorf("another prefix: %d handlers take keys shared, want 0", n)
	}
	reader.leave()
	if n := writer.readers.Load(); n != 0 {
		t.Errorf("after the reader left: %d, want 0", n)
	}
	writer.leave()
	elsewhere.leave()
}
