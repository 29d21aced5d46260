package redlock

import (
	"log/slog"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zaptest/observer"
)

// A young node's refused vote is warned about once, and only while enough of its
// quarantine is left to matter (youngWarnMargin): not in its last moments.
func TestWarnYoungOnlyWhenItMatters(t *testing.T) {
	servers := redistest.StartN(t, 1)
	core, logs := observer.New(zap.WarnLevel)
	opt := fastOptions()
	opt.TTL = 10 * time.Second // quarantine about 10.1s
	opt.Logger = slog.New(zapslog.NewHandler(core))
	c := newTestClient(t, servers, opt)
	n := &node{addr: "young", c: c} // not one of c's nodes: nothing else observes it
	const msg = "redis node started less than a quarantine ago, not together with most nodes: it will not vote until then"
	warnings := func() int { return logs.FilterMessage(msg).FilterField(zap.String("node", "young")).Len() }

	for _, left := range []time.Duration{-time.Second, 10 * time.Millisecond, youngWarnMargin - 100*time.Millisecond} {
		now := time.Now()
		n.startedAt.Store(now.Add(left - c.quarantine()).UnixNano())
		n.warnYoung(now)
		if w := warnings(); w != 0 {
			t.Fatalf("%v of quarantine left: %d warnings, want none", left, w)
		}
	}
	now := time.Now()
	n.startedAt.Store(now.Add(5*time.Second - c.quarantine()).UnixNano())
	n.warnYoung(now)
	n.warnYoung(now.Add(time.Second))
	if w := warnings(); w != 1 {
		t.Fatalf("5s of quarantine left, warned twice: %d warnings, want 1", w)
	}
}
