package transport

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/internal/testwait"
)

var errClosed = &closedError{}

type closedError struct{}

func (*closedError) Error() string { return "closed" }

// testConfig is a Config for tests: a loose timeout (the race detector on shared
// cores), no owner callbacks.
func testConfig(ss *Scripts) Config {
	return Config{NodeTimeout: 2 * time.Second, Pipelining: true, Scripts: ss, ProbeName: "test\x00probe",
		Closed: errClosed, Logger: slog.New(slog.DiscardHandler)}
}

// newTestNode makes a node on s and runs its batcher until the test ends.
func newTestNode(t testing.TB, s *redistest.Server, cfg Config) *Node {
	t.Helper()
	n, err := New(s.URL(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Flush(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = n.Close()
	})
	return n
}

// waitDigests waits until a node told every script's digest (a new connection asks).
func waitDigests(t testing.TB, n *Node, ss *Scripts) {
	t.Helper()
	if !testwait.Eventually(5*time.Second, func() bool {
		if err := n.Do(context.Background(), "ping").Err(); err != nil {
			t.Fatal(err)
		}
		for _, s := range ss.List() {
			if s.Digest() == "" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("digests never learned")
	}
}
