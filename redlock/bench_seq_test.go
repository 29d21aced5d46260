package redlock

import (
	"context"
	"crypto/rand"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The write sequence's cost (rollback.go): the nodes' CPU per lock with the check on and
// off (seqCheckOff: the scripts get no sequence name and advance nothing; the plain first
// try reads the marker with a GET instead of the small EVAL), on the same 5 nodes, for the
// three paths a grant takes: the plain SET of a writer that may wait, the acquire script
// (no wait), and the script with fencing. Run with -count N: each count runs every
// variant once, in turn, so the box's drift hits them alike; `make bench` does that and
// reports the medians (bench/seqcost.go).
func BenchmarkWriteSequenceCost(b *testing.B) {
	servers := redistest.StartN(b, 5)
	for _, path := range []struct {
		name    string
		wait    time.Duration
		fencing bool
	}{{"wait", 30 * time.Second, false}, {"nowait", 0, false}, {"fencing", 0, true}} {
		for _, check := range []bool{true, false} {
			b.Run("path="+path.name+"/check="+map[bool]string{true: "on", false: "off"}[check], func(b *testing.B) {
				c, err := New(redistest.URLs(servers), Options{NodeTimeout: time.Second})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				c.seqCheckOff.Store(!check)
				firstContact(c)
				ctx := context.Background()
				var seq atomic.Int64
				prefix := "seq-" + rand.Text()[:8] + "-"
				b.SetParallelism(8)
				cpu0, redis0 := processCPU(), redisCPU(b, servers)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l, err := c.Acquire(ctx, prefix+strconv.FormatInt(seq.Add(1), 10),
							AcquireOptions{Wait: path.wait, Fencing: path.fencing, NoReaders: true})
						if err != nil {
							b.Error(err)
							return
						}
						if err := l.Release(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				n := float64(b.N)
				b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/n, "client-cpu-µs/op")
				b.ReportMetric(float64((redisCPU(b, servers)-redis0).Microseconds())/n, "redis-cpu-µs/op")
			})
		}
	}
}
