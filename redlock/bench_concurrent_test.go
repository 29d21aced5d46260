package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Many concurrent acquire+release pairs on unique keys, N=5: what a busy proxy does. The
// CPU figures are what limits throughput on a small box: this process's CPU per lock and
// the 5 redis-servers' CPU per lock. Pipelining on and off run side by side; the wait rows
// are what the proxy does (a wait ahead: the first try is a plain SET NX PX; no handler
// takes keys shared: NoReaders), with and without fencing.
func BenchmarkConcurrentUniqueKeys(b *testing.B) {
	servers := redistest.StartN(b, 5)
	for _, v := range []struct {
		pipelining bool
		wait       time.Duration
		fencing    bool
	}{{false, 0, false}, {true, 0, false}, {true, 30 * time.Second, false}, {true, 30 * time.Second, true}} {
		pipelining := v.pipelining
		name := fmt.Sprintf("N=5/pipelining=%v", pipelining)
		if v.wait > 0 {
			name += fmt.Sprintf("/wait=%v/fencing=%v", v.wait, v.fencing)
		}
		b.Run(name, func(b *testing.B) {
			// A loose node timeout: this measures CPU, and the box may be shared.
			c, err := New(redistest.URLs(servers), Options{DisablePipelining: !pipelining, NodeTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			var seq atomic.Int64
			prefix := "cu-" + rand.Text()[:8] + "-" // b.Run calls this body several times
			b.SetParallelism(8)                     // 16 goroutines on 2 cores, like the proxy benchmark's clients
			cpu0, redis0, sys0, reads0 := processCPU(), redisCPU(b, servers), processSyscalls(), redisReads(b, servers)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := c.Acquire(ctx, prefix+strconv.FormatInt(seq.Add(1), 10), AcquireOptions{Wait: v.wait, Fencing: v.fencing, NoReaders: v.wait > 0})
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
			b.ReportMetric(float64(processSyscalls()-sys0)/n, "syscalls/op")
			b.ReportMetric((redisReads(b, servers)-reads0)/n/float64(len(servers)), "node-reads/op")
			if !c.opt.DisablePipelining {
				var batches, sent int64
				for _, nd := range c.nodes {
					b, s := nd.tr.Batches()
					batches += b
					sent += s
				}
				b.ReportMetric(float64(sent)/float64(max(batches, 1)), "calls/pipeline")
			}
		})
	}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processSyscalls is how many read and write system calls this process made so far
// (/proc/self/io: syscr + syscw; reads include a connection's health peek, writes each
// pipeline's flush); 0 where that file is missing. Unlike CPU time, it does not move
// with the box's load.
func processSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		for _, f := range []string{"syscr: ", "syscw: "} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// redisCPU is the CPU time all servers used so far (INFO cpu, main thread and children).
func redisCPU(b *testing.B, servers []*redistest.Server) time.Duration {
	return time.Duration(infoSum(b, servers, "cpu", "used_cpu_sys", "used_cpu_user") * float64(time.Second))
}

// redisReads is how many socket reads all servers processed so far (INFO stats): one per
// pipeline that reached a node in one piece, so commands per read is the pipelining
// depth the nodes saw, and the nodes' event-loop cost (a wake-up, a read, a write) is
// paid per read.
func redisReads(b *testing.B, servers []*redistest.Server) float64 {
	return infoSum(b, servers, "stats", "total_reads_processed")
}

// infoSum adds up the numeric INFO fields of one section over all servers.
func infoSum(b *testing.B, servers []*redistest.Server, section string, fields ...string) float64 {
	var total float64
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		info, err := rc.Info(context.Background(), section).Result()
		rc.Close()
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range fields {
			v, _ := strconv.ParseFloat(parseInfoField(strings.ReplaceAll(info, "\r", ""), f), 64)
			total += v
		}
	}
	return total
}
