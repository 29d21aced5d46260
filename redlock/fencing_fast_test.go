package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// commitCounter counts fencing commit rounds (Observer op "commit").
type commitCounter struct{ commits atomic.Int64 }

func (o *commitCounter) NodeCall(_, op string, _ time.Duration, _ error) {
	if op == "commit" {
		o.commits.Add(1)
	}
}
func (o *commitCounter) Renewal(error) {}

// With clocks that agree, a fencing acquire is one round trip: brand-new keys and a key
// reused by one client need no commit round, and handoffs still get their reserve.
func TestFencingFastPath(t *testing.T) {
	servers := redistest.StartN(t, 3)
	obs := &commitCounter{}
	opt := fastOptions()
	opt.Observer = obs
	c := newTestClient(t, servers, opt)
	ctx := context.Background()
	var last int64
	for i := range 40 {
		key := "reused"
		if i%2 == 0 {
			key = "new-" + string(rune('a'+i))
		}
		l, err := c.Acquire(ctx, key, AcquireOptions{Fencing: true, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if key == "reused" {
			if l.Token() <= last {
				t.Fatalf("token %d after %d", l.Token(), last)
			}
			last = l.Token()
			if l.tokenMax != l.Token()+c.handoffReserve(names{}) {
				t.Fatalf("fast path without the handoff reserve: token %d, max %d", l.Token(), l.tokenMax)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := obs.commits.Load(); n != 0 {
		t.Fatalf("%d commit calls for 40 fencing acquires with agreeing clocks, want 0 (one round trip each)", n)
	}
}

// Clients whose clocks are far behind or ahead lose the fast path, never the order:
// tokens strictly increase in holding order over acquisitions by all of them, across a
// holder paused past its ttl and a node restarted without its data.
func TestFencingWithSkewedClientClocks(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 600 * time.Millisecond // short quarantine
	obs := &commitCounter{}
	skews := []time.Duration{0, -time.Hour, time.Hour, 30 * time.Millisecond}
	cs := make([]*Client, len(skews))
	for i, sk := range skews {
		o := opt
		if sk != 0 {
			o.Observer = obs
		}
		cs[i] = newTestClient(t, servers, o)
		cs[i].clockSkew = sk
	}
	ctx := context.Background()
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	const per = 60
	for i, c := range cs {
		wg.Go(func() {
			for j := range per {
				if i == 0 && j == per/3 {
					// Hold past the ttl without renewing: the next holder fences it off.
					l, err := c.Acquire(ctx, "skew", AcquireOptions{Fencing: true, Wait: 10 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					// Past the ttl unrenewed: a lapse under test.
					time.Sleep(opt.TTL + 50*time.Millisecond)
					_ = l.Release(ctx) // long expired: others may hold the key by now
					continue
				}
				if i == 1 && j == per/2 {
					if err := servers[0].Restart(); err != nil {
						t.Error(err)
						return
					}
				}
				l, err := c.Acquire(ctx, "skew", AcquireOptions{Fencing: true, Wait: 10 * time.Second})
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if len(tokens) != len(cs)*per {
		t.Fatalf("%d tokens, want %d", len(tokens), len(cs)*per)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d not above the previous %d", i, tokens[i], tokens[i-1])
		}
	}
	if obs.commits.Load() == 0 {
		t.Fatal("clients with skewed clocks never took the commit path: their proposals were accepted")
	}
}
