package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Tokens strictly increase over 1,000+ successive acquisitions by several clients, also
// across a node restart that loses the counters.
func TestFencingTokensStrictlyIncrease(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 600 * time.Millisecond // keeps the restart quarantine short
	const clients, per = 4, 260
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = newTestClient(t, servers, opt)
	}
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < per; j++ {
				if i == 0 && j == per/2 {
					// Lose node 0's counters mid-run (restart without persistence).
					if err := servers[0].Restart(); err != nil {
						t.Error(err)
						return
					}
				}
				l, err := cs[i].Acquire(context.Background(), "fenced", AcquireOptions{Wait: 10 * time.Second, Fencing: true})
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				// Inside the lock: tokens are appended in holding order.
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				if err := l.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != clients*per {
		t.Fatalf("%d tokens, want %d", len(tokens), clients*per)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d not above previous %d", i, tokens[i], tokens[i-1])
		}
	}
}

// A holder paused past its ttl comes back with an older token than the new holder's:
// storage that keeps the highest token seen rejects it, and its extend reports the loss.
func TestFencingPausedHolderIsFencedOff(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL = 700 * time.Millisecond
	a := newTestClient(t, servers, opt)
	b := newTestClient(t, servers, opt)
	ctx := context.Background()
	la, err := a.Acquire(ctx, "paused", AcquireOptions{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	// "Pause" A: it does nothing, renews nothing, past its ttl.
	time.Sleep(opt.TTL + 100*time.Millisecond) // past the ttl unrenewed: a lapse under test
	lb, err := b.Acquire(ctx, "paused", AcquireOptions{Fencing: true, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	store := &fencedStore{}
	if !store.write(lb.Token()) {
		t.Fatal("storage rejected the current holder")
	}
	if store.write(la.Token()) {
		t.Fatalf("storage accepted stale token %d after %d", la.Token(), lb.Token())
	}
	if _, err := la.extend(ctx); !isLost(err) {
		t.Fatalf("paused holder's extend: %v, want a LostError", err)
	}
}

// fencedStore is storage that keeps the highest token it accepted.
type fencedStore struct{ last int64 }

func (s *fencedStore) write(token int64) bool {
	if token <= s.last {
		return false
	}
	s.last = token
	return true
}
