package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A fencing counter expires two quarantines after its last write (not an hour), and a
// holder after its re-creation still gets a token above every earlier one: here the
// earlier tokens ran a whole lead ahead of the clocks (a client clock ahead) and the
// new holder's clock is a lead behind, the worst case the lead allows.
func TestFencingCounterExpiresAndTokensStayOrdered(t *testing.T) {
	servers := redistest.StartN(t, 3)
	opt := fastOptions()
	opt.TTL, opt.MaxTTL, opt.NodeTimeout = 300*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond
	early := newTestClient(t, servers, opt)
	lead := early.tokenLead()
	early.clockSkew = lead - time.Millisecond // proposals a lead ahead: still taken
	ctx := context.Background()
	const key = "expiring"

	// Several callers of one client: local handoffs use the reserve above each token.
	var mu sync.Mutex
	var maxToken int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				l, err := early.Acquire(ctx, key, AcquireOptions{Fencing: true, Wait: 5 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				maxToken = max(maxToken, l.Token())
				mu.Unlock()
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	e := early.counterTTL()
	if e > 2*time.Second {
		t.Fatalf("counter ttl %v: want two quarantines of a 300ms max_ttl", e)
	}
	counter := defaultPrefix + key + counterSuffix
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		pttl, err := rc.PTTL(ctx, counter).Result()
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if pttl <= 0 || pttl > e {
			t.Fatalf("counter on %s: pttl %v, want (0, %v]", s.Addr(), pttl, e)
		}
	}
	eventually(t, "the counter expired on every node", func() bool {
		for _, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
			n, err := rc.Exists(ctx, counter).Result()
			rc.Close()
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	})

	late := newTestClient(t, servers, opt)
	late.clockSkew = -(lead - time.Millisecond) // proposals a lead behind: still taken
	l, err := late.Acquire(ctx, key, AcquireOptions{Fencing: true, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= maxToken {
		t.Fatalf("token %d after the counter's re-creation, not above the earlier %d", l.Token(), maxToken)
	}
}
