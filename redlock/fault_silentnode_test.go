package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A paused minority node must not hold up a release, and so the next holder: the
// release returns once a quorum deleted the key, not after the paused node's timeout.
// (Bounds here are far from the timeout; speed itself is measured by make bench.) With
// DisablePipelining a release still waits for its own round's late replies: without a
// batcher ordering the calls per node, that is what keeps it from overtaking its SET.
func TestReleaseDoesNotWaitForSilentNode(t *testing.T) {
	servers := redistest.StartN(t, 5)
	for _, pipelined := range []bool{true} {
		opt := fastOptions()
		opt.NodeTimeout = 1500 * time.Millisecond
		opt.TTL = 5 * time.Second
		opt.DisablePipelining = !pipelined
		c := newTestClient(t, servers, opt)
		other := newTestClient(t, servers, opt)
		ctx := context.Background()
		// Warm the connections, so that no dial is left to wait for.
		for _, cl := range []*Client{c, other} {
			l, err := cl.Acquire(ctx, "warm", AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
		}
		if err := servers[4].Pause(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			l, err := c.Acquire(ctx, "silent", AcquireOptions{Wait: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > opt.NodeTimeout/2 {
				t.Fatalf("pipelined=%v, round %d: release took %v with one of 5 nodes paused: it waited for the silent node (timeout %v)",
					pipelined, i, took, opt.NodeTimeout)
			}
			lo, err := other.Acquire(ctx, "silent", AcquireOptions{})
			if err != nil {
				t.Fatalf("another client right after the release: %v", err)
			}
			_ = lo.Release(ctx)
		}
		if err := servers[4].Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

// A round that a silent node cannot decide either way (2 grants and 2 refusals of 5,
// as when two instances contend for a hot key) is decided without waiting for the silent
// node: it fails at once and is retried, instead of costing a node timeout.
func TestSplitRoundDoesNotWaitForSilentNode(t *testing.T) {
	servers := redistest.StartN(t, 5)
	opt := fastOptions()
	opt.NodeTimeout = 1500 * time.Millisecond
	opt.TTL = 5 * time.Second
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "warm", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := servers[4].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[4].Resume()
	// A health check finds it silent after a node timeout (1.5 s here): wait longer than
	// eventually's 3 s, for a busy machine.
	if !eventually(10*time.Second, c.nodes[4].silent) {
		t.Fatal("node 4 not known silent 10 s after its pause")
	}
	rawSet(t, servers[0], "split", "other", 5*time.Second)
	rawSet(t, servers[1], "split", "other", 5*time.Second)
	start := time.Now()
	_, err = c.Acquire(ctx, "split", AcquireOptions{})
	if !isBusy(err) {
		t.Fatalf("split round: %v, want busy", err)
	}
	if took := time.Since(start); took > opt.NodeTimeout/2 {
		t.Fatalf("a split round took %v: it waited for the silent node (timeout %v)", took, opt.NodeTimeout)
	}
}
