package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	read  = AcquireOptions{Shared: true}
	write = AcquireOptions{}
)

func mustAcquire(t *testing.T, c *Client, key string, o AcquireOptions) *Lock {
	t.Helper()
	l, err := c.Acquire(context.Background(), key, o)
	if err != nil {
		t.Fatalf("acquire %q (shared %v): %v", key, o.Shared, err)
	}
	return l
}

func wantBusy(t *testing.T, c *Client, key string, o AcquireOptions, why string) {
	t.Helper()
	l, err := c.Acquire(context.Background(), key, o)
	if err == nil {
		_ = l.Release(context.Background())
		t.Fatalf("%s: acquired, want busy", why)
	}
	if !isBusy(err) {
		t.Fatalf("%s: %v, want busy", why, err)
	}
}

// Readers of two clients hold a key together; a writer (an exclusive lock, of any client)
// is refused while they do, and gets the key once the last one left; a reader is refused
// while the writer holds it.
func TestSharedReadersExcludeWriters(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	r1 := mustAcquire(t, a, "doc", read)
	r2 := mustAcquire(t, b, "doc", read)
	r3 := mustAcquire(t, a, "doc", read) // same client: readers have no local line
	wantBusy(t, b, "doc", write, "writer while 3 readers hold")
	wantBusy(t, a, "doc", write, "writer of a reading client")
	for _, l := range []*Lock{r1, r3} {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	wantBusy(t, b, "doc", write, "writer while 1 reader holds")
	if err := r2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := mustAcquire(t, b, "doc", AcquireOptions{Wait: time.Second}) // the last reader's deletes may still be on the way
	wantBusy(t, a, "doc", read, "reader while a writer holds")
	if err := w.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = mustAcquire(t, a, "doc", AcquireOptions{Shared: true, Wait: time.Second})
}

// Other Redlock clients (redsync and the like: SET NX PX on the plain key) find a
// read-held key busy, and a key they hold keeps readers out.
func TestSharedInteropWithPlainSetNX(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	r := mustAcquire(t, c, "doc", read)
	// Acquire returns at a quorum: the last node's grant may still be on its way.
	<-r.settled
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		ok, err := rc.SetNX(context.Background(), defaultPrefix+"doc", "redsync-value", time.Second).Result()
		rc.Close()
		if err != nil || ok {
			t.Fatalf("plain SET NX on %s while readers hold: ok=%v err=%v", s.Addr(), ok, err)
		}
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, servers, "doc")
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.Set(context.Background(), defaultPrefix+"doc", "redsync-value", 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	wantBusy(t, c, "doc", read, "reader while another client's plain lock holds")
}

// A writer waiting for readers keeps new readers out (no writer starvation): it gets the
// key as soon as the readers present when it came are gone, before readers that came
// after it.
func TestSharedWaitingWriterKeepsNewReadersOut(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	r1 := mustAcquire(t, a, "doc", read)
	if err := r1.KeepAlive(fastOptions().TTL/4, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := b.Acquire(context.Background(), "doc", AcquireOptions{Wait: 10 * time.Second})
		if err != nil {
			t.Errorf("writer: %v", err)
		}
		got <- l
	}()
	// Once the writer has tried with the script (its second try, after subscribing), it
	// is marked as waiting on a majority (the others may have granted it): a new reader
	// is refused.
	if !eventually(3*time.Second, func() bool {
		marked := 0
		for _, s := range servers {
			if _, ok := rawGet(t, s, "doc"+writerSuffix); ok {
				marked++
			}
		}
		return marked >= 2
	}) {
		t.Fatal("timed out waiting for: writer marked as waiting")
	}
	// A reader of a's own (r1's group) could join r1's entry for a moment (readgroup.go):
	// the new readers come from a client of their own.
	late := newTestClient(t, servers, fastOptions())
	wantBusy(t, late, "doc", read, "new reader while a writer waits")
	readerDone := make(chan error, 1)
	var order atomic.Int32
	var readerAt, writerAt int32
	go func() {
		l, err := late.Acquire(context.Background(), "doc", AcquireOptions{Shared: true, Wait: 10 * time.Second})
		if err == nil {
			readerAt = order.Add(1)
			err = l.Release(context.Background())
		}
		readerDone <- err
	}()
	// The late reader refused (by the writer's mark) and waiting for a release notice.
	if !eventually(3*time.Second, func() bool { return watching(late, "doc") }) {
		t.Fatal("timed out waiting for: the late reader waits for a release notice")
	}
	if err := r1.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	writerAt = order.Add(1)
	time.Sleep(20 * time.Millisecond) // the writer's hold: the late reader may not come in meanwhile
	if err := w.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-readerDone; err != nil {
		t.Fatalf("late reader: %v", err)
	}
	if writerAt != 1 || readerAt != 2 {
		t.Fatalf("order: writer %d, late reader %d; want the waiting writer first", writerAt, readerAt)
	}
}

// A reader that never releases (a crashed process) holds the key only for its ttl; a
// reader kept alive holds it for as long as it renews, and the key's expiry follows the
// longest-lived reader, not the last one to come.
func TestSharedReaderEntriesExpireOnTheirOwn(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 600 * time.Millisecond
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	kept := mustAcquire(t, a, "doc", read)
	if err := kept.KeepAlive(150*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	_ = mustAcquire(t, b, "doc", read) // crashed: never renewed nor released
	// Past the crashed reader's ttl (600ms): a lapse under test.
	time.Sleep(1500 * time.Millisecond)
	if kept.err() != nil {
		t.Fatalf("kept-alive reader lost: %v", kept.err())
	}
	wantBusy(t, b, "doc", write, "writer while a renewed reader holds")
	if err := kept.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The crashed reader's entry expired long ago: the key is free at once.
	w := mustAcquire(t, b, "doc", AcquireOptions{Wait: time.Second})
	_ = w.Release(context.Background())

	// The crashed reader alone: the writer waits for its ttl, no longer.
	_ = mustAcquire(t, b, "doc2", read)
	start := time.Now()
	w2 := mustAcquire(t, a, "doc2", AcquireOptions{Wait: 5 * time.Second})
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("writer waited %v for a reader with a 600ms ttl", waited)
	}
	_ = w2.Release(context.Background())
}

// Fencing tokens of one key increase across all holders in the order they acquired,
// readers and writers alike.
func TestSharedFencingTokensIncrease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	var last int64
	for i := 0; i < 60; i++ {
		c := a
		if i%3 == 1 {
			c = b
		}
		o := AcquireOptions{Fencing: true, Shared: i%4 != 0, Wait: 2 * time.Second}
		l := mustAcquire(t, c, "fenced", o)
		if l.Token() <= last {
			t.Fatalf("acquire %d (shared %v): token %d after %d", i, o.Shared, l.Token(), last)
		}
		last = l.Token()
		if i%2 == 0 {
			// Overlapping readers: a second reader before the first leaves.
			if o.Shared {
				other := b // another client: readers of one client share their entry and token
				if c == b {
					other = a
				}
				l2 := mustAcquire(t, other, "fenced", o)
				if l2.Token() <= last {
					t.Fatalf("second reader token %d after %d", l2.Token(), last)
				}
				last = l2.Token()
				_ = l2.Release(context.Background())
			}
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// An operator's force release removes the readers too and marks every local reader lost.
func TestSharedForceRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	other := newTestClient(t, servers, fastOptions())
	r1 := mustAcquire(t, c, "doc", read)
	r2 := mustAcquire(t, c, "doc", read) // joins r1's entry
	r3 := mustAcquire(t, other, "doc", read)
	if !eventually(3*time.Second, func() bool {
		st, err := c.Inspect(context.Background(), "doc")
		if err != nil || !st.QuorumHeld || !st.HeldHere {
			return false
		}
		for _, n := range st.Nodes {
			if n.Readers != 2 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: 2 reader entries on every node")
	}
	res, err := c.ForceRelease(context.Background(), "doc")
	if err != nil || res.Deleted != 3 {
		t.Fatalf("force release: %+v, %v", res, err)
	}
	_ = r3 // another client's reader: it learns of the loss at its next renewal
	for _, l := range []*Lock{r1, r2} {
		if !isLost(l.err()) {
			t.Fatalf("reader after force release: %v", l.err())
		}
	}
	w := mustAcquire(t, c, "doc", write)
	_ = w.Release(context.Background())
}

// Many readers and writers of several clients on one key: a writer never overlaps anyone,
// and readers do overlap (the lock is not stricter than it must be).
func TestSharedMutualExclusion(t *testing.T) {
	servers := redistest.StartN(t, 5)
	const clients, workers, iterations = 3, 4, 15
	var readers, writers, maxReaders atomic.Int32
	var wg sync.WaitGroup
	for ci := 0; ci < clients; ci++ {
		c := newTestClient(t, servers, fastOptions())
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iterations; i++ {
					shared := (ci+w+i)%4 != 0
					l, err := c.Acquire(context.Background(), "hot", AcquireOptions{Shared: shared, Wait: 20 * time.Second})
					if err != nil {
						t.Errorf("acquire (shared %v): %v", shared, err)
						return
					}
					if shared {
						n := readers.Add(1)
						for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
						}
						if writers.Load() != 0 {
							t.Errorf("a reader entered while a writer holds the key")
						}
						time.Sleep(3 * time.Millisecond) // the read: a workload's duration
						readers.Add(-1)
					} else {
						if n := writers.Add(1); n != 1 || readers.Load() != 0 {
							t.Errorf("a writer entered with %d writers and %d readers inside", n, readers.Load())
						}
						time.Sleep(time.Millisecond) // the write: a workload's duration
						writers.Add(-1)
					}
					if err := l.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if maxReaders.Load() < 2 {
		t.Fatalf("readers never overlapped (max %d at once)", maxReaders.Load())
	}
	fmt.Println("max readers at once:", maxReaders.Load())
}

// Readers of one client share one entry: a second reader costs no round trip and holds
// the key as long as it needs, after the first left; the entry goes with the last reader.
// After the join window, readers take entries of their own again (so that a waiting
// writer's mark, which only Redis knows, can stop them).
func TestSharedReadersOfOneClientShareTheEntry(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	r1 := mustAcquire(t, c, "doc", read)
	r2 := mustAcquire(t, c, "doc", read)
	if r2.Info().Attempts != 0 || r2.value != r1.value {
		t.Fatalf("second reader: %d attempts, shares the entry %v; want 0 and true", r2.Info().Attempts, r2.value == r1.value)
	}
	if err := r2.KeepAlive(fastOptions().TTL/4, 0); err != nil {
		t.Fatal(err)
	}
	if err := r1.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(fastOptions().TTL + 200*time.Millisecond) // past r1's validity (a lapse under test): r2 renews the entry
	if r2.err() != nil {
		t.Fatalf("the joiner lost the key after the first reader left: %v", r2.err())
	}
	wantBusy(t, newTestClient(t, servers, fastOptions()), "doc", write, "writer while the joiner reads")
	// The group is long past its join window: a new reader takes an entry of its own.
	r3 := mustAcquire(t, c, "doc", read)
	if r3.Info().Attempts == 0 || r3.value == r2.value {
		t.Fatal("a reader joined a group past its join window")
	}
	_ = r3.Release(context.Background())
	if err := r2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := mustAcquire(t, c, "doc", AcquireOptions{Wait: time.Second})
	_ = w.Release(context.Background())
}

// A reader that learned its entry is gone (another client force-released the key) stops
// its group taking joiners: a joiner would believe in an entry no longer there.
func TestSharedLostReaderStopsJoins(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	r1 := mustAcquire(t, c, "doc", read)
	if _, err := newTestClient(t, servers, fastOptions()).ForceRelease(context.Background(), "doc"); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.extend(context.Background()); !isLost(err) {
		t.Fatalf("extend after a force release elsewhere: %v, want lost", err)
	}
	r2 := mustAcquire(t, c, "doc", read)
	if r2.Info().Attempts == 0 || r2.value == r1.value {
		t.Fatal("a reader joined the entry of a lost reader")
	}
	_ = r2.Release(context.Background())
	_ = r1.Release(context.Background())
}
