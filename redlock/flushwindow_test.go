package redlock

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The gap dataloss.go documents ("a loss between two health checks is seen at the next
// one"), reduced from what TestStressMixedModes finds in about one run in four: A holds a
// key on a bare majority (nodes 1 and 2; a stray value held node 3 when it asked), node 1
// is flushed, and B acquires before its next health check reads node 1's marker. Node 1
// grants the key again and its vote counts: B holds the key on nodes 1 and 3 while A
// still trusts its lock. TestFlushedNodeDoesNotVote covers the same scenario after the
// health check. Skipped unless REDLOCK_REPRO_FLUSH_WINDOW=1, until the gap is closed
// (e.g. by the acquire script refusing, or reporting, a node without its data marker).
func TestFlushWindowTwoHolders(t *testing.T) {
	if os.Getenv("REDLOCK_REPRO_FLUSH_WINDOW") == "" {
		t.Skip("known gap (dataloss.go): a flushed node votes until the next health check; REDLOCK_REPRO_FLUSH_WINDOW=1 runs it")
	}
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	raw := func(s *redistest.Server) *redis.Client {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	if err := raw(servers[2]).Set(ctx, defaultPrefix+"k", "stray", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	opt := fastOptions()
	opt.HealthInterval = time.Second // the default: the window is one interval
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	waitMarkers(t, a)
	waitMarkers(t, b)
	held, err := a.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if err := raw(servers[0]).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw(servers[2]).Del(ctx, defaultPrefix+"k").Err(); err != nil { // the stray value lapses
		t.Fatal(err)
	}
	l, err := b.Acquire(ctx, "k", AcquireOptions{})
	if err != nil {
		return // the gap is closed
	}
	defer l.Release(ctx)
	if held.Info().Validity > 0 {
		t.Fatalf("TWO HOLDERS: B took the key on the flushed node 1 and node 3 (validity %v) while A still trusts it (validity %v); B's client saw the loss: %q",
			l.Info().Validity, held.Info().Validity, b.Status().Nodes[0].QuarantineCause)
	}
}
