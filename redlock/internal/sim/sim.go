package sim

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/caddy-redlock/caddy-redlock/redlock"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/chance"
)

// Config is one schedule's shape; the seed draws everything else.
type Config struct {
	Nodes, Clients int
	// Duration is the simulated time with faults and load; Quiet follows it, with load
	// and no faults, for the liveness checks.
	Duration, Quiet time.Duration
	// Beyond draws faults past the stated assumptions too (clock drift past the bound, a
	// majority restarted empty at once): their violations are expected and counted.
	Beyond bool
	// Trace keeps a trace of every command and fault (replays).
	Trace bool
	// Skip leaves these kinds of faults out (names as in faultNames: "evict", ...).
	Skip map[string]bool
	// Record keeps every command node 0 ran, in order (the conformance test replays them
	// on a real redis-server).
	Record bool
	// Fingerprint hashes every command the nodes ran (Result.Fingerprint): replays
	// compare them. It costs a few percent of a schedule's CPU.
	Fingerprint bool
	// Shrinking (runner_test.go, SIM_SHRINK): faults of the plan left out (their places
	// in it, from 0), workers left out ("c0/excl"), and no long holds by the workers.
	DropFaults  map[int]bool
	DropWorkers map[string]bool
	ShortHolds  bool
}

// DefaultConfig is what make sim runs: 5 nodes, 3 clients, 10 simulated seconds of
// faults and 3 quiet ones.
func DefaultConfig() Config {
	return Config{Nodes: 5, Clients: 3, Duration: 10 * time.Second, Quiet: 3 * time.Second}
}

// Result is what one schedule did and found.
type Result struct {
	Seed       uint64
	Nth        int // its place among the seeds one worker ran (time to find)
	Violations []Violation
	Ops        int64 // lock operations: acquires that returned a lock, and releases
	Acquires   int64 // Acquire and AcquireAll calls
	Joins      int64 // readers that joined their client's group under a force release
	Commands   int64 // commands the nodes ran
	Faults     int
	Stale      [2]int // fenced writes of paused holders: refused, accepted (nobody wrote since)
	// Beyond counts the schedule's faults past the stated assumptions (SIM_BEYOND: a
	// clock past the drift bound, a clock jump, a majority restarted, a loss past the
	// budget): its violations are counted apart, as expected.
	Beyond int
	// Rollbacks and RollbacksLeftOut: the rollback program's replacements run, and left
	// out because a client had not read the node far enough past what came back
	// (rollback_program.go).
	Rollbacks, RollbacksLeftOut int
	// Fingerprint is a hash of every command the nodes ran, in order, with its instant,
	// node and connection: two runs of a seed agree on it when they ran the same
	// schedule. Equivalent is the nodes' own (World.mixCmd): every node ran the same
	// commands at the same instants, up to the names of random values.
	Fingerprint, Equivalent uint64
	Trace                   []string
	Plan, Workers           []string // the faults (as run) and the workers
	Recorded                [][]string
	Params                  string
}

// Run runs one schedule inside the calling synctest bubble (synctest.Test). It returns
// when every client is closed and the world stopped.
func Run(seed uint64, cfg Config) Result {
	w := newWorld(seed, cfg)
	// The lock's random choices (retry jitter, a limited key's first place) drawn from
	// the seed, the instant and how many were drawn before at that instant, as the
	// links' (world.go): a replay makes the same ones. The count tells apart the
	// goroutines that draw at one instant: two waiters woken by one notice that both
	// find the key busy retry at different instants, not at one where synctest would
	// wake them in an order of its own (it shuffles timers that fire together).
	pick := &link{seed: seed ^ 0xc4a4ce, ci: 99, ni: 99}
	var pickMu sync.Mutex
	var pickAt time.Time
	var picks uint64
	defer chance.Set(func(n uint64) uint64 {
		pickMu.Lock()
		defer pickMu.Unlock()
		now := time.Now()
		if !now.Equal(pickAt) {
			pickAt, picks = now, 0
		}
		picks++
		return pick.draw(now, n^picks<<32) % n
	})()
	if cfg.Trace {
		w.trace = &tracer{}
	}
	p := drawParams(seed, cfg)
	w.applyParams(p)
	for i, hide := range drawReplicaPlan(seed, cfg.Nodes).hideRunID {
		w.nodes[i].srv.hideRunID = hide && !cfg.Skip["hidden-run-id"]
	}
	plan := w.plan(p)
	if len(cfg.DropFaults) > 0 {
		kept := plan[:0:0]
		for i, f := range plan {
			if !cfg.DropFaults[i] {
				kept = append(kept, f)
			}
		}
		plan = kept
	}
	res := Result{Seed: seed, Params: p.String(), Faults: len(plan)}
	for _, f := range plan {
		res.Plan = append(res.Plan, f.String())
	}
	for ci, rs := range p.roles {
		for _, r := range rs {
			if who := fmt.Sprintf("c%d/%s", ci, r.name); !cfg.DropWorkers[who] {
				res.Workers = append(res.Workers, who)
			}
		}
	}
	for _, f := range plan {
		if f.beyond {
			res.Beyond++
		}
	}
	if p.fastClock {
		res.Beyond++
	}

	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		w.loop(stop)
	}()
	g := newLedger(w.t0, w.lastFault)
	g.forceSlack = 3 * p.nodeTimeout
	w.g, w.quarantine = g, p.ttl+time.Duration(float64(p.ttl)*driftFactor)+2*time.Millisecond
	w.lead = min(100*time.Millisecond, p.ttl/4) // redlock's tokenLead (MaxTTL is the ttl)
	g.onEnter = func() { w.at(time.Now(), w.judge) }
	if w.trace != nil {
		g.note = func(format string, args ...any) { w.note("lock", format, args...) }
		w.note("param", "%s", res.Params)
	}
	for _, f := range plan {
		if f.kind == fFailover || f.kind == fSnapRestart {
			w.at(w.t0.Add(f.at-f.by), func() { w.captureReplica(f) })
		}
		w.at(w.t0.Add(f.at), func() { w.fault(f) })
	}

	clients := make([]*redlock.Client, cfg.Clients)
	start := func(ci int) *redlock.Client { return w.client(ci, p.options(ci)) }
	if slices.ContainsFunc(plan, func(f fault) bool { return f.kind == fRestartLastSecond }) {
		w.snapshots(w.t0.Add(cfg.Duration))
	}

	wl := &workload{w: w, p: p, g: g, clients: clients, end: w.t0.Add(cfg.Duration),
		stop: w.t0.Add(cfg.Duration + cfg.Quiet/2)}
	wl.run(start)

	// Liveness: every key free now (the load stopped and released): a free key is taken
	// within ttl + quarantine from here.
	wl.probeFree()

	for _, c := range clients {
		_ = c.Close()
	}
	// Every lock was released: the nodes' lock state lapses within a ttl and the marks'
	// lives; then it must be idle.
	time.Sleep(p.ttl + 2*(p.retryMax+p.nodeTimeout) + 50*time.Millisecond)
	w.checkIdle(g)
	close(stop)
	<-loopDone
	res.Violations = g.violations
	res.Ops = wl.ops.Load()
	res.Acquires = wl.acquires.Load()
	res.Joins = wl.joins.Load()
	res.Commands = w.stats.requests.Load()
	res.Stale = [2]int{g.staleRefused, g.staleAccepted}
	res.Rollbacks, res.RollbacksLeftOut = w.rollbacks, w.rollbacksLeftOut
	res.Fingerprint, res.Equivalent = w.fingerprints()
	if w.trace != nil {
		res.Trace = w.trace.lines
	}
	res.Recorded = w.recorded
	return res
}

// client makes client ci's redlock.Client on the world's nodes: go-redis dials through
// the simulated network.
func (w *World) client(ci int, opt redlock.Options) *redlock.Client {
	urls := make([]string, len(w.nodes))
	for i, n := range w.nodes {
		urls[i] = "redis://" + n.addr
	}
	opt.ClientBuilder = func(o *redis.Options) (*redis.Client, error) {
		var node *Node
		for _, n := range w.nodes {
			if n.addr == o.Addr {
				node = n
			}
		}
		if node == nil {
			return nil, fmt.Errorf("sim: no node %q", o.Addr)
		}
		// No maintenance notifications (RESP3 only): their set-up resolves the host
		// name through the process's resolver, whose state outlives a bubble.
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		// Small buffers: go-redis allocates them per connection, and the simulated
		// commands are small (a big buffer per dial cost a tenth of the CPU).
		o.ReadBufferSize, o.WriteBufferSize = 4096, 4096
		o.PipelineReadBufferSize, o.PipelineWriteBufferSize = 4096, 4096
		timeout := o.DialTimeout // as net.Dialer's Timeout: go-redis leaves it to the Dialer
		o.Dialer = func(ctx context.Context, _, _ string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return w.dial(ctx, ci, node)
		}
		return redis.NewClient(o), nil
	}
	opt.Logger = slog.New(slog.DiscardHandler)
	c, err := redlock.New(urls, opt)
	if err != nil {
		panic(err)
	}
	return c
}

// Warm teaches the process the scripts' digests, inside the calling synctest bubble: a
// client on one simulated node connects (its first connection asks for them) and
// closes. The digests are process-wide (transport/digest.go): without this the first
// schedule a process runs sends its scripts by EVAL and later ones by EVALSHA, and a seed
// replayed alone (SIM_SEED) would run another schedule than it ran among others. Every
// schedule then starts with them known; restarts and SCRIPT FLUSH still send EVAL.
func Warm() {
	w := newWorld(0, Config{Nodes: 1, Clients: 1})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.loop(stop)
	}()
	c := w.client(0, redlock.Options{TTL: time.Second, NodeTimeout: 50 * time.Millisecond, HealthInterval: time.Second})
	time.Sleep(100 * time.Millisecond)
	_ = c.Close()
	time.Sleep(time.Second)
	close(stop)
	<-done
}

// checkIdle reads every node's keyspace (through the world loop): no lock name, reader
// set, mark or turn may be left once every lock was released and lapsed.
func (w *World) checkIdle(g *ledger) {
	done := make(chan struct{})
	w.at(time.Now(), func() {
		defer close(done)
		for _, n := range w.nodes {
			n.srv.inScript = false
			for k := range n.srv.data {
				if n.srv.lookup(k) == nil {
					continue
				}
				switch {
				case strings.Contains(k, "\x00fence"), strings.Contains(k, "\x00data_marker"), strings.Contains(k, "\x00max_ttl"), strings.Contains(k, "\x00write_seq"):
					continue
				}
				g.violation("idle", "node %d still has %q (pttl %dms) after every lock was released", n.idx, k, n.srv.data[k].exp-n.srv.now())
			}
		}
	})
	<-done
}

// LeakCheck reports the goroutines of the calling bubble other than the caller, once
// every other one is blocked (call it last, after synctest.Wait).
func LeakCheck() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	head := string(self[:strings.IndexByte(string(self), '\n')])
	bubble := head[strings.Index(head, "synctest bubble"):]
	bubble = strings.TrimSuffix(bubble, "]:")
	var out []string
	for _, gr := range strings.Split(string(buf), "\n\n") {
		first := gr[:max(strings.IndexByte(gr, '\n'), 0)]
		if strings.Contains(first, bubble+"]") || strings.Contains(first, bubble+",") {
			if first == head || strings.Contains(gr, "internal/synctest.Run") || strings.Contains(gr, "testing/synctest.testingSynctestTest") {
				continue
			}
			out = append(out, gr)
		}
	}
	return out
}

// tracer keeps a schedule's trace (replays with SIM_TRACE).
type tracer struct {
	mu    sync.Mutex
	lines []string
}

func (w *World) note(kind, format string, args ...any) {
	if kind == "fault" {
		s := fmt.Sprintf(format, args...)
		w.last.Store(&s)
	}
	if w.trace == nil {
		return
	}
	s := fmt.Sprintf("%10.6f %-5s ", time.Since(w.t0).Seconds(), kind) + fmt.Sprintf(format, args...)
	w.trace.mu.Lock()
	w.trace.lines = append(w.trace.lines, s)
	w.trace.mu.Unlock()
}

var noFault = "none"

func (w *World) lastFault() string {
	if p := w.last.Load(); p != nil {
		return *p
	}
	return noFault
}
