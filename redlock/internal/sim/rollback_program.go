package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The rollback program: a node goes back in time unseen (a lagging replica promoted, or
// a restart from a snapshot, behind a proxy that keeps the clients' connections) after
// every client has read its write sequence past the point it goes back to: the case the
// write sequence's check guarantees (redlock/rollback.go, "Claim" (a)), so it is drawn
// within the assumptions. The failover program (replication.go) is the other case: its
// asking client has not read the node since, which no client can tell (past the
// assumptions, under SIM_BEYOND only).
//
// A client A, cut off from nodes u and v, takes the program's key k on the bare majority
// {x, y, z} and holds it without renewing. Just before a quarter ttl later, every client
// (A too) takes a key of its own for a ms: a grant of x, so its reading of x's sequence
// is past A's grant. Then x is replaced, the proxy keeping the connections, by a process
// with x's data of 5 ms to a ttl before A's grant (a lagging replica promoted, or a
// restart from a snapshot); a moment after it is back, client C asks for k. Only x can
// give C a majority ({x, u, v}): C's grant from x returns a sequence not above what C
// read before, so C refuses it, quarantines x and deletes its marker (which fails the
// other clients' next grants from x). Without the check (testdata/reverts/rollback.patch)
// C holds k while A trusts it: two holders.
//
// What the check guarantees needs every client's reading to stay above what the new
// process's sequence reaches before that client's next grant or health check there
// (renewals advance it and are not judged: rollback.go, "Not guaranteed" (2)). So the
// replacement runs only if, at that instant, every client has read x's sequence at least
// rollbackMargin above the sequence in the data that comes back (read from the client by
// reflection, as the state judge reads a lock's names: backing.go); else it is left out
// (noted in the trace, counted in Result.RollbacksLeftOut). The program's own grants
// (A's and the reads) make most of that margin; the replica's point up to a ttl before
// A's grant adds the other clients' advances meanwhile.

// rollbackKey is the program's key, which no worker asks for: A's grant is at once and
// C meets only A there. rollbackReadKey(ci) is client ci's read of x.
const rollbackKey = "rollback"

func rollbackReadKey(ci int) string { return "rollback-read-" + strconv.Itoa(ci) }

// rollbackMargin is how far every client's reading must be above the sequence that comes
// back: more advances (renewals, grants) than the new process runs between the
// replacement and the first refusal that tells the others (C asks within 12 ms and a
// sixteenth of a ttl of it). Measured over 91 replacements with a margin of 3 (seeds
// 4000000-4000299): in the 20 ms after the new process was up it ran 0 to 3 advances (C's
// refused grant among them: once as many as the smallest margin, 3), in 100 ms up to 5
// (5 times as many as the smallest margin, 3 or 4). No violation came of it, but 6 keeps
// the first refusal ahead of them.
const rollbackMargin = 6

// rollbackProgram plans the program (see above), from a stream of its own, in half the
// schedules, away from the other programs' spans and within the loss budget.
func (w *World) rollbackProgram(p params, quiet [][2]time.Duration, lossOK func(time.Duration, int) bool) (program []fault, quietFrom, quietTo time.Duration) {
	cfg := w.cfg
	if cfg.Skip["rollback-program"] || cfg.Clients < 2 || cfg.Nodes < 5 {
		return nil, 0, 0
	}
	r := rand.New(rand.NewPCG(w.seed, 0x5eb0))
	if r.IntN(2) != 0 {
		return nil, 0, 0
	}
	ttl := p.ttl
	start := max(600*time.Millisecond, ttl+100*time.Millisecond) // the replica's point after the clients' start
	if p.lateStart > 0 {
		start = max(start, p.lateStart+200*time.Millisecond) // every client has started
	}
	latest := cfg.Duration - 2*ttl
	if latest <= start {
		return nil, 0, 0
	}
	at := start + time.Duration(r.Int64N(int64(latest-start)))
	cl := r.Perm(cfg.Clients)
	a, c := cl[0], cl[1]
	nodes := r.Perm(cfg.Nodes)
	x, uv := nodes[0], nodes[3:5]
	f := fault{kind: fFailover, node: x, at: at + ttl/4, dur: time.Duration(r.IntN(10)) * time.Millisecond, guard: true}
	if r.IntN(3) == 0 {
		f.kind, f.dur = fSnapRestart, time.Duration(5+r.IntN(10))*time.Millisecond
	}
	// The replica (the snapshot) is of 5 ms to a ttl before A's grant.
	f.by = ttl/4 + 5*time.Millisecond + time.Duration(r.Int64N(int64(ttl)))
	askC := f.at + f.dur + 2*time.Millisecond + time.Duration(r.Int64N(int64(ttl/16)))
	quietFrom, quietTo = at-ttl/4, askC+ttl
	for _, q := range quiet {
		if quietFrom <= q[1] && quietTo >= q[0] {
			return nil, 0, 0
		}
	}
	if !lossOK(f.at, x) {
		return nil, 0, 0 // within the budget only: the check's guarantee is for one node
	}
	program = []fault{
		{kind: fPartition, at: at - 2*time.Millisecond, client: a, nodes: uv, dur: 2 * ttl},
		{kind: fHold, at: at, client: a, key: rollbackKey, by: ttl / 8, dur: ttl},
	}
	for i, d := range cl {
		program = append(program, fault{kind: fHold, at: f.at - ttl/16 - time.Duration(len(cl)-i)*time.Millisecond, client: d,
			key: rollbackReadKey(d), by: ttl / 32, dur: time.Millisecond})
	}
	program = append(program, f,
		fault{kind: fHold, at: askC, client: c, key: rollbackKey, by: ttl / 2, dur: 2 * time.Millisecond})
	return program, quietFrom, quietTo
}

// rollbackCovered reports whether every client has read node x's write sequence at least
// rollbackMargin above the sequence in data (what comes back), and says why not (world
// loop, at the replacement).
func (w *World) rollbackCovered(x int, data map[string]*value) (bool, string) {
	if w.seqRead == nil {
		return false, "no clients"
	}
	var back int64
	for k, v := range data {
		if strings.HasSuffix(k, "\x00write_seq") {
			back, _ = strconv.ParseInt(v.s, 10, 64)
		}
	}
	for ci := range w.cfg.Clients {
		read, ok := w.seqRead(ci, w.nodes[x].addr)
		if !ok {
			return false, fmt.Sprintf("client %d not started", ci)
		}
		if read < back+rollbackMargin {
			return false, fmt.Sprintf("client %d read node %d's sequence at %d, %d comes back", ci, x, read, back)
		}
	}
	return true, ""
}

// clientSeqRead is the highest write sequence client c took in from the node at addr
// (redlock/rollback.go: node.seq), read by reflection and loaded atomically (the
// client's goroutines write it). A rename in redlock fails every schedule that draws the
// rollback program at once.
func clientSeqRead(c *redlock.Client, addr string) int64 {
	nodes := reflect.ValueOf(c).Elem().FieldByName("nodes")
	if !nodes.IsValid() || nodes.Kind() != reflect.Slice {
		panic("sim: redlock.Client has no field nodes: the rollback program (rollback_program.go) reads it")
	}
	for i := range nodes.Len() {
		n := nodes.Index(i).Elem()
		a, seq := n.FieldByName("addr"), n.FieldByName("seq")
		if !a.IsValid() || !seq.IsValid() || seq.Type() != reflect.TypeFor[atomic.Int64]() {
			panic("sim: redlock's node has no addr or seq (atomic.Int64): the rollback program (rollback_program.go) reads them")
		}
		if a.String() == addr {
			return (*atomic.Int64)(unsafe.Pointer(seq.UnsafeAddr())).Load()
		}
	}
	panic(fmt.Sprintf("sim: redlock.Client has no node %q", addr))
}

// rollbackRuns reports whether a replacement runs: always, but the rollback program's,
// which runs only if every client read the node past what comes back (world loop).
func (w *World) rollbackRuns(f fault, data map[string]*value) bool {
	if !f.guard {
		return true
	}
	ok, why := w.rollbackCovered(f.node, data)
	if !ok {
		w.rollbacksLeftOut++
		w.note("fault", "rollback program: node %d not replaced: %s", f.node, why)
		return false
	}
	w.rollbacks++
	return true
}
