package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// One Redlock round (acquire.go runs the loop around it): what a round asks (try), how
// it is sent to every node at once (sendRound), collected as the replies come (round),
// tallied against the quorum and the validity (tallyRound, voting.go's rule), fenced, and
// given back on the nodes that granted when it failed (giveBack).

// round collects the node replies of one acquire round as the batchers deliver them. The
// caller is woken once, when the outcome is known (a quorum of votes, or too many refusals
// for one), not once per reply, and the round settles (every node replied) without a
// goroutine of its own: on the hot path of every request, each wake-up counts.
type round struct {
	c       *Client
	sent    time.Time  // when the calls went out: each reply's round trip counts from here
	kinds   []sentKind // what went to each node, for reading its reply (Deliver)
	kindBuf [8]sentKind
	// seqs is each node's highest write sequence this client had read when the round was
	// sent (rollback.go): a grant is judged against it.
	seqs    []seqReading
	seqBuf  [8]seqReading
	mu      sync.Mutex
	replies []nodeReply   // in arrival order
	decided bool          // decide is closed
	decide  chan struct{} // closed once the outcome is known, or every node replied
	settled chan struct{} // closed once every node replied
}

// sentKind is what a round sent a node.
type sentKind uint8

const (
	sentScript sentKind = iota // the acquire script (scriptReply)
	sentPlain                  // a plain SET with the marker's GET behind it (plainReply)
	sentEvict                  // the script, asked for the eviction count too
)

func newRound(c *Client) *round {
	r := &round{c: c, replies: make([]nodeReply, 0, len(c.nodes)),
		decide: make(chan struct{}), settled: make(chan struct{})}
	r.kinds = r.kindBuf[:0]
	if len(c.nodes) > len(r.kindBuf) {
		r.kinds = make([]sentKind, 0, len(c.nodes))
	}
	r.kinds = r.kinds[:len(c.nodes)]
	r.seqs = r.seqBuf[:0]
	if len(c.nodes) > len(r.seqBuf) {
		r.seqs = make([]seqReading, 0, len(c.nodes))
	}
	r.seqs = r.seqs[:len(c.nodes)]
	return r
}

// Deliver takes node i's reply to the round's acquire (transport.Sink): on a batcher's
// goroutine, never blocking.
func (r *round) Deliver(i int, reply transport.Reply) {
	nd, kind := r.c.nodes[i], r.kinds[i]
	var rep nodeReply
	if kind == sentPlain {
		rep = plainReply(reply)
	} else {
		rep = scriptReply(reply)
	}
	rep.seqBefore = r.seqs[i]
	nd.record("acquire", time.Since(r.sent), rep.err)
	if kind == sentEvict && rep.ok && rep.evicted < 0 {
		nd.warnNoEvictions()
	}
	r.add(acquireReply(i, nd, rep))
}

// add records one node's reply; it never blocks (it runs on a batcher's goroutine).
func (r *round) add(rep nodeReply) {
	r.mu.Lock()
	r.replies = append(r.replies, rep)
	all := len(r.replies) == len(r.c.nodes)
	if !r.decided && (all || r.decisiveLocked()) {
		r.decided = true
		close(r.decide)
	}
	r.mu.Unlock()
	if all {
		close(r.settled)
	}
}

// decisiveLocked reports whether the replies so far decide the round: a quorum of votes
// (a young node's grant votes only on a fresh start), or more refusals and failures than
// a quorum can spare. A young node's grant that does not vote yet is neither: it may
// still, as more nodes are seen.
//
// A node that is silent (its last command got no answer: paused, unreachable) and has not
// replied yet counts as a refusal: waiting for it would cost every split round (say 2
// grants and 2 refusals of 5, two instances contending for a hot key) a whole node
// timeout, for a vote that is not coming. Counting a possible grant as a refusal can only
// fail a round, never win one: safe. Its reply, if it comes, is still counted by the
// tally, and its next answer clears it.
func (r *round) decisiveLocked() bool {
	c := r.c
	v := c.voter()
	votes, no := 0, 0
	for _, rep := range r.replies {
		switch {
		case v.votes(rep):
			votes++
		case rep.ok:
		default:
			no++
		}
	}
	if votes >= c.quorum || no > len(c.nodes)-c.quorum {
		return true
	}
	for i, nd := range c.nodes {
		if nd.silent() && !r.repliedLocked(i) {
			no++
		}
	}
	return no > len(c.nodes)-c.quorum
}

func (r *round) repliedLocked(idx int) bool {
	for _, rep := range r.replies {
		if rep.idx == idx {
			return true
		}
	}
	return false
}

// snapshot returns the replies received so far.
func (r *round) snapshot() []nodeReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nodeReply(nil), r.replies...)
}

type attemptResult struct {
	validity    time.Duration // > 0: acquired
	roundStart  time.Time     // when the winning round began: validity counts from here
	token       int64
	reserve     int64           // tokens above token held back on a majority for local handoffs
	settled     <-chan struct{} // closed when every node of the round has replied
	unavailable *UnavailableError
	minPTTL     time.Duration // smallest remaining ttl of the holder's key among busy replies
	closed      bool          // the client was closed: nothing was sent
}

type nodeReply struct {
	idx      int
	ok       bool
	busy     bool
	token    int64
	reserved bool   // with fencing: the node keeps token + the handoff reserve
	marker   string // a grant's reading of the node's data marker ("" when it has none)
	evicted  int64  // a grant's reading of the node's eviction count, -1 when not read
	// seq is a grant's write sequence (rollback.go), -1 when not advanced; seqBefore what
	// this client had read of it when the round was sent.
	seq       int64
	seqBefore seqReading
	pttl      time.Duration
	err       error
}

// tally is what one round's replies say, once the round is decided.
type tally struct {
	granted  []int // nodes whose grant is a vote
	token    int64 // the largest token among them
	same     bool  // every vote carries that token
	reserved bool  // every vote kept the handoff reserve
	nbusy    int
	heldBack int // young grants that do not count: answers, but no votes
	errs     []error
	answered []bool // a definitive "busy": our value is not on that node
	minPTTL  time.Duration
}

// try is what one round asks for.
type try struct {
	owner   string // the Acquire call's random prefix; the value is owner + n
	n       int    // the attempt's number
	ttl     time.Duration
	fencing bool
	// mark is how long a writer refused by readers marks itself as waiting (shared locks:
	// writerMarkTTL); 0 for a last try, after which the writer will not wait.
	mark time.Duration
	// turnAsk is the readers' turn a reader refused by a writer asks for (readgroup.go,
	// readersTurnAsk); 0 for a writer.
	turnAsk time.Duration
}

func (a try) value() string { return a.owner + strconv.Itoa(a.n) }

// tryOnce is one Redlock round: SET on all nodes at once, quorum and validity check,
// the fencing commit where needed, and on failure a release on every node that may hold
// our value.
func (c *Client) tryOnce(ctx context.Context, nm names, a try) attemptResult {
	start := time.Now()
	value, ttl := a.value(), a.ttl
	// Counted until its grants are kept or given back, so that Close lets a failed
	// round's give-back reach the nodes (pendingCalls).
	c.pending.add(1)
	if c.closed.Load() {
		// Close came first (run checks before each round, this is the race): shutdown
		// may have found nothing pending and be closing the connections. Send nothing.
		c.pending.done()
		return attemptResult{closed: true}
	}
	rd := c.sendRound(ctx, nm, a, start)
	// Stop as soon as the outcome is known: a paused node must not hold us up (each
	// reply comes by node_timeout). Replies that came meanwhile are counted too; they
	// cannot turn a decided outcome around.
	<-rd.decide
	c.readers.noteRound(time.Since(start)) // sizes the readers' turn (readgroup.go)
	t := c.tallyRound(rd.snapshot())
	res := attemptResult{minPTTL: t.minPTTL}
	if len(t.granted) >= c.quorum {
		validity := ttl - time.Since(start) - drift(ttl, c.opt.DriftFactor)
		if validity > 0 && a.fencing {
			reserve, err := c.fence(ctx, nm, value, t)
			if err != nil {
				t.errs = append(t.errs, nodeError{node: "commit", err: err})
				validity = 0
			} else {
				res.reserve = reserve
				validity = ttl - time.Since(start) - drift(ttl, c.opt.DriftFactor)
			}
		}
		if validity > 0 {
			// Still counted: newLock ends the count once the lock is registered or its
			// give-back is under way.
			res.validity, res.roundStart, res.token, res.settled = validity, start, t.token, rd.settled
			return res
		}
	}
	c.giveBack(rd, nm, value, t.answered)
	// Unavailable: fewer than a quorum of nodes answered at all (busy counts as an
	// answer, and so does a young node's grant: the nodes are up, the key is not ours).
	if len(t.granted)+t.nbusy+t.heldBack < c.quorum && len(t.errs) > len(c.nodes)-c.quorum {
		res.unavailable = &UnavailableError{Quorum: c.quorum, Nodes: t.errs}
	}
	return res
}

// sendRound sends one acquire to every node that may vote, at once.
func (c *Client) sendRound(ctx context.Context, nm names, a try, start time.Time) *round {
	rd := newRound(c)
	rd.sent = time.Now()
	value := a.value()
	// The first try of a writer without fencing that may wait goes as a plain SET NX PX,
	// with the data marker's GET behind it on the same connection (dataloss.go, "Data loss
	// without a restart"): it needs none of the script's other work, and Redis runs the
	// two at a fraction of the script's cost. Every other try runs the acquire script,
	// which returns the marker with every grant itself (the key before the last, the
	// node's bound being the last: fencingLua reads it for counter expiries): later tries
	// (taking over an earlier attempt's value, clearing the writer's mark), fencing,
	// readers, nodes that may evict (their eviction count), and a last try (a caller that
	// will not wait wants the holder's PTTL for its BusyError: a refused plain SET has
	// none). Either way a grant from a node that lost its data since this client last
	// read the marker is no vote (acquireReply, dataloss.go).
	plain := a.n == 1 && !a.fencing && !nm.shared && a.mark > 0
	var plainCmd *transport.Command
	if plain {
		behind := c.seqMarker // advances the write sequence too (rollback.go)
		if c.seqCheckOff.Load() {
			behind = c.markerGet
		}
		plainCmd = transport.NewCommand(nil, nil, "set", nm.lock, value, "nx", "px", a.ttl.Milliseconds()).Then(behind)
	}
	// The script's command, made once a node needs it; nodes that may evict also report
	// their eviction count with a grant (evictionsLua): ARGV[8] "1".
	var cmds [2]*transport.Command
	scriptCmd := func(evict bool) *transport.Command {
		i := 0
		if evict {
			i = 1
		}
		if cmds[i] == nil {
			seq := c.seqKey()
			script, keys := acquireScript, []string{nm.lock, nm.counter, nm.writer, seq, c.markerKey(), c.boundKey()}
			if nm.shared {
				script, keys = readAcquireScript, []string{nm.lock, nm.counter, nm.writer, nm.readers, nm.turn, seq, c.markerKey(), c.boundKey()}
			}
			argv := []any{value, a.ttl.Milliseconds(), a.owner, boolArg(a.fencing), c.counterTTL().Milliseconds(), a.n,
				a.mark.Milliseconds(), boolArg(evict), a.turnAsk.Milliseconds()}
			if a.fencing {
				argv = append(argv, c.proposeToken(start), c.tokenLead().Microseconds(), c.handoffReserve(nm))
			}
			cmds[i] = transport.NewCommand(script, keys, argv...)
		}
		return cmds[i]
	}
	for i, nd := range c.nodes {
		// A node that restarted under our eyes gets nothing until its quarantine ends. A
		// young one still gets the SET: whether its vote counts is decided with the
		// others' replies in (a fresh start is known only once most nodes were seen).
		if nd.restarted(start) {
			rd.add(nodeReply{idx: i, err: quarantinedErr{nd.quarantinedUntil(start)}})
			continue
		}
		evict := nd.canEvict.Load()
		cmd, kind := plainCmd, sentPlain
		switch {
		case evict:
			cmd, kind = scriptCmd(true), sentEvict
		case !plain:
			cmd, kind = scriptCmd(false), sentScript
		}
		rd.kinds[i] = kind
		rd.seqs[i] = nd.seqReading()
		nd.tr.Send(ctx, cmd, rd, i)
	}
	return rd
}

// tallyRound sorts a decided round's replies into votes, refusals and failures. A silent
// node that has not replied (the round did not wait for it: round.decisiveLocked) is a
// failure: with enough of them the nodes are unavailable, not the key busy.
func (c *Client) tallyRound(replies []nodeReply) tally {
	t := tally{answered: make([]bool, len(c.nodes)), same: true, reserved: true}
	replied := make([]bool, len(c.nodes))
	for _, r := range replies {
		replied[r.idx] = true
	}
	for i, nd := range c.nodes {
		if !replied[i] && nd.silent() {
			t.errs = append(t.errs, nodeError{node: nd.addr, err: silentErr{nd.status().LastError}})
		}
	}
	v := c.voter()
	for _, r := range replies {
		switch {
		case r.ok && !v.votes(r):
			c.nodes[r.idx].warnYoung(time.Now())
			t.heldBack++
		case r.ok:
			if len(t.granted) > 0 && r.token != t.token {
				t.same = false
			}
			t.granted = append(t.granted, r.idx)
			t.token = max(t.token, r.token)
			t.reserved = t.reserved && r.reserved
		case r.busy:
			t.nbusy++
			t.answered[r.idx] = true
			if r.pttl > 0 && (t.minPTTL == 0 || r.pttl < t.minPTTL) {
				t.minPTTL = r.pttl
			}
		default:
			t.errs = append(t.errs, nodeError{node: c.nodes[r.idx].addr, err: r.err})
		}
	}
	return t
}

// fence makes a granted round's fencing token safe to use (fencing.go) and returns how many
// tokens above it local handoffs may use. When every vote carries the same token, the
// voting majority already keeps it (and, if each said so, the reserve above it): nothing
// to do. Otherwise the largest token is committed on a majority, without a reserve.
func (c *Client) fence(ctx context.Context, nm names, value string, t tally) (int64, error) {
	if t.same {
		if t.reserved {
			return c.handoffReserve(nm), nil
		}
		return 0, nil
	}
	return 0, c.commitToken(ctx, nm, value, t.token)
}

// giveBack releases a failed round's grants at once: they keep the key busy for everyone
// (split votes) until released. With pipelining the release queues behind each node's
// SET, so the grants of fast nodes need not wait for a slow node's reply. Without it,
// the round's late replies must be in first: a release that overtook its SET would
// leave that SET standing for a whole ttl. It ends the round's count in c.pending.
func (c *Client) giveBack(rd *round, nm names, value string, answered []bool) {
	c.goBackground(func() {
		defer c.pending.done()
		if c.opt.DisablePipelining {
			<-rd.settled
			for _, r := range rd.snapshot() {
				answered[r.idx] = answered[r.idx] || r.busy
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opt.NodeTimeout)
		defer cancel()
		c.releaseOnNodes(ctx, nm, value, answered, false)
	})
}

// acquireReply completes one node's parsed answer to an acquire.
func acquireReply(i int, nd *node, rep nodeReply) nodeReply {
	rep.idx = i
	// A restart is often seen only by the new connection that carried this very command
	// (OnConnect reads the run_id before sending it): the check before sending passed, so
	// check again. The reply is then no vote, and as it is not marked answered, the
	// round's release still goes to this node.
	// A grant from a node whose marker is gone or changed since this client read it, or
	// whose eviction count moved: the node lost data (a flush, an eviction) after the
	// last health check. It may have lost another client's lock too: no vote, and
	// quarantined from now (dataloss.go). All in one step (grantHolds).
	// (A node that started less than a quarantine ago is judged with the round's other
	// replies in: Client.votes.)
	if until := nd.grantHolds(rep, time.Now()); !until.IsZero() {
		return nodeReply{idx: i, err: quarantinedErr{until}}
	}
	return rep
}

// scriptReply reads the acquire script's answer: {1, token, reserved, marker, evicted,
// sequence} or {0, PTTL}.
func scriptReply(reply transport.Reply) nodeReply {
	r, err := reply.Slice()
	rep := nodeReply{evicted: -1, seq: -1}
	if err != nil {
		rep.err = err
		return rep
	}
	ints := make([]int64, 0, 5)
	for _, v := range r {
		if n, ok := v.(int64); ok {
			ints = append(ints, n)
		}
	}
	switch {
	case len(r) == 6 && len(ints) == 5 && ints[0] == 1:
		m, ok := r[3].(string)
		if !ok {
			rep.err = fmt.Errorf("unexpected acquire reply %v", r)
			break
		}
		rep.ok, rep.token, rep.reserved, rep.marker, rep.evicted, rep.seq = true, ints[1], ints[2] == 1, m, ints[3], ints[4]
	case len(r) == 2 && len(ints) == 2 && ints[0] == 0:
		rep.busy, rep.pttl = true, time.Duration(ints[1])*time.Millisecond
	default:
		rep.err = fmt.Errorf("unexpected acquire reply %v", r)
	}
	return rep
}

// plainReply reads a plain first try's answer (sendRound): the SET's OK is a grant,
// carrying the marker as its GET read it behind the SET ("" when the node has none); the
// nil reply is busy (its PTTL unknown: 0). A grant whose marker could not be read is no
// vote: an error, and as it is not a definitive busy the round's give-back still goes
// to that node.
func plainReply(reply transport.Reply) nodeReply {
	rep := nodeReply{evicted: -1, seq: -1}
	switch s, err := reply.Text(); {
	case reply.IsNil():
		rep.busy = true
	case err != nil:
		rep.err = err
	case s != "OK":
		rep.err = fmt.Errorf("unexpected SET reply %q", s)
	default:
		m := reply.Then()
		if vals, ok := m.Val().([]any); ok { // seqMarkerLua's {sequence, marker} (rollback.go)
			if len(vals) != 2 {
				rep.err = errors.New("unexpected reply behind the SET")
				break
			}
			seq, ok1 := vals[0].(int64)
			ms, ok2 := vals[1].(string)
			if !ok1 || !ok2 {
				rep.err = errors.New("unexpected reply behind the SET")
				break
			}
			rep.ok, rep.marker, rep.seq = true, ms, seq
			break
		}
		switch ms, err := m.Text(); { // the marker's GET: the check off
		case m.IsNil():
			rep.ok = true
		case err != nil:
			rep.err = fmt.Errorf("data marker read behind the SET: %w", err)
		default:
			rep.ok, rep.marker = true, ms
		}
	}
	return rep
}

// commitToken raises the fencing counter to token on a majority while we hold the key
// there (fencing.go explains why this makes later tokens larger).
func (c *Client) commitToken(ctx context.Context, nm names, value string, token int64) error {
	argv := []any{value, token, c.counterTTL().Milliseconds(), boolArg(nm.shared)}
	ok, _, errs := c.onAll(ctx, "commit", c.quorum, func(cctx context.Context, _ int, nd *node) (bool, error) {
		r, err := commitScript.Run(cctx, nd.tr, []string{nm.lock, nm.counter, nm.readers, c.seqKey(), c.boundKey()}, argv...).Int64()
		return r == 1, err
	})
	if ok < c.quorum {
		return fmt.Errorf("fencing token committed on %d of %d nodes, need %d: %w", ok, len(c.nodes), c.quorum, errors.Join(errs...))
	}
	return nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
