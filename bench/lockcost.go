package main

import (
	"context"
	"fmt"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
	"github.com/go-redsync/redsync/v4"
)

// lockVariant is one library-level lock client: acquire returns a release func.
type lockVariant struct {
	name    string
	acquire func(ctx context.Context, key string) (release func() error, err error)
	close   func()
}

// measureLocks times acquire, release and both, on unique keys, for redlock at N=1,3,5
// (and N=5 with fencing) and redsync at N=1,3,5, alternating.
func measureLocks(nodes []*redisNode, rounds int, d time.Duration) ([]latRow, error) {
	var vs []lockVariant
	defer func() {
		for _, v := range vs {
			v.close()
		}
	}()
	for _, n := range []int{1, 3, 5} {
		v, err := redlockVariant(fmt.Sprintf("redlock acquire+release, N=%d", n), urls(nodes[:n]), false)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	v, err := redlockVariant("redlock acquire+release, N=5, fencing", urls(nodes), true)
	if err != nil {
		return nil, err
	}
	vs = append(vs, v)
	for _, n := range []int{1, 3, 5} {
		vs = append(vs, redsyncVariant(fmt.Sprintf("redsync lock+unlock, N=%d", n), urls(nodes[:n])))
	}

	acq := make([][]time.Duration, len(vs))
	rel := make([][]time.Duration, len(vs))
	both := make([][]time.Duration, len(vs))
	errs := make([]int, len(vs))
	ctx := context.Background()
	seq := 0
	one := func(i int) {
		seq++
		key := fmt.Sprintf("libbench:%d:%d", i, seq)
		t0 := time.Now()
		release, err := vs[i].acquire(ctx, key)
		t1 := time.Now()
		if err != nil {
			errs[i]++
			return
		}
		err = release()
		t2 := time.Now()
		if err != nil {
			errs[i]++
			return
		}
		acq[i] = append(acq[i], t1.Sub(t0))
		rel[i] = append(rel[i], t2.Sub(t1))
		both[i] = append(both[i], t2.Sub(t0))
	}
	for i := range vs { // warm up: connections, script cache
		for range 50 {
			one(i)
		}
		acq[i], rel[i], both[i], errs[i] = nil, nil, nil, 0
	}
	alternate(rounds, len(vs), func(i, _ int) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			one(i)
		}
	})
	var rows []latRow
	for i, v := range vs {
		a, r := summarize(acq[i]), summarize(rel[i])
		rows = append(rows, latRow{Name: v.name, Lat: summarize(both[i]), Acquire: &a, Release: &r, Errors: errs[i]})
	}
	return rows, nil
}

func redlockVariant(name string, u []string, fencing bool) (lockVariant, error) {
	c, err := redlock.New(u, redlock.Options{})
	if err != nil {
		return lockVariant{}, err
	}
	return lockVariant{
		name: name,
		acquire: func(ctx context.Context, key string) (func() error, error) {
			l, err := c.Acquire(ctx, key, redlock.AcquireOptions{Fencing: fencing})
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		},
		close: func() { c.Close() },
	}, nil
}

func redsyncVariant(name string, u []string) lockVariant {
	rs, closeRS := newRedsync(u)
	return lockVariant{
		name: name,
		acquire: func(ctx context.Context, key string) (func() error, error) {
			m := rs.NewMutex(key, redsync.WithTries(1))
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error {
				_, err := m.UnlockContext(ctx)
				return err
			}, nil
		},
		close: closeRS,
	}
}
