package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The benchmarks run side by side in one `go test -bench .` so machine noise hits all
// of them alike. BenchmarkFloor is the physical floor a lock round cannot beat: one PING
// to one node, and one PING to each of 5 nodes at once.

func BenchmarkFloor(b *testing.B) {
	servers := redistest.StartN(b, 5)
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true})
		defer clients[i].Close()
	}
	ctx := context.Background()
	b.Run("ping-1", func(b *testing.B) {
		for b.Loop() {
			if err := clients[0].Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ping-5-parallel", func(b *testing.B) {
		var wg sync.WaitGroup
		for b.Loop() {
			for _, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = c.Ping(ctx).Err()
				}()
			}
			wg.Wait()
		}
	})
}

// Uncontended acquire + release on unique keys.
func BenchmarkAcquireRelease(b *testing.B) {
	all := redistest.StartN(b, 5)
	for _, n := range []int{1, 3, 5} {
		for _, v := range []struct{ fencing, pipelining bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
			fencing := v.fencing
			b.Run(fmt.Sprintf("N=%d/fencing=%v/pipelining=%v", n, fencing, v.pipelining), func(b *testing.B) {
				c, err := New(redistest.URLs(all[:n]), Options{DisablePipelining: !v.pipelining})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ctx := context.Background()
				// Keys of their own per variant: a release to a slow node that timed out in
				// an earlier variant leaves its key there for a ttl.
				run := rand.Text()
				i := 0
				for b.Loop() {
					i++
					l, err := c.Acquire(ctx, fmt.Sprintf("bench-%s-%d", run, i), AcquireOptions{Fencing: fencing})
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// Hot key: each op is one hold of one key by one of several workers in one or two
// clients (two clients = two processes' worth). Reports attempts per hold; handoffs ride
// on the local queue and on release notices, not on the retry delay (50-250ms here, so
// a polling handoff would show as a few holds per second).
func BenchmarkHotKeyHandoff(b *testing.B) {
	servers := redistest.StartN(b, 5)
	for _, shape := range []struct{ clients, workers int }{{1, 8}, {2, 1}, {2, 8}} {
		b.Run(fmt.Sprintf("clients=%d/workers=%d", shape.clients, shape.workers), func(b *testing.B) {
			benchHotKey(b, servers, shape.clients, shape.workers)
		})
	}
}

func benchHotKey(b *testing.B, servers []*redistest.Server, clients, workers int) {
	opt := Options{RetryDelayMin: 50 * time.Millisecond, RetryDelayMax: 250 * time.Millisecond}
	cs := make([]*Client, clients)
	for i := range cs {
		c, err := New(redistest.URLs(servers), opt)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	ctx := context.Background()
	var attempts, holds, next atomic.Int64
	total := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range cs {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= total {
					l, err := c.Acquire(ctx, "hot", AcquireOptions{Wait: time.Minute})
					if err != nil {
						b.Error(err)
						return
					}
					attempts.Add(int64(l.Info().Attempts))
					holds.Add(1)
					_ = l.Release(ctx)
				}
			}()
		}
	}
	wg.Wait()
	if h := holds.Load(); h > 0 {
		b.ReportMetric(float64(attempts.Load())/float64(h), "attempts/hold")
	}
}
