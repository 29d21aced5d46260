package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// stressDuration is how long TestStressMixedModes injects faults: about 5s by default (a
// CI run), 2s with -short, or REDLOCK_STRESS (a Go duration, "60s", or seconds, "60").
func stressDuration(t *testing.T) time.Duration {
	d := 5 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	s := os.Getenv("REDLOCK_STRESS")
	if s == "" {
		return d
	}
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("REDLOCK_STRESS=%q: %v", s, err)
	}
	return d
}

// stressKeys are the keys every worker draws from: few, so modes meet on each.
var stressKeys = []string{"a", "b", "c", "d"}

// stressLimit is the n of every limited key (one n per key name, as a deployment has).
const stressLimit = 2

// stressCounts is the summary.
type stressCounts struct {
	exclusive, shared, limit, sets, setLocks  atomic.Int64
	handed, lost, lostBeforeEntry             atomic.Int64
	busy, unavailable                         atomic.Int64
	pauses, majorityPauses, restarts, flushes atomic.Int64
}

// Every mode on a few keys at once - exclusive (with local handoffs and long holds kept
// alive), shared, limit 2, several keys together (exclusive and shared, waiting longer
// than the ttl) - from three clients (pipelined or not, clocks skewed within the lead),
// with fencing on some workers, while nodes are paused past the node timeout (now and
// then a majority, past the ttl, so locks are lost), restarted without their data, and
// flushed (FLUSHALL: the data-marker rule quarantines them). The ledger
// (stress_ledger_test.go) judges every mode's promise (docs/design.md indexes them) at every entry and exit
// and every few milliseconds: exclusive excludes everyone of the key, readers exclude
// writers, at most n limit holders and one per place, fencing tokens above those of the
// holders before. A lost lock is fine; one still trusted while another holder is inside
// is not. REDLOCK_STRESS=60s runs it longer.
func TestStressMixedModes(t *testing.T) {
	dur := stressDuration(t)
	const nodes = 5
	servers := redistest.StartN(t, nodes)
	base := fastOptions()
	base.TTL = 1500 * time.Millisecond
	base.NodeTimeout = 150 * time.Millisecond
	cfgs := []struct {
		skew   time.Duration
		nopipe bool
	}{{0, false}, {40 * time.Millisecond, true}, {-30 * time.Millisecond, false}}
	clients := make([]*Client, len(cfgs))
	for i, cf := range cfgs {
		o := base
		o.DisablePipelining = cf.nopipe
		clients[i] = newTestClient(t, servers, o)
		clients[i].clockSkew = cf.skew
	}
	for _, c := range clients {
		waitRunIDs(t, c)
		waitMarkers(t, c)
	}

	var counts stressCounts
	var lastFault atomic.Pointer[string]
	none := "none yet"
	lastFault.Store(&none)
	var faultLog []string // written by the fault injector only, read after it returned
	ledger := newStressLedger(t, func() string { return *lastFault.Load() })

	runCtx, stopWorkers := context.WithCancel(context.Background())
	defer stopWorkers()
	var workers sync.WaitGroup
	for ci, c := range clients {
		for _, r := range stressRoles(base.TTL) {
			if r.first && ci > 0 {
				continue
			}
			who := fmt.Sprintf("c%d/%s", ci, r.name)
			workers.Go(func() { r.run(runCtx, t, c, who, ledger, &counts) })
		}
	}
	// The sweep: every holder against every other, every few milliseconds.
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		for runCtx.Err() == nil {
			ledger.sweep()
			time.Sleep(3 * time.Millisecond) // the sweep's pace
		}
	}()

	injectFaults(t, servers, dur, base.TTL, &counts, func(s string) {
		s = time.Now().Format("15:04:05.000000") + " " + s
		lastFault.Store(&s)
		faultLog = append(faultLog, s)
	})
	stopWorkers()
	workers.Wait()
	if t.Failed() {
		t.Logf("faults:\n%s", strings.Join(faultLog, "\n"))
	}
	<-sweepDone
	ledger.sweep()
	if n := ledger.left(); n != 0 {
		t.Errorf("%d holders still recorded inside after every worker stopped", n)
	}
	t.Logf("mixed stress %v: holds exclusive %d, shared %d, limit %d, sets %d (%d locks); handed %d; lost %d (+%d before entry); busy %d, unavailable %d; faults: pauses %d, majority pauses %d, restarts %d, flushes %d; violations %d",
		dur, counts.exclusive.Load(), counts.shared.Load(), counts.limit.Load(), counts.sets.Load(), counts.setLocks.Load(),
		counts.handed.Load(), counts.lost.Load(), counts.lostBeforeEntry.Load(), counts.busy.Load(), counts.unavailable.Load(),
		counts.pauses.Load(), counts.majorityPauses.Load(), counts.restarts.Load(), counts.flushes.Load(), ledger.violations)
}

// injectFaults pauses, restarts and flushes nodes, one fault at a time, for dur, and
// leaves every node running and resumed when it returns.
func injectFaults(t *testing.T, servers []*redistest.Server, dur, ttl time.Duration, counts *stressCounts, note func(string)) {
	defer func() {
		for _, s := range servers {
			if err := s.Resume(); err != nil {
				t.Errorf("resume at the end: %v", err)
			}
		}
	}()
	deadline := time.Now().Add(dur)
	for n := 1; time.Now().Before(deadline); n++ {
		i := rand.IntN(len(servers))
		s := servers[i]
		switch {
		case n%11 == 0:
			// A majority past the ttl: no renewal reaches a quorum, so the locks held
			// across it are lost, and must be noticed before anyone else gets them.
			maj := rand.Perm(len(servers))[:len(servers)/2+1]
			note(fmt.Sprintf("pause nodes %v for %v", maj, ttl*6/5))
			counts.majorityPauses.Add(1)
			for _, j := range maj {
				_ = servers[j].Pause()
			}
			time.Sleep(ttl * 6 / 5) // past the ttl: the fault under test
			for _, j := range maj {
				_ = servers[j].Resume()
			}
			note(fmt.Sprintf("resumed nodes %v", maj))
		case n%7 == 0:
			note(fmt.Sprintf("restart node %d", i))
			counts.restarts.Add(1)
			if err := s.Restart(); err != nil {
				t.Errorf("restart: %v", err)
			}
			note(fmt.Sprintf("restarted node %d", i))
		case n%5 == 0:
			note(fmt.Sprintf("FLUSHALL node %d", i))
			counts.flushes.Add(1)
			rc := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
			if err := rc.FlushAll(context.Background()).Err(); err != nil {
				t.Errorf("FLUSHALL: %v", err)
			}
			_ = rc.Close()
		default:
			d := time.Duration(50+rand.IntN(350)) * time.Millisecond
			note(fmt.Sprintf("pause node %d for %v", i, d))
			counts.pauses.Add(1)
			_ = s.Pause()
			time.Sleep(d) // the pause: the fault under test
			_ = s.Resume()
			note(fmt.Sprintf("resumed node %d", i))
		}
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond) // the faults' random pace
	}
}

// stressRole is one kind of worker; every client runs each.
type stressRole struct {
	name    string
	kind    stressKind
	fencing bool
	set     int           // > 0: AcquireAll of that many keys
	maxHold time.Duration // up to this long (uniform)
	handOff bool          // HandOver half the time
	wait    time.Duration
	first   bool          // on the first client only (long holds: few, or the keys are always held)
	rest    time.Duration // between holds (long holds: leave the keys to the others now and then)
}

func stressRoles(ttl time.Duration) []stressRole {
	return []stressRole{
		{name: "excl1", kind: kindExclusive, maxHold: 2 * time.Millisecond, handOff: true, wait: 3 * time.Second},
		{name: "excl2", kind: kindExclusive, maxHold: 2 * time.Millisecond, handOff: true, wait: 3 * time.Second},
		{name: "excl-fence1", kind: kindExclusive, fencing: true, maxHold: 2 * time.Millisecond, handOff: true, wait: 3 * time.Second},
		{name: "excl-fence2", kind: kindExclusive, fencing: true, maxHold: 2 * time.Millisecond, handOff: true, wait: 3 * time.Second},
		// Longer than a renewal interval (KeepAlive; handed locks continue its schedule),
		// up to longer than the ttl: a majority pause then loses it, and it must notice.
		{name: "excl-long", rest: 300 * time.Millisecond, kind: kindExclusive, fencing: true, maxHold: 2 * ttl, handOff: true, wait: 3 * time.Second, first: true},
		{name: "shared1", kind: kindShared, maxHold: 3 * time.Millisecond, wait: 3 * time.Second},
		{name: "shared-fence", kind: kindShared, fencing: true, maxHold: 3 * time.Millisecond, wait: 3 * time.Second},
		{name: "shared-long", rest: 300 * time.Millisecond, kind: kindShared, maxHold: ttl / 2, wait: 3 * time.Second, first: true},
		{name: "limit1", kind: kindLimit, maxHold: 3 * time.Millisecond, wait: 3 * time.Second},
		{name: "limit-fence", kind: kindLimit, fencing: true, maxHold: 3 * time.Millisecond, wait: 3 * time.Second},
		// Several keys, waiting longer than the ttl: earlier keys are renewed meanwhile.
		{name: "set-excl", kind: kindExclusive, set: 2, maxHold: 20 * time.Millisecond, handOff: true, wait: ttl * 3},
		{name: "set-fence", kind: kindExclusive, fencing: true, set: 3, maxHold: 20 * time.Millisecond, wait: ttl * 3},
		{name: "set-shared", kind: kindShared, set: 2, maxHold: 20 * time.Millisecond, wait: ttl * 3},
		{name: "set-long", rest: 300 * time.Millisecond, kind: kindExclusive, set: 2, maxHold: ttl / 2, wait: ttl * 3, first: true},
	}
}

// run acquires, holds and releases until ctx ends.
func (r stressRole) run(ctx context.Context, t *testing.T, c *Client, who string, g *stressLedger, counts *stressCounts) {
	o := AcquireOptions{Wait: r.wait, Fencing: r.fencing, Shared: r.kind == kindShared}
	if r.kind == kindLimit {
		o.Limit = stressLimit
	}
	for ctx.Err() == nil {
		var locks []*Lock
		var err error
		if r.set > 0 {
			keys := rand.Perm(len(stressKeys))[:r.set]
			ks := make([]string, len(keys))
			for i, k := range keys {
				ks[i] = stressKeys[k]
			}
			locks, err = c.AcquireAll(ctx, ks, o)
		} else {
			var l *Lock
			l, err = c.Acquire(ctx, stressKeys[rand.IntN(len(stressKeys))], o)
			locks = []*Lock{l}
		}
		switch {
		case ctx.Err() != nil:
			if err == nil {
				releaseStress(locks, false)
			}
			return
		case isBusy(err):
			counts.busy.Add(1)
			continue
		case isUnavailable(err):
			counts.unavailable.Add(1)
			// No quorum (a majority paused or quarantined): it fails at once, so do not spin.
			time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // a back-off: nothing to wait for
			continue
		case err != nil:
			t.Errorf("%s: acquire: %v", who, err)
			return
		}
		r.hold(ctx, t, who, locks, g, counts)
		if r.rest > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(rand.Int64N(int64(r.rest)))):
			}
		}
	}
}

// hold records locks in the ledger, holds them (renewed when the hold is long) until the
// hold ends or one is lost, and releases them.
func (r stressRole) hold(ctx context.Context, t *testing.T, who string, locks []*Lock, g *stressLedger, counts *stressCounts) {
	if r.set > 0 {
		// AcquireAll returns held locks only (multi.go): each valid, none lost.
		for _, l := range locks {
			if i := l.Info(); i.Validity <= 0 || i.Err != nil {
				t.Errorf("%s: AcquireAll returned %q with validity %v, err %v", who, l.key, i.Validity, i.Err)
			}
		}
	}
	holders := make([]*stressHolder, 0, len(locks))
	entered := true
	for _, l := range locks {
		h := &stressHolder{l: l, who: who, kind: r.kind, set: r.set > 0, fencing: r.fencing, token: l.Token(), handed: l.Info().Handed}
		r.checkMode(t, h)
		if !g.enter(h) {
			entered = false
			break
		}
		holders = append(holders, h)
	}
	if !entered {
		counts.lostBeforeEntry.Add(1)
		for _, h := range holders {
			g.exit(h)
		}
		releaseStress(locks, false)
		return
	}
	switch {
	case r.set > 0:
		counts.sets.Add(1)
		counts.setLocks.Add(int64(len(locks)))
	case r.kind == kindExclusive:
		counts.exclusive.Add(1)
	case r.kind == kindShared:
		counts.shared.Add(1)
	default:
		counts.limit.Add(1)
	}
	for _, h := range holders {
		if h.handed {
			counts.handed.Add(1)
		}
	}
	d := time.Duration(rand.Int64N(int64(r.maxHold) + 1))
	lockTTL := locks[0].ttl
	if d > lockTTL/4 {
		for _, l := range locks {
			if err := l.KeepAlive(lockTTL/4, 0); err != nil && !isLost(err) && !errors.Is(err, ErrReleased) {
				t.Errorf("%s: KeepAlive: %v", who, err)
			}
		}
	}
	// The set is held while every lock of it is: the first loss ends the hold.
	hctx, cancel := heldContext(context.Background(), locks)
	timer := time.NewTimer(d)
	select {
	case <-hctx.Done():
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	cancel()
	lost := false
	for _, l := range locks {
		lost = lost || isLost(l.Info().Err)
	}
	if lost {
		counts.lost.Add(1)
	}
	for _, h := range holders {
		g.exit(h)
	}
	releaseStress(locks, r.handOff && !lost && rand.IntN(2) == 0)
}

// checkMode checks that the lock is of the mode asked for: a limit request holds one of
// the key's places (never a handed exclusive lock, mode.go), places are never handed, and
// no lock crosses into another mode.
func (r stressRole) checkMode(t *testing.T, h *stressHolder) {
	l := h.l
	m := l.mode
	plain := l.nm.lock == l.c.names(l.key).lock
	var bad string
	switch r.kind {
	case kindLimit:
		h.limit = stressLimit // what was asked: a wrong lock is judged against it
		h.place = l.nm.lock
		if m.limit != stressLimit || !strings.Contains(l.nm.lock, slotSuffix) || plain {
			bad = "not a place of the limited key"
		} else if h.handed {
			bad = "a place handed over (places are not)"
		}
	case kindShared:
		if !m.shared || !l.nm.shared || !plain || h.handed {
			bad = "not a reader of the key"
		}
	case kindExclusive:
		if m.shared || l.nm.shared || m.limit != 0 || !plain {
			bad = "not an exclusive lock of the key"
		}
	}
	// Readers are never handed on, so their mode only says what they asked; a reader of a
	// set that joined a single key's reader group (readgroup.go) carries the group's.
	if r.kind != kindShared && m.several != (r.set > 0) {
		bad = "the lock of another caller (single key against several)"
	}
	if bad != "" {
		t.Errorf("MODE: %s asked %s (set %v) and got %s: mode %+v, name %q, handed %v", h.who, r.kind, r.set > 0, bad, m, l.nm.lock, h.handed)
	}
}

// releaseStress gives locks back: by HandOver when asked and it hands on, else Release.
func releaseStress(locks []*Lock, handOver bool) {
	for _, l := range locks {
		if handOver && l.HandOver() {
			continue
		}
		_ = l.Release(context.Background())
	}
}
