package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A key of another type at the fencing counter's name (ours: nobody else writes under
// the NUL-suffixed names) counts as a missing counter: the acquire succeeds with a token
// from the clock. It must never make answering nodes look down (an UnavailableError, which
// Caddy's on_unavailable bypass would serve unlocked). (Found by review.)
func TestForeignCounterTypeIsOverwritten(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.HSet(ctx, defaultPrefix+"ctr"+counterSuffix, "x", 1).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(ctx, "ctr", AcquireOptions{Fencing: true})
	if isUnavailable(err) {
		t.Fatalf("a foreign type at the fencing counter makes answering nodes look down: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() < time.Now().Add(-time.Minute).UnixMicro() {
		t.Fatalf("token %d does not start from the clock", l.Token())
	}
}
