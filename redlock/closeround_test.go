package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Close while an Acquire round is in flight: Close finds no lock held and shuts down, but
// the round, which then fails (a busy node, a paused one), must still give back the
// grant it got before the connections close: nothing stays locked when Acquire fails.
// (Found by review: the give-back ran after the batchers closed and was dropped.)
func TestCloseDuringFailedRoundGivesBack(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 5 * time.Second
	c := newTestClient(t, servers, opt)
	waitRunIDs(t, c)
	ctx := context.Background()
	// Someone else holds the key on node 0 only.
	rc := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
	defer rc.Close()
	if err := rc.Set(ctx, defaultPrefix+"closing", "other", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[1].Resume()
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "closing", AcquireOptions{})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // node 2 granted; node 1 silent
	_ = c.Close()
	err := <-done
	t.Logf("Acquire: %v", err)
	time.Sleep(500 * time.Millisecond) // any cleanup has long landed
	if v, ok := rawGet(t, servers[2], "closing"); ok {
		r2 := redis.NewClient(&redis.Options{Addr: servers[2].Addr()})
		defer r2.Close()
		pttl, _ := r2.PTTL(ctx, defaultPrefix+"closing").Result()
		t.Fatalf("after a failed Acquire and Close, node 2 still holds the round's value (len %d) for %v more", len(v), pttl)
	}
}
