package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A force release racing an acquire of the same key on the same client: whichever way
// the race goes, a lock Acquire returns is either held on a quorum or already marked
// lost (the force found it registered), never valid with its keys deleted under it (it
// would run unlocked until its next renewal).
func TestForceReleaseRacingAcquire(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	for i := range 60 {
		var (
			wg sync.WaitGroup
			l  *Lock
		)
		wg.Go(func() { l, _ = c.Acquire(ctx, "forced", AcquireOptions{}) })
		wg.Go(func() {
			time.Sleep(time.Duration(i%6) * 50 * time.Microsecond) // a moment of the race: 0 to 250µs in turn
			_, _ = c.ForceRelease(ctx, "forced")
		})
		wg.Wait()
		if l == nil {
			continue
		}
		if l.err() == nil {
			st, err := c.Inspect(ctx, "forced")
			if err != nil {
				t.Fatal(err)
			}
			if !st.HeldHere && l.err() == nil {
				t.Fatalf("round %d: Acquire returned a valid lock whose keys a force release deleted (present on %d nodes)", i, st.Present)
			}
		}
		_ = l.Release(ctx)
	}
}

// A manual Extend racing Release: the Extend's re-take of a node missing the key must not
// land after the release's delete (a stray key would block the key for a ttl).
func TestExtendRacingRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: servers[2].Addr()})
	defer rc.Close()
	for i := range 60 {
		l, err := c.Acquire(ctx, "extend", AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Del(ctx, defaultPrefix+"extend").Err(); err != nil { // node 2 lost it: Extend re-takes it
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = l.extend(ctx) })
		wg.Go(func() {
			time.Sleep(time.Duration(i%6) * 50 * time.Microsecond) // a moment of the race: 0 to 250µs in turn
			_ = l.Release(ctx)
		})
		wg.Wait()
		// The release returns at a quorum of deletes; node 2's may still be on its way,
		// but a re-take that landed after it would stand for a whole ttl (2s).
		var n int64
		if !eventually(time.Second, func() bool {
			n, err = rc.Exists(ctx, defaultPrefix+"extend").Result()
			return err == nil && n == 0
		}) {
			t.Fatalf("round %d: node 2 still holds the key 1s after Extend and Release returned (exists=%d, %v)", i, n, err)
		}
	}
}

// A reader joining its client's group while that client force-releases the key: the
// force release begins and lists the holders it marks lost after the joiner checked for
// force releases but before it was registered (joinHook holds the joiner there until the
// group's reader is marked lost, which follows the listing). The joiner must then either
// be refused (and take an entry of its own in Redis, after the force) or be marked lost:
// never trust the group's entry the force deletes, while another client's writer takes
// the key (about 1 join in 250 under a force release, before the join checked after
// registering).
func TestJoiningReaderCannotEscapeAForceRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	r1 := mustAcquire(t, c, "doc", read)
	// The join window is about a round trip: widened so that the join does not depend
	// on how fast this machine is.
	c.readers.mu.Lock()
	c.readers.m["doc"].window = time.Hour
	c.readers.mu.Unlock()
	lost, stop := r1.Context(ctx)
	defer stop()
	forced := make(chan error, 1)
	joinHook = func() {
		joinHook = nil // once
		go func() {
			_, err := c.ForceRelease(ctx, "doc")
			forced <- err
		}()
		select {
		case <-lost.Done(): // the force release has listed its holders
		case <-time.After(5 * time.Second):
			t.Error("the force release did not mark the group's reader lost")
		}
	}
	t.Cleanup(func() { joinHook = nil })
	r2, err := c.Acquire(ctx, "doc", AcquireOptions{Shared: true, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release(ctx)
	if err := <-forced; err != nil {
		t.Fatal(err)
	}
	if r2.err() != nil {
		return // marked lost with the group: its holder stops
	}
	w := newTestClient(t, servers, fastOptions())
	if l, err := w.Acquire(ctx, "doc", write); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("TWO HOLDERS: another client's writer took the key while the reader trusts it (shares the forced entry: %v)",
			r2.value == r1.value)
	}
}
