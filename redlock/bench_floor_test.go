package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The floor under BenchmarkConcurrentUniqueKeys: what go-redis alone costs for the
// commands of one lock without fencing (a SET NX PX and the release script on each of 5
// nodes), with none of the lock's own work. One goroutine per node sends pipelines of a
// fixed depth: first the SETs, then the releases. BenchmarkConcurrentUniqueKeys's
// pipelines hold about 9 calls at 16 goroutines, so depth=9 is what its figures compare
// with: the client's CPU above this row is the lock's own work (rounds, the wake-up of
// the caller, the release's goroutine), and the nodes' CPU above it is the marker's GET
// and the scheduling of 21 goroutines instead of 5. Depth 1 and 16 show how both sides'
// cost per lock follows the pipelining depth (docs/performance.md, issue 32).
func BenchmarkTransportFloor(b *testing.B) {
	servers := redistest.StartN(b, 5)
	ctx := context.Background()
	var clients []*redis.Client
	var digests []string
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		b.Cleanup(func() { rc.Close() })
		digest, err := rc.ScriptLoad(ctx, releaseScript.Src()).Result()
		if err != nil {
			b.Fatal(err)
		}
		clients = append(clients, rc)
		digests = append(digests, digest)
	}
	// A value and an id of the lengths the client sends (an owner prefix and an attempt).
	value, id := "0123456789abcdef0123456789abcdef:1", "0123456789abcdef0123456789abcdef"
	for _, depth := range []int{1, 9, 16} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			rounds := (b.N + depth - 1) / depth
			cpu0, redis0, reads0 := processCPU(), redisCPU(b, servers), redisReads(b, servers)
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make([]error, len(clients))
			for i, rc := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					keys := make([]string, depth)
					for r := 0; r < rounds && errs[i] == nil; r++ {
						p := rc.Pipeline()
						for j := range keys {
							keys[j] = fmt.Sprintf("floor-%d-%d-%d-%d", b.N, i, r, j)
							p.SetNX(ctx, keys[j], value, defaultTTL)
						}
						if _, err := p.Exec(ctx); err != nil {
							errs[i] = err
							return
						}
						p = rc.Pipeline()
						for _, k := range keys {
							p.EvalSha(ctx, digests[i], []string{k}, value, id)
						}
						cmds, err := p.Exec(ctx)
						if err == nil && cmds[0].(*redis.Cmd).Val() != int64(1) {
							err = fmt.Errorf("release found %v", cmds[0].(*redis.Cmd).Val())
						}
						errs[i] = err
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			n := float64(rounds * depth)
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/n, "client-cpu-µs/op")
			b.ReportMetric(float64((redisCPU(b, servers)-redis0).Microseconds())/n, "redis-cpu-µs/op")
			b.ReportMetric((redisReads(b, servers)-reads0)/n/float64(len(servers)), "node-reads/op")
		})
	}
}
