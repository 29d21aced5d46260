package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The chaos suite found two holders at once: round 20 of one Acquire was granted on a
// majority including node X; round 19's SET, sent earlier on another connection, reached
// X after it, took the key over (same owner) and round 19's cleanup release then deleted
// it, so another client got a majority including X. Replayed here on a real node: a late
// earlier attempt must neither take over nor delete a later attempt's key, while a later
// attempt still takes over an earlier one's leftover.
func TestLateEarlierAttemptCannotTakeOverLaterOne(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	tn := scriptNode(t, srv)
	ctx := context.Background()
	const owner = "OWNERPREFIX:"
	acquire := func(attempt int) []int64 {
		t.Helper()
		return runAcquireScript(t, tn, owner, attempt)
	}
	if r := acquire(20); r[0] != 1 { // round 20 granted here
		t.Fatalf("attempt 20 on a free key: %v", r)
	}
	if r := acquire(19); r[0] != 0 { // round 19's SET arrives late
		t.Fatalf("late attempt 19 took over attempt 20's key: %v", r)
	}
	// Round 19's cleanup: compare-and-delete with its own value.
	if n, err := releaseScript.Run(ctx, tn, []string{"k"}, owner+"19", "id").Int64(); err != nil || n != 0 {
		t.Fatalf("release of attempt 19: %d %v", n, err)
	}
	if v, _ := rc.Get(ctx, "k").Result(); v != owner+"20" {
		t.Fatalf("key holds %q, want attempt 20's value", v)
	}
	if r := acquire(20); r[0] != 0 { // the same attempt again (a duplicate) is not a new grant
		t.Fatalf("attempt 20 granted twice: %v", r)
	}
	if r := acquire(21); r[0] != 1 { // a later attempt takes over its own leftover
		t.Fatalf("attempt 21 blocked by attempt 20's leftover: %v", r)
	}
	if v, _ := rc.Get(ctx, "k").Result(); v != owner+"21" {
		t.Fatalf("key holds %q, want attempt 21's value", v)
	}
	if r := acquireOther(t, tn); r[0] != 0 { // another owner is always busy
		t.Fatalf("another owner took the key: %v", r)
	}
	if ttl, _ := rc.PTTL(ctx, "k").Result(); ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("PTTL %v", ttl)
	}
}

func acquireOther(t *testing.T, tn *transport.Node) []int64 {
	t.Helper()
	return runAcquireScript(t, tn, "OTHER:", 1)
}

// runAcquireScript runs the acquire script for owner's attempt on key k and returns
// {1, token} for a grant, {0, PTTL ms} when busy.
func runAcquireScript(t *testing.T, tn *transport.Node, owner string, attempt int) []int64 {
	t.Helper()
	rep := scriptReply(acquireScript.Run(context.Background(), tn, []string{"k", "k\x00fence", "k\x00writer", "\x00write_seq", "\x00data_marker", "\x00max_ttl"},
		owner+strconv.Itoa(attempt), 5000, owner, "0", 60000, attempt, 500))
	if rep.err != nil {
		t.Fatal(rep.err)
	}
	if rep.ok {
		return []int64{1, rep.token}
	}
	return []int64{0, rep.pttl.Milliseconds()}
}

// A failed round gives its grants back at once, not only after a slow node's reply: the
// grant on a fast node is gone while the paused node's call is still pending (node
// timeout 3s), so it does not keep the key busy for other contenders meanwhile.
func TestFailedRoundReleasesGrantsBeforeSlowNodes(t *testing.T) {
	servers := redistest.StartN(t, 5)
	opt := fastOptions()
	opt.NodeTimeout = 3 * time.Second
	opt.TTL = 10 * time.Second
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	for _, s := range servers[1:4] { // another client holds the key on a majority
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.Set(ctx, defaultPrefix+"early", "someone-else", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	if _, err := c.Acquire(ctx, "warm", AcquireOptions{}); err != nil { // connections up
		t.Fatal(err)
	}
	if err := servers[4].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[4].Resume()
	start := time.Now()
	if _, err := c.Acquire(ctx, "early", AcquireOptions{}); !isBusy(err) {
		t.Fatalf("got %v, want busy", err)
	}
	if !eventually(2*time.Second-time.Since(start), func() bool { _, ok := rawGet(t, servers[0], "early"); return !ok }) {
		t.Fatal("the failed round's grant on node 0 waits for the paused node") // its call still pending
	}
}
