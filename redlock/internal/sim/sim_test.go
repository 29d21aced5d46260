package sim

import (
	"context"

	"github.com/redis/go-redis/v9"
	"os"
	"runtime/debug"
	"strconv"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
)

// runSeed runs one schedule in a bubble of its own, with crypto/rand drawn from the seed.
func runSeed(t *testing.T, seed uint64, cfg Config) Result {
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

func TestMain(m *testing.M) {
	redis.SetLogger(nopLogger{})
	debug.SetGCPercent(800) // the schedules' heaps are small: trade memory for CPU
	os.Exit(m.Run())
}
