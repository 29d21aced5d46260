package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
	"github.com/go-redsync/redsync/v4"
)

// hotLibRow is the hot key at library level: two lock clients (two processes' worth) with
// 8 workers each take one key in turn and hold it for the hold time. No HTTP: it isolates
// the lock's handoff, and checks mutual exclusion directly in the holders.
type hotLibRow struct {
	Name       string  `json:"name"`
	PerSec     float64 `json:"holds_per_s"`
	OfIdeal    float64 `json:"fraction_of_ideal"`
	KeyBusy    float64 `json:"key_busy_fraction"` // time held (the hold's sleep) / window
	Wait       latency `json:"wait"`
	PerClient  []int   `json:"holds_per_client"`
	Errors     int     `json:"errors"`
	Violations int64   `json:"violations"`
}

// hotLocker takes the key and returns its release.
type hotLocker func(ctx context.Context) (release func(), err error)

func measureHotLib(nodes []*redisNode, cfg config) ([]hotLibRow, error) {
	type variant struct {
		name    string
		clients []hotLocker
	}
	var vs []variant
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	key := "hotlib"
	var rl []hotLocker
	for range 2 {
		c, err := redlock.New(urls(nodes), redlock.Options{})
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { c.Close() })
		rl = append(rl, func(ctx context.Context) (func(), error) {
			l, err := c.Acquire(ctx, key, redlock.AcquireOptions{Wait: 30 * time.Second})
			if err != nil {
				return nil, err
			}
			return func() { l.Release(context.Background()) }, nil
		})
	}
	vs = append(vs, variant{"redlock library, N=5", rl})
	for _, tuned := range []bool{false, true} {
		var rs []hotLocker
		for range 2 {
			r, closeRS := newRedsync(urls(nodes))
			closers = append(closers, closeRS)
			opts := []redsync.Option{redsync.WithExpiry(10 * time.Second), redsync.WithTries(1 << 30)}
			if tuned {
				opts = append(opts, redsync.WithRetryDelayFunc(func(int) time.Duration {
					return time.Millisecond + rand.N(4*time.Millisecond+1)
				}))
			}
			rs = append(rs, func(ctx context.Context) (func(), error) {
				m := r.NewMutex("redlock:"+key, opts...)
				ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func() { m.UnlockContext(context.Background()) }, nil
			})
		}
		name := "redsync library, N=5"
		if tuned {
			name = "redsync library tuned 1-5ms, N=5"
		}
		vs = append(vs, variant{name, rs})
	}

	type acc struct {
		holds     int
		window    time.Duration
		waits     []time.Duration
		perClient []int
		errors    int
		viol      int64
		busy      time.Duration
	}
	accs := make([]acc, len(vs))
	run := func(i int, d time.Duration, a *acc) {
		var inside atomic.Int32
		var mu sync.Mutex
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		if a.perClient == nil {
			a.perClient = make([]int, len(vs[i].clients))
		}
		for ci, lock := range vs[i].clients {
			for range 8 {
				wg.Go(func() {
					var waits []time.Duration
					holds, errs := 0, 0
					var viol int64
					var busy time.Duration
					for time.Now().Before(end) {
						t0 := time.Now()
						release, err := lock(context.Background())
						if err != nil {
							errs++
							continue
						}
						waits = append(waits, time.Since(t0))
						if inside.Add(1) > 1 {
							viol++
						}
						h0 := time.Now()
						time.Sleep(cfg.Hold)
						busy += time.Since(h0)
						inside.Add(-1)
						release()
						if time.Now().Before(end) {
							holds++
						}
					}
					mu.Lock()
					a.holds += holds
					a.perClient[ci] += holds
					a.waits = append(a.waits, waits...)
					a.errors += errs
					a.viol += viol
					a.busy += busy
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		a.window += d
	}
	for i := range vs {
		run(i, cfg.Warmup, &acc{})
	}
	alternate(cfg.HotRounds, len(vs), func(i, round int) {
		before := accs[i].holds
		run(i, cfg.HotDur, &accs[i])
		progress("  %-32s round %d: %5.0f holds/s\n", vs[i].name, round+1, float64(accs[i].holds-before)/cfg.HotDur.Seconds())
	})
	rows := make([]hotLibRow, len(vs))
	for i, v := range vs {
		a := accs[i]
		ps := float64(a.holds) / a.window.Seconds()
		rows[i] = hotLibRow{Name: v.name, PerSec: ps, OfIdeal: ps * cfg.Hold.Seconds(), Wait: summarize(a.waits),
			KeyBusy:   a.busy.Seconds() / a.window.Seconds(),
			PerClient: a.perClient, Errors: a.errors, Violations: a.viol}
		if a.viol > 0 {
			notef("VIOLATION: %s: %d holds overlapped another holder of the same key", v.name, a.viol)
		}
	}
	return rows, nil
}
