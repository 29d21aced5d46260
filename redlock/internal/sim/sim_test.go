package sim

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"testing/cryptotest"
	"testing/synctest"

	"github.com/redis/go-redis/v9"
)

var warm sync.Once

// runSeed runs one schedule in a bubble of its own, with crypto/rand drawn from the seed.
func runSeed(t *testing.T, seed uint64, cfg Config) Result {
	// The scripts' digests known before the first schedule, as in every later one (Warm).
	warm.Do(func() { synctest.Test(t, func(*testing.T) { Warm() }) })
	// Two collections empty the sync.Pools: go-redis pools timers (its semaphore), and a
	// timer made in one schedule's bubble is fatal to use in another's.
	runtime.GC()
	runtime.GC()
	cryptotest.SetGlobalRandom(t, seed)
	var res Result
	synctest.Test(t, func(t *testing.T) {
		res = Run(seed, cfg)
		synctest.Wait()
		if leaks := LeakCheck(); len(leaks) > 0 {
			for _, l := range leaks {
				t.Logf("leaked goroutine:\n%s", l)
			}
			res.Violations = append(res.Violations, Violation{Kind: "leak", What: strconv.Itoa(len(leaks)) + " goroutines left behind"})
		}
	})
	return res
}

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

// simGOGC is the collector's target for the simulation's processes, unless GOGC says
// otherwise (measurements: docs/simulation.md, Speed).
const simGOGC = 800

func TestMain(m *testing.M) {
	redis.SetLogger(nopLogger{})
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(simGOGC) // the schedules' heaps are small: trade memory for CPU
	}
	os.Exit(m.Run())
}
