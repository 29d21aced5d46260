package caddyredlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

func TestZZStressTwoClients(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 5)
	urls := redistest.URLs(servers)
	mk := func(nt time.Duration) *redlock.Client {
		c, err := redlock.New(urls, redlock.Options{Prefix: "zz:", TTL: 2 * time.Second, NodeTimeout: nt})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var inside atomic.Int32
	var cur atomic.Pointer[redlock.Lock]
	var curClient atomic.Int32
	var overlaps atomic.Int32
	var total atomic.Int32
	clients := []*redlock.Client{mk(200 * time.Millisecond), mk(300 * time.Millisecond)}
	var wg sync.WaitGroup
	stop := time.Now().Add(8 * time.Second)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				c := clients[(w+i)%2]
				l, err := c.Acquire(context.Background(), "/r/2", redlock.AcquireOptions{Wait: 20 * time.Second, TTL: 2 * time.Second, Fencing: true})
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
				time.Sleep(10 * time.Millisecond)
				inside.Add(-1)
				_ = l.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	for _, c := range clients {
		c.Close()
	}
	t.Logf("%d holds, %d overlaps", total.Load(), overlaps.Load())
	if overlaps.Load() > 0 {
		t.Fail()
	}
}
