package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The load: every client runs workers of every mode on a few keys, as an application
// would (exclusive with and without fencing, local handoffs by HandOver, long holds kept
// alive; shared readers; limit 2; several keys at once), cancels some of its waiting
// acquires, and an operator force releases keys at random moments (fault plan).

var keys = []string{"a", "b", "c"}

const limitN = 2

// workersPerClient is how many of the roles each client runs (drawn per schedule).
const workersPerClient = 2

type role struct {
	name  string
	kind  holdKind
	fence bool
	set   bool
}

var roles = []role{
	{name: "excl", kind: kindExclusive},
	{name: "excl-fence", kind: kindExclusive, fence: true},
	{name: "excl-fence2", kind: kindExclusive, fence: true},
	{name: "shared", kind: kindShared},
	{name: "shared-fence", kind: kindShared, fence: true},
	{name: "limit", kind: kindLimit, fence: true},
	{name: "set", kind: kindExclusive, set: true},
	{name: "set-shared", kind: kindShared, set: true},
}

type workload struct {
	w       *World
	p       params
	g       *ledger
	clients []*redlock.Client
	ready   []chan struct{} // closed once the client exists
	end     time.Time       // faults end; the load goes on (judged for liveness) until stop
	stop    time.Time
	bg      sync.WaitGroup

	mu     sync.Mutex
	paused []time.Time // per client: a GC pause ends then

	ops, acquires, joins atomic.Int64
}

// run starts every client and its workers, and returns once they stopped and released.
func (wl *workload) run(start func(ci int) *redlock.Client) {
	n := len(wl.clients)
	wl.paused = make([]time.Time, n)
	wl.ready = make([]chan struct{}, n)
	for ci := range n {
		wl.ready[ci] = make(chan struct{})
	}
	wl.w.onForce = func(ci int, key string) {
		wl.bg.Go(func() {
			<-wl.ready[ci]
			start := wl.g.forceBegins(key, ci).start
			_, _ = wl.clients[ci].ForceRelease(context.Background(), key)
			wl.g.forceEnds(key, ci, start)
		})
	}
	wl.w.onHold = func(ci int, key string, wait, hold time.Duration, fence bool) {
		wl.bg.Go(func() {
			<-wl.ready[ci]
			if !wl.allWaitHold(ci, key, wait, hold) { // the all-wait program's holds (allwait_program.go)
				wl.holdOnce(ci, key, wait, hold, fence)
			}
		})
	}
	wl.w.onForceLanded = wl.g.forceLanded
	wl.w.seqRead = func(ci int, addr string) (int64, bool) {
		select {
		case <-wl.ready[ci]: // clients[ci] is set
			return clientSeqRead(wl.clients[ci], addr), true
		default:
			return 0, false
		}
	}
	wl.w.onGC = func(ci int, until time.Time) {
		wl.mu.Lock()
		wl.paused[ci] = until
		wl.mu.Unlock()
	}
	var workers sync.WaitGroup
	for ci := range n {
		// The clients start a few µs apart: their health checks (one a second from
		// the start) then never fall at one instant, where synctest would run them in
		// an order of its own (it shuffles timers that fire together).
		at := time.Duration(ci) * 37 * time.Microsecond
		if ci == n-1 && wl.p.lateStart > 0 {
			at += wl.p.lateStart
		}
		workers.Go(func() {
			time.Sleep(at)
			wl.w.note("client", "client %d starts", ci)
			wl.clients[ci] = start(ci)
			close(wl.ready[ci])
			var mine sync.WaitGroup
			for ri, r := range wl.p.roles[ci] {
				who := fmt.Sprintf("c%d/%s", ci, r.name)
				if wl.w.cfg.DropWorkers[who] {
					continue // shrinking: its draws are its own, the others' stay
				}
				seed := uint64(ci*100 + ri)
				mine.Go(func() { wl.worker(ci, who, r, rand.New(rand.NewPCG(wl.w.seed, seed))) })
			}
			mine.Wait()
		})
	}
	workers.Wait()
	wl.bg.Wait()
}

// stall holds a worker of a client whose process is paused (a GC pause) until the pause
// ends: the holder's work resumes after its lock may have lapsed.
func (wl *workload) stall(ci int) {
	wl.mu.Lock()
	until := wl.paused[ci]
	wl.mu.Unlock()
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
}

func (wl *workload) worker(ci int, who string, r role, rng *rand.Rand) {
	c := wl.clients[ci]
	ttl := wl.p.ttl
	for time.Now().Before(wl.stop) {
		// Think, then ask. 120 to 480 ms: a schedule's cost is about its lock operations
		// (ten commands each), and this many keep the three keys contended (docs/simulation.md, "Speed").
		time.Sleep(120*time.Millisecond + time.Duration(rng.Int64N(int64(360*time.Millisecond))))
		wl.stall(ci)
		o := redlock.AcquireOptions{Wait: time.Duration(rng.Int64N(int64(3 * ttl))), Fencing: r.fence, Shared: r.kind == kindShared}
		if r.kind == kindLimit {
			o.Limit = limitN
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancelAt := time.Duration(-1)
		if rng.IntN(10) == 0 { // a waiting acquire cancelled (a client went away)
			cancelAt = time.Duration(rng.Int64N(int64(o.Wait + 1)))
			time.AfterFunc(cancelAt, cancel)
		}
		start := time.Now()
		var locks []*redlock.Lock
		var err error
		wl.acquires.Add(1)
		if r.set {
			i := rng.IntN(len(keys))
			ks := []string{keys[i], keys[(i+1+rng.IntN(len(keys)-1))%len(keys)]}
			locks, err = c.AcquireAll(ctx, ks, o)
		} else {
			key := keys[rng.IntN(len(keys))]
			var l *redlock.Lock
			l, err = c.Acquire(ctx, key, o)
			if err == nil {
				locks = []*redlock.Lock{l}
			}
		}
		took := time.Since(start)
		wl.judgeWait(who, start, took, o.Wait, cancelAt, err)
		cancel()
		if err != nil {
			var busy *redlock.BusyError
			var unav *redlock.UnavailableError
			switch {
			case errors.As(err, &busy), errors.As(err, &unav), errors.Is(err, context.Canceled):
			default:
				wl.g.violation("error", "%s: acquire: %v", who, err)
			}
			if errors.As(err, &unav) {
				time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
			}
			continue
		}
		wl.ops.Add(int64(len(locks)))
		wl.hold(ci, who, r, locks, rng, start)
	}
}

// judgeWait checks that an acquire that began after the faults healed came back within
// its wait (or its cancellation) plus a few node timeouts.
func (wl *workload) judgeWait(who string, start time.Time, took, wait, cancelAt time.Duration, err error) {
	if start.Before(wl.end) {
		return
	}
	p := wl.p
	slack := 5*p.nodeTimeout + p.retryMax + 10*time.Millisecond
	limit := wait
	if cancelAt >= 0 && cancelAt < limit {
		limit = cancelAt
	}
	if took > limit+slack {
		wl.g.violation("liveness", "%s: an acquire with wait %v (cancelled at %v) returned after %v (%v)", who, wait, cancelAt, took, err)
	}
}

func (wl *workload) hold(ci int, who string, r role, locks []*redlock.Lock, rng *rand.Rand, asked time.Time) {
	g := wl.g
	ttl := wl.p.ttl
	holders := make([]*holder, 0, len(locks)) // those entered
	all := make([]*holder, 0, len(locks))     // every lock, entered or not: each may be handed on
	entered := true
	for _, l := range locks {
		i := l.Info()
		h := &holder{l: l, client: ci, asked: asked, key: i.Key, who: who, kind: r.kind, limit: limitN, set: r.set, fencing: r.fence, token: l.Token(), handed: i.Handed,
			attempts: i.Attempts, entered: time.Now()}
		all = append(all, h)
		if r.set && (i.Validity <= 0 || i.Err != nil) && trusted(locks[0]) {
			g.violation("all or none", "%s: AcquireAll returned %q with validity %v, err %v", who, i.Key, i.Validity, i.Err)
		}
		if !entered {
			continue // one lock of a set was not trusted: the set is not entered
		}
		if !g.enter(h) {
			entered = false
			continue
		}
		holders = append(holders, h)
	}
	if entered {
		for _, h := range holders {
			g.write(h)
		}
		if r.kind == kindShared && !r.set && rng.IntN(3) == 0 {
			wl.joinUnderForce(ci, who, r, holders[0], rng.Int64N(int64(2*time.Millisecond)))
		}
		d := time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
		renewed := true
		if rng.IntN(8) == 0 && !wl.w.cfg.ShortHolds { // a long hold: kept alive, or worked to the end of its validity
			d = time.Duration(rng.Int64N(int64(3 * ttl / 2)))
			if rng.IntN(2) == 0 {
				// No renewals: the work stops when the lock's Context ends, at the last
				// instant its validity allows. A waiter that gets the key just after must
				// find it free on a quorum: the drift allowance (Lock.Info().Validity, doc.go) keeps
				// the end of trust ahead of the nodes.
				d, renewed = 2*ttl, false
			}
		}
		if renewed && d > ttl/4 {
			for _, l := range locks {
				_ = l.KeepAlive(ttl/4, 0)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		for _, l := range locks {
			var c context.CancelFunc
			ctx, c = l.Context(ctx)
			defer c()
		}
		workFor(ctx, d)
		cancel()
		wl.stall(ci) // a GC pause during the work: it resumes late
		for _, h := range holders {
			g.write(h) // a paused holder's write: its token must be refused if another wrote since
		}
	}
	for _, h := range holders {
		g.exit(h)
	}
	for _, h := range all {
		g.released(h)
	}
	handOver := r.kind == kindExclusive && rng.IntN(2) == 0
	for _, l := range locks {
		wl.ops.Add(1)
		if handOver && l.HandOver() {
			continue
		}
		_ = l.Release(context.Background())
	}
}

// holdOnce is a fault program's acquire (faults.go: young, lateForce, lateValue): client
// ci takes key exclusive (with fencing if fence), waiting at most wait, and holds it for
// hold or until it is no longer trusted, without renewing it.
func (wl *workload) holdOnce(ci int, key string, wait, hold time.Duration, fence bool) {
	who := fmt.Sprintf("c%d/program", ci)
	asked := time.Now()
	wl.acquires.Add(1)
	l, err := wl.clients[ci].Acquire(context.Background(), key, redlock.AcquireOptions{Wait: wait, Fencing: fence})
	if err != nil {
		var busy *redlock.BusyError
		var unav *redlock.UnavailableError
		if !errors.As(err, &busy) && !errors.As(err, &unav) && !errors.Is(err, context.Canceled) {
			wl.g.violation("error", "%s: acquire: %v", who, err)
		}
		return
	}
	wl.ops.Add(2)
	i := l.Info()
	h := &holder{l: l, client: ci, asked: asked, key: i.Key, who: who, kind: kindExclusive, fencing: fence, token: l.Token(), handed: i.Handed,
		attempts: i.Attempts}
	if wl.g.enter(h) {
		ctx, cancel := l.Context(context.Background())
		workFor(ctx, hold)
		cancel()
		wl.g.exit(h)
	}
	wl.g.released(h)
	_ = l.Release(context.Background())
}

// probeFree checks liveness once the load stopped: every key is taken, by an exclusive
// acquire, within ttl + quarantine (plus a health interval for a loss to be seen, and a
// few node timeouts).
func (wl *workload) probeFree() {
	p := wl.p
	q := p.ttl + time.Duration(float64(p.ttl)*driftFactor) + 2*time.Millisecond
	wait := p.ttl + q + p.health + 4*p.nodeTimeout + 100*time.Millisecond
	for i, k := range keys {
		c := wl.clients[i%len(wl.clients)]
		start := time.Now()
		l, err := c.Acquire(context.Background(), k, redlock.AcquireOptions{Wait: wait})
		if err != nil {
			wl.g.violation("liveness", "free key %q not taken within %v: %v after %v", k, wait, err, time.Since(start))
			continue
		}
		_ = l.Release(context.Background())
	}
}

// joinUnderForce starts, d after a reader got its key, another reader of the same client
// for the same key (it joins the first one's group: readgroup.go) and, at that very
// instant, an operator's force release of the key on that client. With SIM_PROCS=2 the
// two run in parallel on the CPU: a joiner that slipped between the force's listing of
// holders and its deletes would keep trusting an entry the force deleted.
func (wl *workload) joinUnderForce(ci int, who string, r role, first *holder, d int64) {
	c := wl.clients[ci]
	wl.bg.Go(func() {
		time.Sleep(time.Duration(d))
		wl.bg.Go(func() {
			start := wl.g.forceBegins(first.key, ci).start
			_, _ = c.ForceRelease(context.Background(), first.key)
			wl.g.forceEnds(first.key, ci, start)
		})
		// A few µs of CPU first, of a length drawn from the seed: in parallel (SIM_PROCS=2)
		// the force release then starts a little before or after the join, on the CPU.
		// On one CPU it changes nothing but the time to the next preemption.
		if parallel {
			spin(d % 400000)
		}
		asked := time.Now()
		l, err := c.Acquire(context.Background(), first.key, redlock.AcquireOptions{Shared: true, Fencing: r.fence})
		if err != nil {
			return
		}
		wl.ops.Add(2)
		if l.Info().Attempts == 0 {
			wl.joins.Add(1) // it shared the first reader's entry (readgroup.go)
		}
		h := &holder{l: l, client: ci, asked: asked, key: first.key, who: who + "/joiner", kind: kindShared, fencing: r.fence, token: l.Token(),
			attempts: l.Info().Attempts}
		if wl.g.enter(h) {
			// Held a while: another client's writer, woken by the force's notice, takes
			// the key meanwhile if the joiner kept trusting an entry the force deleted.
			time.Sleep(wl.p.ttl / 2)
			wl.g.exit(h)
		}
		_ = l.Release(context.Background())
	})
}

var spinSink atomic.Int64

// parallel: a schedule's goroutines may run at once (GOMAXPROCS > 1, SIM_PROCS).
var parallel = runtime.GOMAXPROCS(0) > 1

// spin burns about n/4 ns of CPU (the simulated clock does not move meanwhile).
func spin(n int64) {
	x := int64(0)
	for i := range n {
		x += i ^ x
	}
	spinSink.Store(x)
}

// workFor is a holder's work: d long, or until ctx (the lock's Context) ends first.
func workFor(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
