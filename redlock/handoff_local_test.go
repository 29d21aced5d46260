package redlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// queueWaiter starts an Acquire of key that queues behind the current holder and waits
// until it is queued (so waiters are in a known order). The lock arrives on the channel.
func queueWaiter(t *testing.T, c *Client, key string, o AcquireOptions) <-chan *Lock {
	t.Helper()
	before := c.queues.waiting()[key]
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire(context.Background(), key, o)
		if err != nil {
			t.Errorf("queued acquire: %v", err)
			close(got)
			return
		}
		got <- l
	}()
	if !eventually(3*time.Second, func() bool { return c.queues.waiting()[key] == before+1 }) {
		t.Fatal("timed out waiting for: waiter queued")
	}
	return got
}

func receive(t *testing.T, ch <-chan *Lock) *Lock {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.FailNow()
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not get the lock")
	}
	return nil
}

// evalCalls counts the lock scripts a node ran since its stats were reset. Every lock
// script goes out as EVALSHA first (EVAL only after NOSCRIPT), so EVALSHA counts them;
// plain EVAL is the health check's max_ttl announce, which is not counted.
func evalCalls(t *testing.T, s *redistest.Server) int {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") {
			var calls int
			if _, err := fmtSscanCalls(line, &calls); err == nil {
				n += calls
			}
		}
	}
	return n
}

func resetStats(t *testing.T, servers []*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
}

// A lock released while a waiter of the same client queues is handed over as it is: the
// same value stays on the nodes and no script runs on any node.
func TestLocalHandoffCostsNoRoundTrip(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l1, err := c.Acquire(context.Background(), "hand", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, c, "hand", AcquireOptions{Wait: 5 * time.Second})
	before := make([]string, len(servers))
	for i, s := range servers {
		before[i], _ = rawGet(t, s, "hand")
	}
	resetStats(t, servers)
	if err := l1.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l2 := receive(t, waiter)
	if !l2.Info().Handed || l2.Info().Attempts != 0 {
		t.Fatalf("handed=%v attempts=%d: want a handed lock", l2.Info().Handed, l2.Info().Attempts)
	}
	if l2.validity() <= 0 || l2.err() != nil {
		t.Fatalf("handed lock not valid: validity %v err %v", l2.validity(), l2.err())
	}
	for i, s := range servers {
		if v, _ := rawGet(t, s, "hand"); v != before[i] {
			t.Fatalf("node %d: the value changed during a local handoff", i)
		}
		if n := evalCalls(t, s); n != 0 {
			t.Fatalf("node %d ran %d scripts during a local handoff, want 0", i, n)
		}
	}
	if h := c.holding("hand"); h != l2 {
		t.Fatalf("Holding lists %p, want the handed lock %p", h, l2)
	}
	if err := l1.Release(context.Background()); err != ErrReleased {
		t.Fatalf("second release of the old holder: %v, want ErrReleased", err)
	}
	if err := l2.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if _, ok := rawGet(t, s, "hand"); ok {
			t.Fatalf("node %d still holds the key after the last release", i)
		}
	}
}

// After HandoffLimit handoffs in a row the lock goes back through Redis (a new value),
// and a waiter that asked for another ttl is never handed a lock.
func TestHandoffLimitAndCompatibility(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.HandoffLimit = 2
	opt.MaxTTL = 3 * time.Second // the odd waiter below asks for 3s
	c := newTestClient(t, servers, opt)
	l, err := c.Acquire(context.Background(), "limit", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var waiters []<-chan *Lock
	for i := 0; i < 4; i++ {
		waiters = append(waiters, queueWaiter(t, c, "limit", AcquireOptions{Wait: 5 * time.Second}))
	}
	odd := queueWaiter(t, c, "limit", AcquireOptions{Wait: 5 * time.Second, TTL: 3 * time.Second})
	value := func() string { v, _ := rawGet(t, servers[0], "limit"); return v }
	want := []bool{true, true, false, true} // third: the streak of 2 is used up
	prev := value()
	for i, w := range waiters {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		l = receive(t, w)
		if l.Info().Handed != want[i] {
			t.Fatalf("holder %d: handed=%v, want %v", i+1, l.Info().Handed, want[i])
		}
		if now := value(); (now == prev) != want[i] {
			t.Fatalf("holder %d: value changed=%v, want %v", i+1, now != prev, !want[i])
		}
		prev = value()
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	l = receive(t, odd)
	if l.Info().Handed {
		t.Fatal("a waiter with another ttl was handed the lock")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Every holder gets its own fencing token, above every earlier one, whether the lock was
// handed over or taken in Redis, also when another client takes its baton in between.
func TestHandoffFencingTokensIncrease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.HandoffLimit = 3
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	fence := AcquireOptions{Wait: 5 * time.Second, Fencing: true}
	var (
		mu     sync.Mutex
		tokens []int64 // appended while holding: the order the key was held in
	)
	record := func(l *Lock) {
		mu.Lock()
		tokens = append(tokens, l.Token())
		mu.Unlock()
	}
	l, err := a.Acquire(context.Background(), "ftok", fence)
	if err != nil {
		t.Fatal(err)
	}
	record(l)
	var waiters []<-chan *Lock
	for i := 0; i < 6; i++ { // 3 handed, 1 through Redis, 2 handed
		waiters = append(waiters, queueWaiter(t, a, "ftok", fence))
	}
	bDone := make(chan struct{})
	go func() { // another client wants the key too: it gets it when a's streak ends
		defer close(bDone)
		lb, err := b.Acquire(context.Background(), "ftok", AcquireOptions{Wait: 10 * time.Second, Fencing: true})
		if err != nil {
			t.Errorf("b: %v", err)
			return
		}
		record(lb)
		_ = lb.Release(context.Background())
	}()
	handed := 0
	for _, w := range waiters {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		prev := l.Token()
		l = receive(t, w)
		record(l)
		if l.Info().Handed {
			handed++
			if l.Token() != prev+1 {
				t.Fatalf("handed token %d, want previous holder's + 1 = %d", l.Token(), prev+1)
			}
		}
	}
	if handed != 5 {
		t.Fatalf("%d handoffs, want 5", handed)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-bDone
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 8 {
		t.Fatalf("%d tokens, want 8", len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d not above %d (tokens in holding order %v)", i, tokens[i], tokens[i-1], tokens)
		}
	}
}

// A chain of handoffs, each holder shorter than the renew interval, keeps the lock
// renewed: KeepAlive continues the predecessor's schedule. Were it to start over at each
// handoff, no renewal would ever run and the chain would end when validity ran low.
func TestHandoffChainKeepsRenewing(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 900 * time.Millisecond
	opt.HandoffLimit = maxHandoffLimit
	c := newTestClient(t, servers, opt)
	const holders = 12
	const hold, every = 150 * time.Millisecond, 300 * time.Millisecond // 12 x 150ms = 2 ttl
	l, err := c.Acquire(context.Background(), "chain", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(every, 0); err != nil {
		t.Fatal(err)
	}
	renewals := 0
	for i := 0; i < holders; i++ {
		w := queueWaiter(t, c, "chain", AcquireOptions{Wait: 5 * time.Second})
		time.Sleep(hold) // each holder's hold: shorter than the renew interval, under test
		if err := l.err(); err != nil {
			t.Fatalf("holder %d lost the lock: %v", i, err)
		}
		renewals += l.Info().Renewals
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		l = receive(t, w)
		if !l.Info().Handed {
			t.Fatalf("holder %d: not handed (validity ran low: renewals did not continue)", i+1)
		}
		if err := l.KeepAlive(every, 0); err != nil {
			t.Fatalf("holder %d: %v", i+1, err)
		}
	}
	if renewals == 0 {
		t.Fatal("no renewal ran during the chain")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Two clients with several workers each on one key take turns: after a streak, the
// releasing client's next head yields to the other client's waiters.
func TestHandoffStreaksAreFairAcrossClients(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.HandoffLimit = 4
	clients := []*Client{newTestClient(t, servers, opt), newTestClient(t, servers, opt)}
	const total, workers = 240, 4
	var (
		done    atomic.Int64
		perCli  [2]atomic.Int64
		inside  atomic.Int32
		wg      sync.WaitGroup
		overlap atomic.Bool
	)
	for ci, c := range clients {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < total {
					l, err := c.Acquire(context.Background(), "fair", AcquireOptions{Wait: 10 * time.Second})
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if inside.Add(1) != 1 {
						overlap.Store(true)
					}
					time.Sleep(500 * time.Microsecond) // the hold: a workload's duration
					inside.Add(-1)
					perCli[ci].Add(1)
					done.Add(1)
					if err := l.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if overlap.Load() {
		t.Fatal("two holders at once")
	}
	a, b := perCli[0].Load(), perCli[1].Load()
	if min(a, b)*4 < a+b { // each client at least a quarter
		t.Fatalf("holds per client %d:%d: one client starved the other", a, b)
	}
}

// A renewal in flight when the holder releases may find the key gone (deleted behind its
// back on a majority): the lock is then lost and must not be handed on. One node is
// paused so that every renewal takes a node timeout; Release comes while the first
// renewal after the deletes is on its way.
func TestNoHandoffOfLockFoundGoneByRenewalInFlight(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.NodeTimeout = time.Second
	opt.TTL = 10 * time.Second
	c := newTestClient(t, servers, opt)
	l, err := c.Acquire(context.Background(), "gone", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.KeepAlive(100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, c, "gone", AcquireOptions{Wait: 10 * time.Second})
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	inFlight := func() bool {
		c.renewer.mu.Lock()
		defer c.renewer.mu.Unlock()
		return l.renewInFlight > 0
	}
	r0 := l.Info().Renewals
	if !eventually(3*time.Second, func() bool { return l.Info().Renewals > r0 && !inFlight() }) {
		t.Fatal("timed out waiting for: a renewal to complete")
	}
	for _, s := range servers[:2] { // right after it: the next one starts in 100ms
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		if err := rc.Del(context.Background(), defaultPrefix+"gone").Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	// The next renewal is out (it hangs on the paused node for a node timeout).
	if !eventually(3*time.Second, inFlight) {
		t.Fatal("timed out waiting for: the next renewal")
	}
	_ = l.Release(context.Background())
	next := receive(t, waiter)
	if next.Info().Handed {
		t.Fatal("a lock whose key was gone from a majority was handed to the next waiter")
	}
	_ = next.Release(context.Background())
}

// While a force release of a key is under way, a released lock is not handed on: the
// handed lock would hold keys about to be deleted.
func TestNoHandoffDuringForceRelease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	l, err := c.Acquire(context.Background(), "forcing", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waiter := queueWaiter(t, c, "forcing", AcquireOptions{Wait: 5 * time.Second})
	c.queues.beginForce("forcing")
	_ = l.Release(context.Background())
	c.queues.endForce("forcing")
	next := receive(t, waiter)
	if next.Info().Handed {
		t.Fatal("handed on during a force release")
	}
	_ = next.Release(context.Background())
}
