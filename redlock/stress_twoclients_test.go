package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Two clients that differ in their node timeout (200ms and 300ms, as two instances
// configured apart) share one fencing key on 5 nodes: eight workers take it in turn
// through either client for 8 s, and no two of them ever hold it at once.
func TestStressTwoClientsNodeTimeouts(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 5)
	mk := func(nt time.Duration) *Client {
		return newTestClient(t, servers, Options{Prefix: "zz:", TTL: 2 * time.Second, NodeTimeout: nt})
	}
	var inside atomic.Int32
	var cur atomic.Pointer[Lock]
	var curClient atomic.Int32
	var overlaps atomic.Int32
	var total atomic.Int32
	clients := []*Client{mk(200 * time.Millisecond), mk(300 * time.Millisecond)}
	var wg sync.WaitGroup
	stop := time.Now().Add(8 * time.Second)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				c := clients[(w+i)%2]
				l, err := c.Acquire(context.Background(), "/r/2", AcquireOptions{Wait: 20 * time.Second, TTL: 2 * time.Second, Fencing: true})
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				_ = l.KeepAlive(600*time.Millisecond, 0)
				if inside.Add(1) > 1 {
					overlaps.Add(1)
					o := cur.Load()
					t.Logf("overlap at %v: new client %d attempts %d validity %v token %d err %v acquiredAt %v; holder client %d attempts %d validity %v token %d err %v acquiredAt %v",
						time.Now().Format("15:04:05.000000"), (w+i)%2, l.Info().Attempts, l.Info().Validity, l.Token(), l.Info().Err, l.Info().AcquiredAt.Format("05.000000"),
						curClient.Load(), o.Info().Attempts, o.Info().Validity, o.Token(), o.Info().Err, o.Info().AcquiredAt.Format("05.000000"))
				}
				cur.Store(l)
				curClient.Store(int32((w + i) % 2))
				total.Add(1)
				time.Sleep(10 * time.Millisecond) // the hold: a workload's duration
				inside.Add(-1)
				_ = l.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	t.Logf("%d holds, %d overlaps", total.Load(), overlaps.Load())
	if overlaps.Load() > 0 {
		t.Fail()
	}
}
