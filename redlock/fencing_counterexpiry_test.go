package redlock

import (
	"context"
	"strconv"
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
	if !eventually(3*time.Second, func() bool {
		for _, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
			n, err := rc.Exists(ctx, counter).Result()
			rc.Close()
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("timed out waiting for: the counter expired on every node")
	}

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

// A client with a small max_ttl that has not read a larger bound yet (it met the nodes
// before the other client announced it, and its health checks are a minute apart) still
// writes counters that live twice the longest max_ttl announced to the node: the expiry
// of a counter is read from the node's bound in the same script, not from the writer's
// own. With its own (two quarantines of 400ms) a counter would lapse long before the
// tokens of the client with a 10s max_ttl (whose lead is 100ms, not 50) are overtaken by
// the clocks, and a counter re-created then starts below them when node clocks differ
// by more than that short expiry allows (fencing.go, "Counter expiry").
func TestCounterExpiryFollowsTheLargestBoundOnTheNode(t *testing.T) {
	ctx := context.Background()
	servers := redistest.StartN(t, 3)
	small := fastOptions()
	small.TTL, small.MaxTTL = 400*time.Millisecond, 400*time.Millisecond
	small.HealthInterval = time.Minute
	x := newTestClient(t, servers, small)
	waitUsable(t, x)
	large := fastOptions()
	large.MaxTTL = 10 * time.Second
	y := newTestClient(t, servers, large)
	waitMarkers(t, y) // y announced its bound on every node
	if x.bound() != small.MaxTTL {
		t.Fatalf("x already knows a bound of %v: the scenario needs it not to", x.bound())
	}
	for _, commit := range []bool{false, true} {
		key := "small-writer"
		if commit {
			// Counters left ahead of the clocks, each by another amount, on two nodes: any
			// quorum's tokens differ, and x commits the largest with commitScript, which
			// sets the expiry too.
			key = "small-writer-commit"
			for i, s := range servers[:2] {
				rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
				ahead := time.Now().Add(time.Hour).UnixMicro() + int64(i)*1000
				err := rc.Set(ctx, defaultPrefix+key+counterSuffix, ahead, time.Minute).Err()
				rc.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		l, err := x.Acquire(ctx, key, AcquireOptions{Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		<-l.settled
		_ = l.Release(ctx)
		if commit && l.Token() < time.Now().Add(30*time.Minute).UnixMicro() {
			t.Fatalf("token %d: want one an hour ahead (committed on a quorum)", l.Token())
		}
		for i, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
			pttl, err := rc.PTTL(ctx, defaultPrefix+key+counterSuffix).Result()
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if pttl < 2*large.MaxTTL-time.Second {
				t.Errorf("commit %v, node %d: the counter x wrote expires in %v (x's own counter ttl %v); want twice the largest bound on the node, %v",
					commit, i+1, pttl, x.counterTTL(), 2*large.MaxTTL)
			}
		}
	}
}

// The scripts' copy of maxBound.
func TestMaxBoundMsLua(t *testing.T) {
	if maxBoundMsLua != strconv.FormatInt(maxBound.Milliseconds(), 10) {
		t.Fatalf("maxBoundMsLua %s, maxBound %v", maxBoundMsLua, maxBound)
	}
}
