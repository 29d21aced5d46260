package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// exerciseFeatures runs every feature on the nodes at urls with opt: acquire with a
// fencing token, renewal (KeepAlive) past the ttl, a second client that waits and is
// woken by the release notice (pub/sub), release, inspect and force release, and the
// health checks (INFO) and permission probe passing on every node.
func exerciseFeatures(t *testing.T, urls []string, opt Options) {
	t.Helper()
	a, err := New(urls, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { closeForGood(a) })
	b, err := New(urls, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { closeForGood(b) })
	waitUsable(t, a)
	waitUsable(t, b)
	ctx := context.Background()

	l, err := a.Acquire(ctx, "res", AcquireOptions{Fencing: true, TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if l.Token() <= 0 {
		t.Fatalf("fencing token = %d", l.Token())
	}
	if err := l.KeepAlive(150*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	st, err := a.Inspect(ctx, "res")
	if err != nil || !st.QuorumHeld || !st.HeldHere {
		t.Fatalf("Inspect = %+v, %v", st, err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := b.Acquire(ctx, "res", AcquireOptions{Wait: 10 * time.Second, Fencing: true})
		if err == nil {
			if w.Token() <= l.Token() {
				err = errors.New("waiter's token is not above the holder's")
			}
			err = errors.Join(err, w.Release(ctx))
		}
		got <- err
	}()
	time.Sleep(time.Second) // longer than the ttl (a lapse under test): renewals keep the lock
	select {
	case err := <-got:
		t.Fatalf("the waiter got the key while it was held and renewed: %v", err)
	default:
	}
	if l.err() != nil {
		t.Fatalf("lock lost while renewed: %v", l.err())
	}
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		// Woken by the release notice, not by its fallback retry delay (set long below).
		if d := time.Since(released); d > opt.RetryDelayMin/2 {
			t.Errorf("waiter took %v after the release: notice not received?", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never got the key")
	}
	if _, err := b.Acquire(ctx, "forced", AcquireOptions{}); err != nil {
		t.Fatal(err)
	}
	// The acquire returned at a quorum; its last SET may still be on the way.
	if !eventually(3*time.Second, func() bool {
		st, err := a.Inspect(ctx, "forced")
		return err == nil && st.Present == len(urls)
	}) {
		t.Fatal("timed out waiting for: forced on every node")
	}
	if n, err := a.ForceRelease(ctx, "forced"); err != nil || n.Deleted != len(urls) {
		t.Fatalf("ForceRelease = %+v, %v", n, err)
	}
	exerciseShared(t, a, b)
	for _, s := range a.Status().Nodes {
		if !s.Up || s.RunID == "" {
			t.Errorf("node %s: %+v", s.Address, s)
		}
	}
}

// exerciseShared runs every script and command of shared locks: fenced readers renewed
// and inspected, a writer waiting (its mark) and woken by the last reader's notice, a
// reader refused, and a force release of a read-held key.
func exerciseShared(t *testing.T, a, b *Client) {
	t.Helper()
	ctx := context.Background()
	read := AcquireOptions{Shared: true, Fencing: true, TTL: 600 * time.Millisecond}
	r1, err := a.Acquire(ctx, "doc", read)
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	r2, err := b.Acquire(ctx, "doc", read)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := r1.extend(ctx); err != nil {
		t.Fatalf("reader Extend: %v", err)
	}
	// Any node of the quorum: Acquire returns at a quorum, a slow node's grant may lag.
	if st, err := a.Inspect(ctx, "doc"); err != nil || !st.QuorumHeld || !slices.ContainsFunc(st.Nodes, func(n KeyNode) bool { return n.Readers > 0 }) {
		t.Fatalf("Inspect of a read-held key = %+v, %v", st, err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := b.Acquire(ctx, "doc", AcquireOptions{Wait: 10 * time.Second, Fencing: true})
		if err == nil {
			if w.Token() <= r2.Token() {
				err = errors.New("writer's token is not above the readers'")
			}
			err = errors.Join(err, w.Release(ctx))
		}
		got <- err
	}()
	if !eventually(3*time.Second, func() bool {
		l, err := a.Acquire(ctx, "doc", AcquireOptions{Shared: true})
		if err == nil {
			_ = l.Release(ctx)
		}
		return isBusy(err)
	}) {
		t.Fatal("timed out waiting for: a new reader refused behind the waiting writer")
	}
	_ = r1.Release(ctx)
	released := time.Now()
	if err := r2.Release(ctx); err != nil {
		t.Fatalf("reader Release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("writer: %v", err)
		}
		if d := time.Since(released); d > 1500*time.Millisecond {
			t.Errorf("writer took %v after the last reader left: notice not received?", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writer never got the key")
	}
	if _, err := a.Acquire(ctx, "doc2", AcquireOptions{Shared: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ForceRelease(ctx, "doc2"); err != nil {
		t.Fatalf("ForceRelease of a read-held key: %v", err)
	}
}

// notifyOptions make the fallback retry slow, so a quick wake-up proves the notice.
func notifyOptions() Options {
	o := fastOptions()
	o.RetryDelayMin, o.RetryDelayMax = 3*time.Second, 3*time.Second
	return o
}

// waitUsable waits until every node answered a health check and passed the probe.
func waitUsable(t *testing.T, c *Client) {
	t.Helper()
	if !eventually(5*time.Second, func() bool {
		for _, n := range c.nodes {
			if !n.tr.Facts().Probed {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("nodes not usable: %+v", c.Status().Nodes)
	}
}

func TestTLSNodes(t *testing.T) {
	pki := redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	opt := notifyOptions()
	opt.TLSConfig = &tls.Config{RootCAs: pki.Pool}
	exerciseFeatures(t, redistest.URLs(servers), opt)
}

func TestMutualTLSNodes(t *testing.T) {
	pki := redistest.NewPKI(t)
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki, TLSAuthClients: true})
	cert, err := pki.ClientCertificate()
	if err != nil {
		t.Fatal(err)
	}
	opt := notifyOptions()
	opt.TLSConfig = &tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{cert}}
	exerciseFeatures(t, redistest.URLs(servers), opt)
}

// Nodes addressed by IP whose certificates carry only a DNS name: ServerName.
func TestTLSServerName(t *testing.T) {
	pki := redistest.NewPKI(t, "redis.internal.test")
	servers := redistest.StartN(t, 3, redistest.Options{TLS: pki})
	opt := notifyOptions()
	opt.TLSConfig = &tls.Config{RootCAs: pki.Pool, ServerName: "redis.internal.test"}
	exerciseFeatures(t, redistest.URLs(servers), opt)
}

func TestUnixSocketNodes(t *testing.T) {
	servers := redistest.StartN(t, 3)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.SocketURL()
	}
	exerciseFeatures(t, urls, notifyOptions())
	a, err := New(urls[:1], Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeForGood(a)
	if addr := a.Status().Nodes[0].Address; addr != urls[0] {
		t.Errorf("address = %q, want %q", addr, urls[0])
	}
}

// A ClientBuilder sees the options redlock prepared and builds the client.
func TestClientBuilder(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := notifyOptions()
	built := 0
	opt.ClientBuilder = func(o *redis.Options) (*redis.Client, error) {
		built++
		if o.OnConnect == nil || o.ReadTimeout != opt.NodeTimeout {
			t.Errorf("options not prepared: %+v", o)
		}
		return redis.NewClient(o), nil
	}
	exerciseFeatures(t, redistest.URLs(servers), opt)
	if built != 6 {
		t.Errorf("ClientBuilder called %d times, want 6 (3 nodes, 2 clients)", built)
	}
}

func aclServers(t *testing.T, n int, args []string) []*redistest.Server {
	t.Helper()
	servers := redistest.StartN(t, n)
	for _, s := range servers {
		if _, err := s.Command(args...); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
	}
	return servers
}

func userURLs(servers []*redistest.Server, user, password string) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + user + ":" + password + "@" + s.Addr()
	}
	return urls
}

// Every feature works under exactly the ACL line of docs/connecting.md, also after SCRIPT FLUSH (the
// NOSCRIPT fallback must not need SCRIPT LOAD, which the line does not grant).
//
// Node 1 may evict (a memory limit, volatile-ttl): the acquire scripts read its eviction
// count with INFO, which the line grants inside scripts too.
func TestDocsACLUser(t *testing.T) {
	servers := aclServers(t, 3, redistest.DocsACLSetUser(t, "locker", "s3cret"))
	for _, kv := range [][]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-ttl"}} {
		if _, err := servers[0].Command("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	urls := userURLs(servers, "locker", "s3cret")
	tn, err := transport.New(urls[0], transport.Config{NodeTimeout: 5 * time.Second, Scripts: scripts,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	for _, script := range []*transport.Script{acquireScript, readAcquireScript} {
		keys := []string{"redlock:acl", "redlock:acl\x00fence", "redlock:acl\x00writer", "redlock:\x00write_seq", "redlock:\x00data_marker", "redlock:\x00max_ttl"}
		if script == readAcquireScript {
			keys = []string{"redlock:acl", "redlock:acl\x00fence", "redlock:acl\x00writer", "redlock:acl\x00readers",
				"redlock:acl\x00readturn", "redlock:\x00write_seq", "redlock:\x00data_marker", "redlock:\x00max_ttl"}
		}
		rep := scriptReply(script.Run(context.Background(), tn, keys, "o:1", 5000, "o:", "0", 60000, 1, 0, "1"))
		if rep.err != nil || !rep.ok || rep.evicted < 0 {
			t.Fatalf("grant reading the eviction count under the ACL line: ok %v, evicted %d, %v", rep.ok, rep.evicted, rep.err)
		}
		if _, err := tn.Do(context.Background(), "del", "redlock:acl", "redlock:acl\x00readers").Int64(); err != nil {
			t.Fatal(err)
		}
	}
	exerciseFeatures(t, urls, notifyOptions())
	for _, s := range servers {
		if _, err := s.Command("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(urls, notifyOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer closeForGood(c)
	for i := range 3 {
		l, err := c.Acquire(context.Background(), "after-flush", AcquireOptions{Fencing: true})
		if err != nil {
			t.Fatalf("Acquire %d after SCRIPT FLUSH: %v", i, err)
		}
		if _, err := l.extend(context.Background()); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TLS settings with a node reached without TLS, or with verification off, are warned (a
// URL's skip_verify is refused: TestBadInput).
func TestTLSWarnings(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opt  Options
		want string
	}{
		{"redis://127.0.0.1:1", Options{TLSConfig: &tls.Config{}}, "reached without TLS"},
		{"rediss://127.0.0.1:1", Options{TLSConfig: &tls.Config{InsecureSkipVerify: true}}, "TLS certificate verification is off"},
	} {
		c, err := New([]string{tc.url}, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(c.Status().Warnings, "\n"); !strings.Contains(w, tc.want) {
			t.Errorf("%s: warnings %q, want %q", tc.url, w, tc.want)
		}
		_ = c.Close()
	}
}
