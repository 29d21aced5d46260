package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// cmdCalls reads how often a node ran cmd (from clients or inside scripts) since its
// stats were reset.
func cmdCalls(t *testing.T, s *redistest.Server, cmd string) int {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			var calls int
			if _, err := fmtSscanCalls(line, &calls); err == nil {
				return calls
			}
		}
	}
	return 0
}

// Every grant carries the node's data marker, so that a node that lost its data since the
// last health check is no vote (dataloss.go). The first try of a writer that may wait,
// without fencing, is a plain SET NX PX with the marker's GET behind it on the same
// connection (one GET per pipeline); every other try is one acquire script call per node,
// which reads the marker itself and takes a free key with one SET NX.
func TestEveryTryIsOneScriptCall(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c := newTestClient(t, servers, fastOptions())
	// Load the scripts first (a first EVALSHA meets NOSCRIPT and goes again).
	for _, o := range []AcquireOptions{{}, {Fencing: true}} {
		l, err := c.Acquire(context.Background(), "warm-up", o)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitGone(t, servers, "warm-up") // a release returns at a quorum; the rest follows
	}
	for _, tc := range []struct {
		name    string
		o       AcquireOptions
		scripts int // per node, release included
	}{
		{"wait", AcquireOptions{Wait: time.Second}, 1},                   // a plain SET (and the marker's GET), then the release script
		{"no wait", AcquireOptions{}, 2},                                 // a last try: the script, for the holder's PTTL if busy
		{"fencing", AcquireOptions{Wait: time.Second, Fencing: true}, 2}, // the script, no commit: one round trip
	} {
		t.Run(tc.name, func(t *testing.T) {
			resetStats(t, servers)
			l, err := c.Acquire(context.Background(), "plain-"+tc.name, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if !eventually(3*time.Second, func() bool {
				for _, s := range servers {
					if _, ok := rawGet(t, s, "plain-"+tc.name); !ok {
						return false
					}
				}
				return true
			}) {
				t.Fatal("timed out waiting for: the round's SET on every node")
			}
			for i, s := range servers {
				if v, _ := rawGet(t, s, "plain-"+tc.name); !strings.HasSuffix(v, ":1") {
					t.Fatalf("node %d holds %q, want the first attempt's value", i, v)
				}
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitGone(t, servers, "plain-"+tc.name)
			for i, s := range servers {
				if n := evalCalls(t, s); n != tc.scripts {
					t.Errorf("node %d ran %d scripts, want %d", i, n, tc.scripts)
				}
				if n := cmdCalls(t, s, "set"); n < 1 {
					t.Errorf("node %d ran no SET", i)
				}

			}
		})
	}
}

// A first try that finds the key taken counts as a busy vote: the caller waits and gets
// the key when the holder releases it. A wait of 0 reports the holder's remaining ttl.
func TestBusyThenAcquired(t *testing.T) {
	servers := redistest.StartN(t, 3)
	a := newTestClient(t, servers, fastOptions())
	b := newTestClient(t, servers, fastOptions())
	l, err := a.Acquire(context.Background(), "contended", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Acquire(context.Background(), "contended", AcquireOptions{})
	var busy *BusyError
	if !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("wait 0 on a held key: %v, want BusyError with the holder's ttl", err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := b.Acquire(context.Background(), "contended", AcquireOptions{Wait: 5 * time.Second})
		if err == nil {
			err = l2.Release(context.Background())
		}
		got <- err
	}()
	// b's first try finds the key busy: b then waits for its release notice.
	if !eventually(3*time.Second, func() bool { return watching(b, "contended") }) {
		t.Fatal("timed out waiting for: b waits for a release notice")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after release: %v", err)
	}
}
