package redlock

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The key's baton (queue.go) through every path at once: callers of one client on two
// keys, with acquires cancelled at random moments (queued, or just as the baton or a
// handed lock reaches them: take's give-back), Release, HandOver with its Release now or
// a little later, local handoffs, and force releases of the keys. Checked: never two
// trusted holders of a key in this process (a baton owned twice, or a lock handed on
// while another holder still trusts it), and afterwards no baton left unspent (the lines
// are gone, each key can be taken), no lock left registered. Pipelined and not.
func TestBatonUnderCancelsHandOversAndForces(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	for _, nopipe := range []bool{false, true} {
		opt := fastOptions()
		opt.DisablePipelining = nopipe
		c := newTestClient(t, servers, opt)
		waitRunIDs(t, c)
		turnStress(t, c)
		_ = c.Close()
	}
}

// turnStress runs the workers and the force releases on c for 2s, then checks the end.
func turnStress(t *testing.T, c *Client) {
	keys := []string{"rv1", "rv2"}
	var (
		mu      sync.Mutex
		inside  = map[string][]*Lock{}
		bad     atomic.Int64
		got     atomic.Int64
		handed  atomic.Int64
		forced  atomic.Int64
		cancels atomic.Int64
	)
	enter := func(l *Lock) {
		mu.Lock()
		defer mu.Unlock()
		if l.validity() > 0 {
			for _, o := range inside[l.key] {
				if o.validity() > 0 && l.validity() > 0 {
					if bad.Add(1) <= 3 {
						t.Errorf("two trusted holders of %q: %+v and %+v", l.key, o.Info(), l.Info())
					}
				}
			}
		}
		inside[l.key] = append(inside[l.key], l)
	}
	exit := func(l *Lock) {
		mu.Lock()
		defer mu.Unlock()
		ls := inside[l.key]
		for i, o := range ls {
			if o == l {
				inside[l.key] = append(ls[:i:i], ls[i+1:]...)
				return
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rand.IntN(len(keys))]
				ctx, cancel := context.WithCancel(context.Background())
				if rand.IntN(3) == 0 {
					// Cancel at a random moment: queued, just handed the baton, or later.
					time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, func() {
						cancels.Add(1)
						cancel()
					})
				}
				l, err := c.Acquire(ctx, key, AcquireOptions{Wait: 2 * time.Second, Fencing: g%2 == 0})
				if err != nil {
					cancel()
					continue
				}
				got.Add(1)
				if l.Info().Handed {
					handed.Add(1)
				}
				enter(l)
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // a random hold: the interleavings under test
				exit(l)
				switch rand.IntN(3) {
				case 0:
					if !l.HandOver() {
						_ = l.Release(context.Background())
					}
				case 1:
					if !l.HandOver() {
						// Release from elsewhere a little later, as the plugin may.
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // the moment of the race
						_ = l.Release(context.Background())
					}
				default:
					_ = l.Release(context.Background())
				}
				cancel()
			}
		})
	}
	wg.Go(func() {
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			_, _ = c.ForceRelease(context.Background(), keys[rand.IntN(len(keys))])
			forced.Add(1)
			time.Sleep(time.Duration(2+rand.IntN(8)) * time.Millisecond) // the force releases' random pace
		}
		close(stop)
	})
	wg.Wait()
	t.Logf("pipelining=%v: acquired %d (handed %d), forced %d, cancels %d", !c.opt.DisablePipelining, got.Load(), handed.Load(), forced.Load(), cancels.Load())
	// No baton left out: the lines are gone and each key is free at once.
	if !eventually(3*time.Second, func() bool {
		c.queues.mu.Lock()
		defer c.queues.mu.Unlock()
		return len(c.queues.m) == 0
	}) {
		t.Fatal("timed out waiting for: lines empty")
	}
	for _, k := range keys {
		if l, err := c.Acquire(context.Background(), k, AcquireOptions{Wait: 3 * time.Second}); err != nil {
			t.Fatalf("%s not free after the workers stopped: %v (waiting %v)", k, err, c.queues.waiting())
		} else {
			_ = l.Release(context.Background())
		}
	}
	if !eventually(3*time.Second, func() bool { return len(c.Status().Held) == 0 }) {
		t.Fatal("timed out waiting for: no lock registered")
	}
}
