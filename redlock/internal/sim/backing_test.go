package sim

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// TestJudgeExpiryInstants holds the state judge's expiry instants (backing.go) to the
// node's own expiry: a key is alive by the node's lookup one µs before stringDies and gone
// at it, and a reader's entry (score: expiry in ms) is kept by the scripts'
// ZREMRANGEBYSCORE -inf now_ms until the judge's instant, on clocks fast, slow and offset.
// A judge a µs late would miss a trust that outlasts its backing by that µs; one early
// would raise false alarms.
func TestJudgeExpiryInstants(t *testing.T) {
	for _, c := range []struct {
		rate   float64
		offset time.Duration
	}{{1, 0}, {1.008, 13 * time.Millisecond}, {0.992, -17*time.Millisecond + 333*time.Microsecond}, {1.0033, 999 * time.Microsecond}} {
		synctest.Test(t, func(t *testing.T) {
			w := &World{t0: time.Now()}
			w.wall0 = w.t0.UnixMicro()
			n := &Node{w: w, rate: c.rate, offset: c.offset}
			n.srv = NewServer("n", n.clockUS, "id")
			ss := n.srv.NewSession()
			time.Sleep(1234567 * time.Nanosecond) // off the ms grid
			ss.Exec([]string{"set", "k", "v", "px", "300"})
			ss.Exec([]string{"zadd", "r", "0", "x"})
			entry := float64(n.clockUS()/1000 + 350)
			n.srv.data["r"].z["x"] = entry
			dies := n.stringDies(n.srv.data["k"])
			entryDies := n.instantOf(int64(math.Ceil(entry)) * 1000)

			time.Sleep(time.Until(dies) - time.Microsecond)
			if n.srv.lookup("k") == nil {
				t.Fatalf("rate %v offset %v: the key is gone 1µs before the judge's instant", c.rate, c.offset)
			}
			time.Sleep(time.Microsecond)
			if n.srv.lookup("k") != nil {
				t.Fatalf("rate %v offset %v: the key lives at the judge's instant", c.rate, c.offset)
			}

			// The entry: the scripts drop scores <= now_ms.
			if !entryDies.After(time.Now()) {
				t.Fatalf("the entry died before the key")
			}
			kept := func() bool {
				_, ok := n.srv.data["r"].z["x"]
				return float64(n.clockUS()/1000) < entry && ok
			}
			time.Sleep(time.Until(entryDies) - time.Microsecond)
			if !kept() {
				t.Fatalf("rate %v offset %v: the entry is gone 1µs before the judge's instant", c.rate, c.offset)
			}
			time.Sleep(time.Microsecond)
			if kept() {
				t.Fatalf("rate %v offset %v: the entry lives at the judge's instant", c.rate, c.offset)
			}
		})
	}
}
