package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// For N = 1, 3, 5 and every count of failed nodes (killed, or paused: a paused node
// accepts connections but never answers), a minority down still acquires and a majority
// down reports unavailable, bounded by the node timeout, with no key left on live nodes.
func TestQuorumWithNodesDownOrPaused(t *testing.T) {
	skipShort(t)
	for _, n := range []int{1, 3, 5} {
		for _, mode := range []string{"killed", "paused"} {
			for down := 0; down <= n; down++ {
				t.Run(fmt.Sprintf("N=%d/%s=%d", n, mode, down), func(t *testing.T) {
					servers := redistest.StartN(t, n)
					c := newTestClient(t, servers, fastOptions())
					for i := 0; i < down; i++ {
						var err error
						if mode == "killed" {
							err = servers[i].Kill()
						} else {
							err = servers[i].Pause()
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					key := fmt.Sprintf("quorum-%d-%s-%d", n, mode, down)
					start := time.Now()
					l, err := c.Acquire(context.Background(), key, AcquireOptions{Wait: 2 * time.Second})
					took := time.Since(start)
					if down < c.quorum && n-down >= c.quorum {
						if err != nil {
							t.Fatalf("%d of %d down: %v", down, n, err)
						}
						if err := l.Release(context.Background()); err != nil {
							t.Fatalf("release: %v", err)
						}
					} else {
						if !isUnavailable(err) {
							t.Fatalf("%d of %d down: got %v, want an UnavailableError", down, n, err)
						}
						var ue *UnavailableError
						if !errors.As(err, &ue) || len(ue.Nodes) < n-c.quorum+1 {
							t.Fatalf("error does not name the failed nodes: %v", err)
						}
						// Two rounds, each bounded by the node timeout, plus one retry delay:
						// generous bound that still proves the wait (2s) was not used up.
						if took > 1500*time.Millisecond {
							t.Fatalf("unavailable took %v: a dead node must not use up the wait", took)
						}
					}
					// No key left behind on the nodes that are up.
					for _, s := range servers[down:] {
						if !eventually(3*time.Second, func() bool {
							_, present := rawGet(t, s, key)
							return !present
						}) {
							t.Fatal("timed out waiting for: no key left on " + s.Addr())
						}
					}
				})
			}
		}
	}
}
