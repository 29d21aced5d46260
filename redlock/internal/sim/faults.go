package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// params are a schedule's settings, drawn from its seed.
type params struct {
	ttl, nodeTimeout, health time.Duration
	retry, retryTo           []time.Duration // per client: the retry delay's range (jitter)
	retryMax                 time.Duration
	nopipe                   []bool
	lateStart                time.Duration // the last client starts then (a reload meeting young nodes)
	roles                    [][]role      // per client, the workers it runs
	rates                    []float64
	mayEvict                 []bool // per node: maxmemory with volatile-ttl (evictions happen only there)
	offsets                  []time.Duration
	faultEvery               time.Duration
	beyond                   bool
	fastClock                bool // a node's clock runs past the drift bound (beyond)
}

const driftFactor = 0.01

func drawParams(seed uint64, cfg Config) params {
	r := rand.New(rand.NewPCG(seed, 0x9a7a))
	p := params{beyond: cfg.Beyond}
	p.ttl = []time.Duration{300 * time.Millisecond, 500 * time.Millisecond, time.Second}[r.IntN(3)]
	p.nodeTimeout = time.Duration(20+r.IntN(40)) * time.Millisecond
	p.health = time.Second
	for range cfg.Clients {
		d := time.Duration(25+r.IntN(75)) * time.Millisecond
		to := d + time.Duration(50+r.IntN(150))*time.Millisecond
		p.retry, p.retryTo = append(p.retry, d), append(p.retryTo, to)
		p.retryMax = max(p.retryMax, to)
		p.nopipe = append(p.nopipe, r.IntN(3) == 0)
	}
	for range cfg.Clients {
		var rs []role
		for _, i := range r.Perm(len(roles))[:workersPerClient] {
			rs = append(rs, roles[i])
		}
		p.roles = append(p.roles, rs)
	}
	if r.IntN(2) == 0 {
		p.lateStart = time.Duration(r.Int64N(int64(cfg.Duration / 3)))
	}
	for range cfg.Nodes {
		// Within the bound doc.go assumes: a node's clock runs at most drift_factor
		// fast or slow against the clients' (validity takes ttl*drift_factor + 2ms off).
		p.rates = append(p.rates, 1+(r.Float64()*1.6-0.8)*driftFactor)
		p.offsets = append(p.offsets, time.Duration(r.IntN(40000)-20000)*time.Microsecond)
		p.mayEvict = append(p.mayEvict, r.IntN(4) != 0)
	}
	if cfg.Beyond && r.IntN(2) == 0 {
		// Past the bound: a node whose clock runs 3 to 10 times drift_factor fast.
		p.rates[r.IntN(cfg.Nodes)] = 1 + (3+7*r.Float64())*driftFactor
		p.fastClock = true
	}
	p.faultEvery = time.Duration(150+r.IntN(400)) * time.Millisecond
	return p
}

func (p params) String() string {
	return fmt.Sprintf("ttl=%v node_timeout=%v health=%v retry=%v..%v nopipe=%v late_start=%v rates=%.4f",
		p.ttl, p.nodeTimeout, p.health, p.retry, p.retryTo, p.nopipe, p.lateStart, p.rates)
}

func (p params) options(ci int) redlock.Options {
	return redlock.Options{TTL: p.ttl, NodeTimeout: p.nodeTimeout, DriftFactor: driftFactor,
		RetryDelayMin: p.retry[ci], RetryDelayMax: p.retryTo[ci], HealthInterval: p.health,
		DisablePipelining: p.nopipe[ci]}
}

func (w *World) applyParams(p params) {
	for i, n := range w.nodes {
		n.rate, n.offset = p.rates[i], p.offsets[i]
		n.srv.mayEvict = p.mayEvict[i]
		n.srv.startUS = n.clockUS()
	}
}

// faultKind is one kind of fault.
type faultKind int

const (
	fSlow faultKind = iota
	fLoss
	fPartition
	fPause
	fRestart
	fRestartLastSecond
	fFlush
	fEvict
	fScriptFlush
	fDropConns
	fNotices
	fGCPause
	fForce
	fFlushTwice
	fMajorityRestart // beyond the assumptions
	fHold            // a program's acquire: a client takes a key exclusive and holds it (the young program)
	fLag             // a program's lag: what a client and a node send each other meanwhile arrives late (lateValue)
	fFailover        // a lagging replica promoted behind the node's address (replication.go)
	fSnapRestart     // a restart from a snapshot of a moment ago behind a proxy (replication.go)
	fClockJump       // beyond the assumptions: a node's clock jumps forward
	nFaultKinds
)

var faultNames = [...]string{"slow", "loss", "partition", "pause", "restart", "restart-last-second", "flushall",
	"evict", "script-flush", "drop-conns", "notices", "gc-pause", "force-release", "flushall-twice", "majority-restart", "hold", "lag",
	"failover", "snapshot-restart", "clock-jump"}

func (k faultKind) String() string { return faultNames[k] }

// fault is one planned fault.
type fault struct {
	kind   faultKind
	at     time.Duration // since the schedule began
	dur    time.Duration
	node   int
	nodes  []int
	client int
	by     time.Duration
	p      float64
	keys   int
	key    string
	fence  bool // a hold with fencing (its first try runs the acquire script)
	cut    bool // a failover that cuts the clients' connections (else a proxy keeps them)
	// guard: the rollback program's replacement, run only if every client read the node
	// past what comes back (rollback_program.go, rollbackCovered)
	guard bool
	// beyond: past the stated assumptions (SIM_BEYOND): a majority restarted at once, a
	// clock jump, a loss past the budget. Violations of a schedule with one are counted
	// apart (Result.Beyond).
	beyond bool
}

func (f fault) String() string {
	s := fmt.Sprintf("%v %s", f.at, f.kind)
	switch f.kind {
	case fPartition:
		s += fmt.Sprintf(" client %d from nodes %v for %v", f.client, f.nodes, f.dur)
	case fGCPause:
		s += fmt.Sprintf(" client %d for %v", f.client, f.dur)
	case fForce:
		s += fmt.Sprintf(" of %q by client %d", f.key, f.client)
	case fHold:
		s += fmt.Sprintf(" of %q by client %d (wait %v) for %v", f.key, f.client, f.by, f.dur)
		if f.fence {
			s += " with fencing"
		}
	case fLag:
		s += fmt.Sprintf(" client %d and node %d for %v: %v late", f.client, f.node, f.dur, f.by)
	case fEvict:
		s += fmt.Sprintf(" %d keys on nodes %v", f.keys, f.nodes)
	case fMajorityRestart:
		s += fmt.Sprintf(" nodes %v", f.nodes)
	case fFailover:
		s += fmt.Sprintf(" node %d to its replica %v behind, switch %v, connections cut %v", f.node, f.by, f.dur, f.cut)
	case fSnapRestart:
		s += fmt.Sprintf(" node %d from its snapshot of %v ago, down %v, connections kept", f.node, f.by, f.dur)
	case fClockJump:
		s += fmt.Sprintf(" node %d forward by %v", f.node, f.by)
	default:
		s += fmt.Sprintf(" node %d", f.node)
		if f.dur > 0 {
			s += fmt.Sprintf(" for %v", f.dur)
		}
	}
	return s
}

// plan draws the schedule's faults from its seed, all before Duration, in order. Within
// the assumptions, at most N - quorum nodes lose their data (restart, FLUSHALL) within
// a quarantine plus the time nodes count as starting together: more is a majority
// restarted at once (Beyond).
func (w *World) plan(p params) []fault {
	cfg := w.cfg
	r := rand.New(rand.NewPCG(w.seed, 0xfa17))
	var out []fault
	var losses []fault
	spare := cfg.Nodes - (cfg.Nodes/2 + 1)
	window := p.ttl + 3*time.Second + p.health
	lossOK := func(at time.Duration, node int) bool {
		nodes := map[int]bool{node: true}
		for _, l := range losses {
			if at-l.at < window && l.at-at < window {
				nodes[l.node] = true
			}
		}
		return len(nodes) <= spare
	}
	end := cfg.Duration - 100*time.Millisecond
	var program []fault
	var quiet [][2]time.Duration // the programs' spans, where no other fault may run
	if prog, from, to := w.young(p, &losses); len(prog) > 0 {
		program, quiet = append(program, prog...), append(quiet, [2]time.Duration{from, to})
	}
	if prog, from, to := w.lateForce(p, quiet); len(prog) > 0 {
		program, quiet = append(program, prog...), append(quiet, [2]time.Duration{from, to})
	}
	if prog, from, to := w.lateValue(p, quiet); len(prog) > 0 {
		program, quiet = append(program, prog...), append(quiet, [2]time.Duration{from, to})
	}
	// The failover and rollback programs (replication.go, rollback_program.go) after the
	// other programs, before the random faults (which then keep to the loss budget with
	// them).
	for _, program1 := range []func(params, [][2]time.Duration, func(time.Duration, int) bool) ([]fault, time.Duration, time.Duration){
		w.failoverProgram, w.rollbackProgram} {
		if prog, from, to := program1(p, quiet, lossOK); len(prog) > 0 {
			program, quiet = append(program, prog...), append(quiet, [2]time.Duration{from, to})
			for _, f := range prog {
				if f.kind == fFailover || f.kind == fSnapRestart {
					losses = append(losses, f)
				}
			}
		}
	}
	for at := time.Duration(r.Int64N(int64(p.faultEvery))); at < end; at += time.Duration(r.Int64N(int64(2*p.faultEvery))) + time.Millisecond {
		f := fault{kind: faultKind(r.IntN(int(fMajorityRestart))), at: at, node: r.IntN(cfg.Nodes), client: r.IntN(cfg.Clients)}
		if cfg.Beyond {
			switch r.IntN(20) {
			case 0:
				f.kind, f.beyond = fMajorityRestart, true
			case 1:
				f.kind, f.beyond = fClockJump, true
			}
		}
		if cfg.Skip[f.kind.String()] {
			continue
		}
		left := end - at
		switch f.kind {
		case fSlow:
			f.dur = min(time.Duration(50+r.IntN(450))*time.Millisecond, left)
			f.by = time.Duration(r.Int64N(int64(2 * p.nodeTimeout)))
		case fLoss:
			f.dur = min(time.Duration(100+r.IntN(400))*time.Millisecond, left)
			f.p = 0.05 + 0.25*r.Float64()
		case fPartition:
			f.dur = min(time.Duration(50+r.IntN(1450))*time.Millisecond, left)
			f.nodes = r.Perm(cfg.Nodes)[:1+r.IntN(3)]
		case fPause:
			f.dur = min(time.Duration(r.Int64N(int64(3*p.ttl/2)))+20*time.Millisecond, left)
		case fRestart, fRestartLastSecond, fFlush, fFlushTwice:
			if !lossOK(at, f.node) {
				continue
			}
			losses = append(losses, f)
			f.dur = min(time.Duration(20+r.IntN(280))*time.Millisecond, left)
			if f.kind == fFlushTwice {
				// Flushed again a quarantine to a health interval later (a cleanup job run
				// twice): the second loss lands while clients that saw the first one in a
				// grant have not read the node's marker again yet. Meanwhile a client is
				// cut off from two other nodes, so its locks stand on a bare majority
				// that includes the flushed node.
				f.kind = fFlush
				again := f
				again.at = at + p.ttl + time.Duration(r.Int64N(int64(p.health)))
				if again.at < end {
					out = append(out, again)
					others := []int{}
					for _, n := range r.Perm(cfg.Nodes) {
						if n != f.node && len(others) < 2 {
							others = append(others, n)
						}
					}
					cutAt := max(again.at-p.ttl, at)
					out = append(out, fault{kind: fPartition, at: cutAt, client: r.IntN(cfg.Clients), nodes: others,
						dur: min(2*p.ttl+time.Duration(r.Int64N(int64(p.ttl))), end-cutAt)})
				}
			}
		case fEvict:
			f.keys = 1 + r.IntN(3)
			f.nodes = r.Perm(cfg.Nodes)[:1+r.IntN(3)]
		case fNotices:
			f.dur = min(time.Duration(200+r.IntN(800))*time.Millisecond, left)
			f.p = 0.3 + 0.6*r.Float64()
		case fGCPause:
			f.dur = min(p.ttl+time.Duration(r.Int64N(int64(p.ttl))), left)
		case fForce:
			f.key = keys[r.IntN(len(keys))]
		case fMajorityRestart:
			f.nodes = r.Perm(cfg.Nodes)[:cfg.Nodes/2+1]
			f.dur = time.Duration(20+r.IntN(100)) * time.Millisecond
		case fClockJump:
			// Forward by 20 ms to a ttl: keys expire that much early by it (an NTP step,
			// a VM resumed); doc.go assumes clocks that only drift.
			f.by = 20*time.Millisecond + time.Duration(r.Int64N(int64(p.ttl)))
		}
		out = append(out, f)
	}
	if len(program) > 0 {
		// No other fault while a program runs: one that cut a client off from the wrong
		// node, or held up an acquire of the program, would only keep the moment from
		// happening.
		out = slices.DeleteFunc(out, func(f fault) bool {
			return slices.ContainsFunc(quiet, func(q [2]time.Duration) bool { return f.at <= q[1] && f.at+f.dur >= q[0] })
		})
		out = append(out, program...)
	}
	out = w.planReplication(p, out, lossOK, func(f fault) { losses = append(losses, f) }, quiet)
	out = w.allWait(p, out) // after every other fault: it runs only where none does (allwait_program.go)
	slices.SortStableFunc(out, func(a, b fault) int { return int(a.at - b.at) })
	return out
}

// young is the program of a late client meeting a young node (voting.go: young, Fresh
// start), planned before the other faults so that it is never crowded out by their data
// losses (at most N - quorum nodes lose data within a window), from a stream of its own.
// An earlier client A, cut off from two nodes, takes key k on a bare majority {x, y, z}
// and holds it, without renewing, until its validity ends; x restarts empty a moment
// later, a moment before the late client C starts; C's first acquire is k. The other
// nodes of C's majority can only be the two A is cut off from, and x, which lost A's
// lock: x must not vote for C (it began less than a quarantine ago, and it did not start
// together with most nodes: their markers carry another client's mark). With the
// young-node rule or the fresh-start marks taken out, x votes and C holds k while A
// still trusts it (two holders). The marks matter only while the other nodes look young
// to C too (their INFO uptime under two seconds, or markers made less than a quarantine
// ago), so in about half of these schedules.
//
// It returns the program's faults and the span in which no other fault may run.
func (w *World) young(p params, losses *[]fault) (program []fault, quietFrom, quietTo time.Duration) {
	cfg := w.cfg
	if p.lateStart <= 0 || cfg.Skip["young"] || cfg.Clients < 2 || cfg.Nodes < 3 {
		return nil, 0, 0
	}
	r := rand.New(rand.NewPCG(w.seed, 0x7a7e))
	late := cfg.Clients - 1
	down := time.Duration(20+r.IntN(50)) * time.Millisecond
	// x is back up a moment (under ttl/8) before C starts; A takes k ttl/4 before x goes
	// down, waiting at most ttl/8, so its lock (valid until about a ttl after it was
	// taken) is still trusted when C's first acquire, under ttl/8 after C's start,
	// returns.
	at := p.lateStart - down - time.Duration(r.Int64N(int64(p.ttl/8)))
	holdAt := at - p.ttl/4
	node, a, key := r.IntN(cfg.Nodes), r.IntN(late), keys[r.IntN(len(keys))]
	others := []int{}
	for _, n := range r.Perm(cfg.Nodes) {
		if n != node && len(others) < 2 {
			others = append(others, n)
		}
	}
	askAt := p.lateStart + time.Millisecond + time.Duration(r.Int64N(int64(p.ttl/8)))
	if holdAt < 5*time.Millisecond {
		return nil, 0, 0 // C starts too early: A could not take k before x restarts
	}
	f := fault{kind: fRestart, at: at, node: node, dur: down}
	*losses = append(*losses, f)
	cutAt := holdAt - 2*time.Millisecond
	return []fault{
		{kind: fPartition, at: cutAt, client: a, nodes: others, dur: 2 * p.ttl},
		{kind: fHold, at: holdAt, client: a, key: key, by: p.ttl / 8, dur: p.ttl},
		f,
		{kind: fHold, at: askAt, client: late, key: key, by: p.ttl / 2, dur: 2 * time.Millisecond},
	}, cutAt - p.ttl/4, askAt + p.ttl/2
}

// lateForce is the program of an operator's force release whose steps on two nodes are
// held up by a partition of the forcing client F (force.go, "Force release and the
// holders of other clients"). F, cut off from nodes x and y, force releases key k: its
// call gives up on x and y after node_timeout and returns. Then B, cut off from nodes u
// and v, takes k on the bare majority {x, y, w} and holds it without renewing. F's
// partition heals while B holds: what F sent to x and y lands there now. Then C asks
// for k. A force release that deleted in one step would delete B's value on x and y,
// and C would take k on {x, y, u, v} while B still trusts it (two holders; B asked after
// the force returned, so the ledger does not excuse it). The force release reads first
// and deletes only what its read found, within its call: the late read changes nothing.
// It is drawn in half the schedules, from a stream of its own, away from the young
// program's span.
func (w *World) lateForce(p params, quiet [][2]time.Duration) (program []fault, quietFrom, quietTo time.Duration) {
	cfg := w.cfg
	if cfg.Skip["late-force"] || cfg.Clients < 3 || cfg.Nodes < 5 {
		return nil, 0, 0
	}
	r := rand.New(rand.NewPCG(w.seed, 0xf0ce))
	if r.IntN(2) != 0 {
		return nil, 0, 0
	}
	nt, ttl := p.nodeTimeout, p.ttl
	start := time.Second
	if p.lateStart > 0 {
		start = max(start, p.lateStart+200*time.Millisecond) // every client has started
	}
	latest := cfg.Duration - 2*ttl - 4*nt
	if latest <= start {
		return nil, 0, 0
	}
	at := start + time.Duration(r.Int64N(int64(latest-start)))
	cl := r.Perm(cfg.Clients)
	f, b, c := cl[0], cl[1], cl[2]
	nodes := r.Perm(cfg.Nodes)
	xy, uv := nodes[:2], nodes[3:5]
	key := keys[r.IntN(len(keys))]
	askB := at + 2*nt + 5*time.Millisecond // after F's call gave up on x and y
	heal := askB + ttl/4
	askC := heal + 5*time.Millisecond
	quietFrom, quietTo = at-ttl/4, askC+ttl
	for _, q := range quiet {
		if quietFrom <= q[1] && quietTo >= q[0] {
			return nil, 0, 0
		}
	}
	return []fault{
		{kind: fPartition, at: at, client: f, nodes: xy, dur: heal - at},
		{kind: fForce, at: at + time.Millisecond, client: f, key: key},
		{kind: fPartition, at: askB - 2*time.Millisecond, client: b, nodes: uv, dur: 2 * ttl},
		{kind: fHold, at: askB, client: b, key: key, by: ttl / 8, dur: ttl},
		{kind: fHold, at: askC, client: c, key: key, by: ttl / 2, dur: 2 * time.Millisecond},
	}, quietFrom, quietTo
}

// lateValue is the program of an earlier attempt's SET that lands late, after a later
// attempt of the same Acquire call was granted (scripts.go, acquireScript: "A later
// attempt's value is never taken over"). A, cut off from nodes u and v, asks for a key
// of the program's own with fencing (so that its first try runs the acquire script too,
// not a plain SET NX). What A and node x send each other from then until a node timeout
// and a half later arrives late (a path that holds a flow's segments, TCP retransmitting
// them after its backoff); what they send after that, on time. So A's first round gets y
// and z only: x's reply is late, u and v are cut off. It fails after a node timeout
// (unavailable: fewer than a quorum answered), its batch costs A's connection to x, and
// its give-back goes to x on a new connection, within the lag: late too, it times out
// two node timeouts in. Just after, another acquire of A (its other work) gets an answer
// from x, so that x is no longer silent (a round does not wait for a silent node, and
// with u and v failing at once it would count x as a refusal). After a retry delay A
// tries again: the second round's SET goes to x on a new connection and lands at once,
// and A holds the key on the bare majority {x, y, z}. Then the first round's SET lands on
// x, and a node timeout after it that round's release. An acquire script that took over
// any value of the same call would replace the second attempt's value on x with the
// first's, and the release would delete it: x is free under A, and C, asking for the key
// once the release landed, takes it on {x, u, v} while A still trusts it (two holders).
// The script refuses a later attempt's value: the late SET changes nothing, and the
// release finds nothing of its own to delete. A is the client with the longest retry
// delay (its second round must start after x answered the other acquire). It is drawn in
// half the schedules, from a stream of its own, away from the other programs' spans.
func (w *World) lateValue(p params, quiet [][2]time.Duration) (program []fault, quietFrom, quietTo time.Duration) {
	cfg := w.cfg
	if cfg.Skip["late-value"] || cfg.Clients < 2 || cfg.Nodes < 5 {
		return nil, 0, 0
	}
	r := rand.New(rand.NewPCG(w.seed, 0x1a7e))
	if r.IntN(2) != 0 {
		return nil, 0, 0
	}
	cl := r.Perm(cfg.Clients)
	a := slices.MaxFunc(cl, func(i, j int) int { return int(p.retry[i] - p.retry[j]) })
	c := cl[0]
	if c == a {
		c = cl[1]
	}
	nodes := r.Perm(cfg.Nodes)
	x, uv := nodes[0], nodes[3:5]
	nt, ttl := p.nodeTimeout, p.ttl
	// A's second round starts a retry delay (p.retry[a] to p.retryTo[a]) after the first
	// failed, a node timeout after it began, and its SET goes to x by then, or once the
	// release's batch timed out (2nt). The first round's SET lands after it, by a margin,
	// and its release (sent at nt) a node timeout later; C asks just after that.
	second := nt + max(p.retryTo[a], nt)
	by := second + ttl/16
	askC := nt + by + 5*time.Millisecond
	start := time.Second
	if p.lateStart > 0 {
		start = max(start, p.lateStart+200*time.Millisecond) // every client has started
	}
	latest := cfg.Duration - 100*time.Millisecond - askC - ttl
	if latest <= start {
		return nil, 0, 0
	}
	at := start + time.Duration(r.Int64N(int64(latest-start)))
	quietFrom, quietTo = at-ttl/4, at+askC+ttl
	for _, q := range quiet {
		if quietFrom <= q[1] && quietTo >= q[0] {
			return nil, 0, 0
		}
	}
	return []fault{
		{kind: fPartition, at: at - 2*time.Millisecond, client: a, nodes: uv, dur: 2 * ttl},
		{kind: fLag, at: at - time.Millisecond, client: a, node: x, dur: nt + nt/2 + time.Millisecond, by: by},
		{kind: fHold, at: at, client: a, key: lateValueKey, by: ttl / 2, dur: ttl, fence: true},
		{kind: fHold, at: at + 2*nt + time.Millisecond, client: a, key: lateOtherKey, by: ttl / 8, dur: 2 * time.Millisecond},
		{kind: fHold, at: at + askC, client: c, key: lateValueKey, by: ttl / 2, dur: 2 * time.Millisecond},
	}, quietFrom, quietTo
}

// The late-value program's keys, which no worker asks for: on the workers' keys A's
// first round most often met a holder (busy: no grants on y and z that fail for want of
// x) or a lock its own client handed on (no round at all). lateOtherKey is A's other work.
const (
	lateValueKey = "late"
	lateOtherKey = "late-other"
)

// fault starts one planned fault (world loop); faults with a duration end by events of
// their own.
func (w *World) fault(f fault) {
	w.note("fault", "%s", f)
	now := time.Now()
	switch f.kind {
	case fSlow:
		w.mu.Lock()
		for ci := range w.links {
			l := w.links[ci][f.node]
			l.slowTo, l.slowBy = now.Add(f.dur), f.by
		}
		w.mu.Unlock()
	case fLoss:
		w.setLinks(f.node, func(l *link) { l.loss = f.p })
		w.at(now.Add(f.dur), func() { w.setLinks(f.node, func(l *link) { l.loss = 0 }) })
	case fNotices:
		w.setLinks(f.node, func(l *link) { l.noticeP = f.p })
		w.at(now.Add(f.dur), func() { w.setLinks(f.node, func(l *link) { l.noticeP = 0 }) })
	case fPartition:
		w.mu.Lock()
		for _, ni := range f.nodes {
			w.cuts = append(w.cuts, cut{client: f.client, node: ni, from: now, to: now.Add(f.dur)})
		}
		w.mu.Unlock()
	case fGCPause:
		w.mu.Lock()
		w.cuts = append(w.cuts, cut{client: f.client, node: -1, from: now, to: now.Add(f.dur)})
		w.mu.Unlock()
		w.gc(f.client, now.Add(f.dur))
	case fPause:
		n := w.nodes[f.node]
		w.mu.Lock()
		n.paused = true
		w.mu.Unlock()
		w.at(now.Add(f.dur), func() { w.resume(n) })
	case fRestart, fRestartLastSecond:
		w.restart(w.nodes[f.node], f.dur, f.kind == fRestartLastSecond)
	case fMajorityRestart:
		for _, ni := range f.nodes {
			w.restart(w.nodes[ni], f.dur, false)
		}
	case fFlush:
		w.nodes[f.node].srv.data = map[string]*value{}
		w.lost(w.nodes[f.node])
	case fClockJump:
		w.nodes[f.node].offset += f.by
	case fFailover:
		w.failover(f)
	case fSnapRestart:
		w.snapRestart(f)
	case fEvict:
		for _, ni := range f.nodes {
			w.nodes[ni].evict(f.keys)
		}
	case fScriptFlush:
		w.nodes[f.node].srv.scripts = map[string]bool{}
	case fDropConns:
		w.dropConns(w.nodes[f.node])
	case fForce:
		w.force(f.client, f.key)
	case fHold:
		w.hold(f)
	case fLag:
		w.mu.Lock()
		l := w.links[f.client][f.node]
		l.lagFrom, l.lagTo, l.lagBy = now, now.Add(f.dur), f.by
		w.mu.Unlock()
	}
	w.judge()
}

func (w *World) setLinks(node int, f func(*link)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ci := range w.links {
		f(w.links[ci][node])
	}
}

// resume ends a node's pause: what reached it meanwhile runs now, in order.
func (w *World) resume(n *Node) {
	w.mu.Lock()
	n.paused = false
	w.mu.Unlock()
	backlog := n.backlog
	n.backlog = nil
	for _, p := range backlog {
		if p.c.accepted && p.c.epoch == n.epoch && p.c.sess != nil && !p.c.sess.gone {
			w.process(p.c, p.data)
		}
	}
}

// restart kills the node (every connection reset, what was queued lost), keeps it down
// for down, and starts it again without its data, or with its data of a second ago
// (AOF everysec).
func (w *World) restart(n *Node, down time.Duration, lastSecond bool) {
	w.mu.Lock()
	n.down = true
	n.paused = false
	n.epoch++
	w.mu.Unlock()
	n.backlog = nil
	w.dropConns(n)
	w.lost(n)
	var keep map[string]*value
	if lastSecond {
		keep = n.snapAt(time.Now().Add(-time.Second))
	}
	w.at(time.Now().Add(down), func() {
		n.srv.reset(w.runID(n))
		if keep != nil {
			n.srv.data = keep
		}
		w.mu.Lock()
		n.down = false
		w.mu.Unlock()
	})
}

// snapAt returns a copy of the node's data as it was at t, from the snapshots the node
// takes every 100ms (restart-last-second).
func (n *Node) snapAt(t time.Time) map[string]*value {
	slot := int(t.Sub(n.w.t0) / (100 * time.Millisecond))
	for s := slot; s >= 0 && s > slot-20; s-- {
		if d, ok := n.snaps[s]; ok {
			return copyData(d)
		}
	}
	return nil
}

func copyData(d map[string]*value) map[string]*value {
	out := make(map[string]*value, len(d))
	for k, v := range d {
		c := *v
		if v.z != nil {
			c.z = make(map[string]float64, len(v.z))
			for m, s := range v.z {
				c.z[m] = s
			}
		}
		out[k] = &c
	}
	return out
}

// snapshots keeps a copy of every node's data every 100ms, for restarts that lose the
// last second (only when the plan has one).
func (w *World) snapshots(until time.Time) {
	var tick func()
	tick = func() {
		now := time.Now()
		slot := int(now.Sub(w.t0) / (100 * time.Millisecond))
		for _, n := range w.nodes {
			n.snaps[slot] = copyData(n.srv.data)
			delete(n.snaps, slot-20)
		}
		if next := now.Add(100 * time.Millisecond); next.Before(until) {
			w.at(next, tick)
		}
	}
	w.at(time.Now(), tick)
}

// evict drops up to k keys as volatile-ttl would under memory pressure: the keys closest
// to expiry first (locks, marks, readers), never the data marker (touched every health
// check, so spared by LRU and LFU too), and counts them in INFO's evicted_keys.
func (n *Node) evict(k int) {
	s := n.srv
	if !s.mayEvict {
		return // noeviction: it refuses writes instead
	}
	s.inScript = false
	type cand struct {
		key string
		exp int64
	}
	var cs []cand
	for key, v := range s.data {
		if s.lookup(key) == nil || v.exp == 0 || isMarker(key) {
			continue
		}
		cs = append(cs, cand{key, v.exp})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.exp != b.exp {
			return int(a.exp - b.exp)
		}
		if a.key < b.key {
			return -1
		}
		return 1
	})
	for i := 0; i < k && i < len(cs); i++ {
		delete(s.data, cs[i].key)
		s.evicted++
		n.w.lost(n)
		n.w.note("fault", "node %d evicted %q", n.idx, cs[i].key)
	}
}

func isMarker(k string) bool {
	return len(k) >= 12 && k[len(k)-12:] == "\x00data_marker"
}
