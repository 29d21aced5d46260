package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// With release notices a waiter in another process gets the lock right after release:
// its fallback retry delay (10s) is longer than its whole wait (5s), so without the
// notice it could not acquire at all.
func TestHandoffByReleaseNotice(t *testing.T) {
	servers := redistest.StartN(t, 5)
	opt := fastOptions()
	a := newTestClient(t, servers, opt)
	slow := opt
	slow.RetryDelayMin, slow.RetryDelayMax = 10*time.Second, 10*time.Second
	b := newTestClient(t, servers, slow)
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		la, err := a.Acquire(ctx, "handoff", AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *Lock, 1)
		errc := make(chan error, 1)
		go func() {
			lb, err := b.Acquire(ctx, "handoff", AcquireOptions{Wait: 5 * time.Second})
			if err != nil {
				errc <- err
				return
			}
			got <- lb
		}()
		if !eventually(3*time.Second, func() bool { return watching(b, "handoff") }) {
			t.Fatal("timed out waiting for: b waits for a release notice")
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case lb := <-got:
			if lb.Info().Attempts > 4 {
				t.Fatalf("round %d: %d attempts, want a handful", round, lb.Info().Attempts)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case err := <-errc:
			t.Fatalf("round %d: waiter did not get the lock after release: %v", round, err)
		}
	}
}

// Waiters of one process queue locally: they are served in arrival order and only the
// head contends in Redis.
func TestLocalWaitersServedInOrder(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	ctx := context.Background()
	first, err := c.Acquire(ctx, "fifo", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, "fifo", AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = l.Release(ctx)
		}()
		// Arrival order: wait until this waiter is queued.
		if !eventually(3*time.Second, func() bool { return c.queues.waiting()["fifo"] == i+1 }) {
			t.Fatal("timed out waiting for: waiter queued")
		}
	}
	_ = first.Release(ctx)
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("served in order %v, want arrival order", order)
		}
	}
}

// Two clients with several workers each on one hot key: every hold is handed over well
// within a wait that is half the ttl. A round's cleanup that overtook its own SET (or a
// renewal's re-take overtaking the release) would leave a stray key for a whole ttl and
// make waiters run out of wait. Also checks neither client starves.
func TestHotKeyNoStrayKeys(t *testing.T) {
	servers := redistest.StartN(t, 5)
	opt := Options{TTL: 10 * time.Second, NodeTimeout: 300 * time.Millisecond}
	cs := []*Client{newTestClient(t, servers, opt), newTestClient(t, servers, opt)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		holds = map[int]int{}
	)
	for ci, c := range cs {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 40; i++ {
					l, err := c.Acquire(context.Background(), "hot", AcquireOptions{Wait: 5 * time.Second})
					if err != nil {
						t.Errorf("client %d: %v", ci, err)
						return
					}
					mu.Lock()
					holds[ci]++
					mu.Unlock()
					_ = l.Release(context.Background())
				}
			}()
		}
	}
	wg.Wait()
	if holds[0] != 160 || holds[1] != 160 {
		t.Fatalf("holds per client = %v, want 160 each", holds)
	}
	// The last release returns once a quorum deleted the key; its deletes to the other
	// nodes land within a node timeout. A stray key would stand for the whole ttl (10 s).
	if !eventually(3*time.Second, func() bool {
		for _, s := range servers {
			if _, present := rawGet(t, s, "hot"); present {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: no stray key on any node")
	}
}
