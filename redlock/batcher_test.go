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
	c := newTestClient(t, servers, fastOptions())
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
		batches += n.batch.batches.Load()
		sent += n.batch.sent.Load()
	}
	if sent < int64(callers*len(servers)) { // at least every acquire reached every node
		t.Fatalf("%d calls sent, want at least %d", sent, callers*len(servers))
	}
	if batches >= sent {
		t.Fatalf("%d batches for %d calls: nothing was pipelined", batches, sent)
	}
	t.Logf("%d calls in %d pipelines", sent, batches)
	for i := 0; i < callers; i++ {
		for _, s := range servers {
			if _, ok := rawGet(t, s, fmt.Sprintf("batch-%d", i)); ok {
				t.Fatalf("key batch-%d left on %s", i, s.Addr())
			}
		}
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

// A node that lost its scripts (restart, SCRIPT FLUSH) may refuse a round's SET with
// NOSCRIPT while the same pipeline's later release of that value runs (its script was
// loaded): the release then ran first, for nothing. After loading, it must run again
// behind the retried SET, or our value would stand on the node for a ttl.
func TestBatcherNoScriptRetryKeepsOrder(t *testing.T) {
	servers := redistest.StartN(t, 1)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
	defer rc.Close()
	if err := rc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitDigests(t) // so the acquire goes as EVALSHA, and meets NOSCRIPT
	// Only the release is known.
	if err := rc.ScriptLoad(ctx, releaseScript.src).Err(); err != nil {
		t.Fatal(err)
	}
	nm := c.names("noscript")
	const owner, value = "OWNER:", "OWNER:1"
	deadline := time.Now().Add(time.Second)
	mk := func(script *script, keys []string, args ...any) *call {
		return &call{cmd: newCommand(script, keys, args...), deadline: deadline, deliver: func(*redis.Cmd) {}}
	}
	acq := mk(acquireScript, []string{nm.lock, nm.counter, nm.writer}, value, 5000, owner, "0", 60000, 1, 500)
	rel := mk(releaseScript, []string{nm.lock}, value, nm.channel, "id")
	c.nodes[0].batch.send(ctx, []*call{acq, rel})
	if err := acq.reply.Err(); err != nil {
		t.Fatalf("acquire after the script was loaded: %v", err)
	}
	if _, ok := rawGet(t, servers[0], "noscript"); ok {
		t.Fatal("the retried SET stands: its release ran before it and was not sent again")
	}
}
