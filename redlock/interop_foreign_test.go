package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A key of another type under the lock's name (another client's lock: Redisson keeps a
// hash) means "held by someone else": busy, never a node failure (which could turn
// into "unavailable", and so into serving unlocked with on_unavailable bypass). Every
// path that reads the key is covered: a plain first SET, the acquire script (retries,
// wait 0, fencing), the inspect view.
func TestForeignTypeIsBusy(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.HSet(ctx, defaultPrefix+"hash", "holder", 1).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	c := newTestClient(t, servers, fastOptions())
	for _, o := range []AcquireOptions{{}, {Wait: 200 * time.Millisecond}, {Fencing: true}, {Wait: 200 * time.Millisecond, Fencing: true}} {
		_, err := c.Acquire(ctx, "hash", o)
		if !isBusy(err) {
			t.Fatalf("%+v: got %v, want busy", o, err)
		}
	}
	for i, st := range c.Status().Nodes {
		if st.Errors != 0 {
			t.Errorf("node %d counted %d errors (%s) for a foreign value", i, st.Errors, st.LastError)
		}
	}
	ks, err := c.Inspect(ctx, "hash")
	if err != nil {
		t.Fatal(err)
	}
	if !ks.QuorumHeld || ks.HeldHere || ks.Present != 3 {
		t.Fatalf("inspect: %+v, want held by another client on all 3 nodes", ks)
	}
	for _, kn := range ks.Nodes {
		if kn.Error != "" || kn.Type != "not a string" || kn.Ours {
			t.Fatalf("inspect node: %+v, want a foreign hash, no error", kn)
		}
	}
}

// A lock whose key another client replaced by another type on a majority is lost
// ("taken"), and a batched renewal of other locks on the same nodes is not disturbed.
func TestForeignTypeTakesOverDuringRenewal(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	c := newTestClient(t, servers, fastOptions())
	victim, err := c.Acquire(ctx, "victim", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Acquire(ctx, "other", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	// The round returned at a quorum; let its last SET land before replacing the key.
	if !eventually(3*time.Second, func() bool {
		for _, s := range servers {
			if _, ok := rawGet(t, s, "victim"); !ok {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: victim on every node")
	}
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		rc.Del(ctx, defaultPrefix+"victim")
		if err := rc.HSet(ctx, defaultPrefix+"victim", "holder", 1).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	errs := c.extendBatch(ctx, []*Lock{victim, other})
	var le *LostError
	if !errors.As(errs[0], &le) || le.Reason != LostTaken {
		t.Fatalf("victim: %v, want lost (taken)", errs[0])
	}
	if errs[1] != nil {
		t.Fatalf("other lock in the same batch: %v", errs[1])
	}
	if err := victim.Release(ctx); err != nil && !errors.Is(err, ErrReleased) {
		t.Fatalf("release of the lost lock: %v", err)
	}
}
