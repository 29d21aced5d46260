package redlock

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Review stress: several clients (pipelined and not, clocks skewed around the lead,
// local handoffs) contend for one fencing key while nodes are paused past the node
// timeout and one is restarted without its data now and then. Checked on every
// acquisition: no other holder's lock is still valid (two holders), and the token is
// above every token handed out before (fencing order).
func TestStressHoldersAndTokens(t *testing.T) {
	skipShort(t)
	dur := 4 * time.Second
	if s := os.Getenv("REDLOCK_STRESS_SECONDS"); s != "" {
		n, _ := strconv.Atoi(s)
		dur = time.Duration(n) * time.Second
	}
	servers := redistest.StartN(t, 3)
	base := fastOptions()
	base.TTL = 1500 * time.Millisecond
	base.NodeTimeout = 150 * time.Millisecond
	type cfg struct {
		skew   time.Duration
		nopipe bool
		maxTTL time.Duration
	}
	cfgs := []cfg{
		{0, false, 0},
		{48 * time.Millisecond, false, 0}, // proposals at the edge of the lead
		{-30 * time.Millisecond, true, 0},
		{55 * time.Millisecond, true, 3 * time.Second},
	}
	cs := make([]*Client, len(cfgs))
	for i, cf := range cfgs {
		o := base
		o.DisablePipelining = cf.nopipe
		o.MaxTTL = cf.maxTTL
		cs[i] = newTestClient(t, servers, o)
		cs[i].clockSkew = cf.skew
	}
	for _, c := range cs {
		waitRunIDs(t, c)
	}
	ctx := context.Background()
	var (
		mu      sync.Mutex
		cur     *Lock
		curWho  string
		lastTok int64
		lastWho string
		acq     atomic.Int64
		handed  atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		for g := 0; g < 3; g++ {
			who := strconv.Itoa(i) + "/" + strconv.Itoa(g)
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := c.Acquire(ctx, "stress", AcquireOptions{Fencing: true, Wait: 3 * time.Second})
					if err != nil {
						continue
					}
					acq.Add(1)
					if l.Info().Handed {
						handed.Add(1)
					}
					mu.Lock()
					if cur != nil && cur.validity() > 0 {
						t.Errorf("TWO HOLDERS: %s got token %d while %s holds token %d with validity %v",
							who, l.Token(), curWho, cur.Token(), cur.validity())
					}
					if l.Token() <= lastTok {
						t.Errorf("TOKEN ORDER: %s got token %d after %s had %d", who, l.Token(), lastWho, lastTok)
					}
					cur, curWho, lastTok, lastWho = l, who, l.Token(), who
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) // a random hold: the interleavings under test
					mu.Lock()
					if cur == l {
						cur = nil
					}
					mu.Unlock()
					if rand.IntN(2) == 0 && l.HandOver() {
						continue
					}
					_ = l.Release(ctx)
				}
			})
		}
	}
	// chaos
	wg.Go(func() {
		deadline := time.Now().Add(dur)
		n := 0
		for time.Now().Before(deadline) {
			n++
			s := servers[rand.IntN(len(servers))]
			if n%9 == 0 {
				if err := s.Restart(); err != nil {
					t.Error(err)
				}
			} else {
				_ = s.Pause()
				time.Sleep(time.Duration(50+rand.IntN(350)) * time.Millisecond) // the pause: the fault under test
				_ = s.Resume()
			}
			time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond) // the faults' random pace
		}
		close(stop)
	})
	wg.Wait()
	t.Logf("acquisitions %d, handed %d", acq.Load(), handed.Load())
}
