package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Concurrent acquires and releases on unique keys share pipelines: fewer batches go to a
// node than calls. Were every call sent on its own, batches would equal calls.
func TestBatcherCoalescesConcurrentCalls(t *testing.T) {
	servers := redistest.StartN(t, 3)
	// A loose node timeout: a release that times out on one node still succeeds (a
	// quorum deleted) and leaves the key there for its ttl, which the check below would
	// read as a call the batcher lost. CI's loaded cores did that once at 300 ms.
	opt := fastOptions()
	opt.TTL, opt.NodeTimeout = 20*time.Second, 3*time.Second
	c := newTestClient(t, servers, opt)
	const callers = 64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := fmt.Sprintf("batch-%d", i)
			l, err := c.Acquire(context.Background(), key, AcquireOptions{})
			if err != nil {
				t.Errorf("acquire %s: %v", key, err)
				return
			}
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("release %s: %v", key, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	var batches, sent int64
	for _, n := range c.nodes {
		b, s := n.tr.Batches()
		batches += b
		sent += s
	}
	if sent < int64(callers*len(servers)) { // at least every acquire reached every node
		t.Fatalf("%d calls sent, want at least %d", sent, callers*len(servers))
	}
	if batches >= sent {
		t.Fatalf("%d batches for %d calls: nothing was pipelined", batches, sent)
	}
	t.Logf("%d calls in %d pipelines", sent, batches)
	// A release returns at a quorum; its call to the last node may still be on the way.
	left := ""
	if !eventually(3*time.Second, func() bool {
		for i := 0; i < callers; i++ {
			for _, s := range servers {
				if _, ok := rawGet(t, s, fmt.Sprintf("batch-%d", i)); ok {
					left = fmt.Sprintf("batch-%d on %s", i, s.Addr())
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("key %s left after every release returned", left)
	}
}

// After SCRIPT FLUSH (as after a restart) the pipelined scripts are loaded again and the
// calls go through: NOSCRIPT never reaches the caller.
func TestBatcherRecoversFromScriptFlush(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		for _, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
			if err := rc.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			rc.Close()
		}
		l, err := c.Acquire(ctx, "flushed", AcquireOptions{Wait: time.Second})
		if err != nil {
			t.Fatalf("round %d: acquire after SCRIPT FLUSH: %v", round, err)
		}
		if l.Info().Attempts != 1 {
			t.Fatalf("round %d: %d attempts, want 1 (NOSCRIPT must be handled inside the round)", round, l.Info().Attempts)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}
	}
}

// The order of a retried SET and its release after NOSCRIPT is the transport's
// (TestBatcherNoScriptRetryKeepsOrder there); here, that the releases are the scripts it
// reorders.
func TestReleasesAreCleanups(t *testing.T) {
	for _, s := range scripts.List() {
		want := s == releaseScript || s == readReleaseScript
		if got := s.IsCleanup(); got != want {
			t.Errorf("%s script: cleanup %v, want %v", s.Name(), got, want)
		}
	}
}
