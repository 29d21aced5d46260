package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// A waiting writer waits for the readers inside when it came, not for a join window:
// readers of the readers' own client that come once the writer is marked as waiting do
// not join the group inside (they go to Redis, where the mark refuses them), so the
// writer holds the key before any of them. Both a writer of another client and one of
// the readers' own client (which no join may overtake either).
func TestSharedWriterWaitsOnlyForReadersInside(t *testing.T) {
	for _, local := range []bool{false, true} {
		name := "writer of another client"
		if local {
			name = "writer of the readers' client"
		}
		t.Run(name, func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			// The writer's mark lives 2 × (retry delay + node timeout): with fastOptions'
			// 300 ms a writer starved that long on CI's loaded cores let the late readers
			// in past a lapsed mark (it came 6th once). The order is the test, not speed.
			loose := func() Options { o := fastOptions(); o.TTL, o.NodeTimeout = 10*time.Second, 2*time.Second; return o }
			opt := loose()
			tries := countTries(&opt)
			c := newTestClient(t, servers, opt)
			wc := c
			if !local {
				wc = newTestClient(t, servers, loose())
			}
			r1 := mustAcquire(t, c, "doc", read)
			var order atomic.Int32
			writerAt := make(chan int32, 1)
			go func() {
				w, err := wc.Acquire(context.Background(), "doc", AcquireOptions{Wait: 10 * time.Second})
				if err != nil {
					t.Errorf("writer: %v", err)
					writerAt <- 0
					return
				}
				writerAt <- order.Add(1)
				time.Sleep(10 * time.Millisecond) // its hold: the late readers may not come in meanwhile
				_ = w.Release(context.Background())
			}()
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
			// The first reader's group takes joiners for a round trip at most (joinWindow):
			// a window that must lapse, so a sleep.
			time.Sleep(joinWindow)
			// Late readers of the group's own client, while the first reader still reads,
			// and all of them in Redis (refused there) before it leaves. Were they to join
			// its group instead, they would never be counted: the order below says so.
			reads0, _ := tries.tries(len(servers))
			var wg sync.WaitGroup
			var readersAt readerLog
			for range 5 {
				startReader(t, &wg, c, "doc", &order, 20*time.Millisecond, &readersAt)
				time.Sleep(2 * time.Millisecond) // arrivals spread out: a workload's shape, not a barrier
			}
			if !eventually(3*time.Second, func() bool {
				reads, _ := tries.tries(len(servers))
				return waitingReaders(c, "doc") == 5 && reads >= reads0+5
			}) {
				t.Log("the late readers are not all waiting in Redis")
			}
			if err := r1.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if w := <-writerAt; w != 1 {
				t.Fatalf("writer came %d-th, late readers %v: readers that came after the writer went first", w, &readersAt)
			}
		})
	}
}

// Readers waiting for a writer all go in on its release notice (one notice wakes every
// waiter of the process), not one per notice and the rest after a retry delay.
func TestSharedWaitingReadersAllWakeOnRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	wopt := fastOptions()
	wopt.TTL = 10 * time.Second // nor the writer's expiry
	wc := newTestClient(t, servers, wopt)
	opt := fastOptions()
	opt.RetryDelayMin, opt.RetryDelayMax = 5*time.Second, 5*time.Second // only a notice wakes them in time
	tries := countTries(&opt)
	rc := newTestClient(t, servers, opt)
	w := mustAcquire(t, wc, "doc", write)
	const readers = 5
	var wg sync.WaitGroup
	var in atomic.Int32
	all := make(chan struct{})
	for range readers {
		wg.Go(func() {
			l, err := rc.Acquire(context.Background(), "doc", AcquireOptions{Shared: true, Wait: 10 * time.Second})
			if err != nil {
				t.Errorf("reader: %v", err)
				return
			}
			in.Add(1)
			<-all // held: a reader's own release would wake the next one
			_ = l.Release(context.Background())
		})
	}
	if !eventually(3*time.Second, func() bool {
		n := waitingReaders(rc, "doc")
		rc.notices.mu.Lock()
		nw := rc.notices.m[rc.names("doc").channel]
		rc.notices.mu.Unlock()
		if nw == nil || n != readers {
			return false
		}
		select {
		case <-nw.ready:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("timed out waiting for: readers waiting on a subscription")
	}
	if !eventually(3*time.Second, func() bool { reads, _ := tries.tries(len(servers)); return reads >= 2*readers }) {
		t.Fatal("timed out waiting for: every reader past its second try, asleep")
	}
	_ = w.Release(context.Background())
	// Loose: well under the retry delay, far above a round trip.
	if !eventually(3*time.Second, func() bool { return in.Load() == readers }) {
		t.Fatal("timed out waiting for: every waiting reader in after the writer's release")
	}
	close(all)
	wg.Wait()
}

// A writer's release goes to Redis, not to the next writer of its client, while readers
// of that client wait for the key, and those readers go in before that writer.
func TestSharedWriterReleaseLetsWaitingReadersFirst(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	tries := countTries(&opt)
	c := newTestClient(t, servers, opt)
	w1 := mustAcquire(t, c, "doc", AcquireOptions{Wait: time.Second})
	var order atomic.Int32
	w2At := make(chan int32, 1)
	go func() {
		w2, err := c.Acquire(context.Background(), "doc", AcquireOptions{Wait: 10 * time.Second})
		if err != nil {
			t.Errorf("second writer: %v", err)
			w2At <- 0
			return
		}
		w2At <- order.Add(1)
		_ = w2.Release(context.Background())
	}()
	if !eventually(3*time.Second, func() bool {
		c.queues.mu.Lock()
		defer c.queues.mu.Unlock()
		q := c.queues.m["doc"]
		return q != nil && len(q.waiters) == 1
	}) {
		t.Fatal("timed out waiting for: second writer queued")
	}
	const readers = 3
	var wg sync.WaitGroup
	var readersAt readerLog
	for range readers {
		startReader(t, &wg, c, "doc", &order, 20*time.Millisecond, &readersAt)
	}
	if !eventually(3*time.Second, func() bool { return c.readers.readersWait("doc") }) {
		t.Fatal("timed out waiting for: readers waiting")
	}
	if !eventually(3*time.Second, func() bool {
		reads, _ := tries.tries(len(servers))
		return waitingReaders(c, "doc") == readers && reads >= 2*readers
	}) {
		t.Fatal("timed out waiting for: every reader waiting, and as many tries as two each")
	}
	_ = w1.Release(context.Background())
	wg.Wait()
	got := <-w2At
	if got == 1 {
		t.Fatalf("the next writer went first (order %d, readers %v): handed on past waiting readers", got, &readersAt)
	}
}

// readerLog records the order in which readers got a key (order.Add(1) at each grant).
type readerLog struct {
	mu sync.Mutex
	at []int32
}

func (r *readerLog) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.at)
}

// startReader starts a reader of c on key (wait 10 s) that records its turn in log and
// holds the key for hold.
func startReader(t *testing.T, wg *sync.WaitGroup, c *Client, key string, order *atomic.Int32, hold time.Duration, log *readerLog) {
	wg.Go(func() {
		l, err := c.Acquire(context.Background(), key, AcquireOptions{Shared: true, Wait: 10 * time.Second})
		if err != nil {
			t.Errorf("reader: %v", err)
			return
		}
		log.mu.Lock()
		log.at = append(log.at, order.Add(1))
		log.mu.Unlock()
		time.Sleep(hold) // its read: a workload's duration
		_ = l.Release(context.Background())
	})
}
