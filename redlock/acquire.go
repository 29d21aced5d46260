package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/chance"
	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// Acquire takes the lock on key, waiting up to o.Wait while it is busy. It returns:
//   - a *Lock when a quorum granted it with validity left;
//   - a *BusyError when the wait ran out while someone else held it;
//   - an *UnavailableError when fewer than a quorum of nodes
//     answered at all in two rounds in a row (one retry rides out a blip; waiting longer
//     does not make dead nodes come back, so this does not use up the wait);
//   - ctx.Err() when ctx ended first. Nothing stays locked in any of the failure cases.
func (c *Client) Acquire(ctx context.Context, key string, o AcquireOptions) (*Lock, error) {
	return c.acquire(ctx, key, o, false)
}

// acquire is Acquire; several says the lock is one of an AcquireAll's (its mode).
func (c *Client) acquire(ctx context.Context, key string, o AcquireOptions, several bool) (*Lock, error) {
	ttl, err := c.checkAcquire(key, o)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	waitCtx, cancel := context.WithDeadline(ctx, start.Add(o.Wait))
	defer cancel()
	k := &contention{c: c, ctx: ctx, waitCtx: waitCtx, key: key, ttl: ttl, fencing: o.Fencing, start: start,
		mode: modeOf(o, several), slots: []names{c.names(key)}}
	k.slots[0].shared = o.Shared
	if o.NoReaders && !o.Shared {
		k.slots[0].turn = "" // its release gives no readers' turn
	}
	if o.Limit > 1 {
		k.slots = c.slotNames(key, o.Limit)
	}
	// Local line first: only one waiter per key per process contends in Redis. The
	// previous holder may hand its lock over with the turn (handoff.go). Readers skip it:
	// they do not exclude each other, and one reader's turn would hold up the next.
	queued := false // behind an earlier caller of this client
	if o.Shared {
		// A reader of this client holding the key may share its entry (readgroup.go).
		if l := c.joinReader(key, ttl, o.Fencing, start, c.queues.forceNow(key)); l != nil {
			return l, nil
		}
	} else {
		var handed *Lock
		k.turn, handed, queued, err = c.queues.take(waitCtx, key, waiter{ttl: ttl, fencing: o.Fencing, mode: k.mode, since: start})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, k.busy(0, 0)
		}
		if handed != nil {
			if handed.keep(&k.turn) {
				return handed, nil
			}
			// Force released before we took it: the turn is ours, the lock is not.
			c.abandon(handed)
		}
	}
	if o.Shared {
		defer c.readers.wait(key)() // a writer's release goes to Redis meanwhile (readgroup.go)
	}
	l, err := k.run()
	if err == nil && queued {
		l.mu.Lock()
		l.waited = true
		l.mu.Unlock()
	}
	if err == nil && o.Shared {
		c.readers.open(l)
	}
	// Unless the lock took the turn (keep), it is still ours: a failed wait, or a limited
	// key, whose holder does not keep the line (the next local waiter tries the other
	// places at once: limit.go).
	k.turn.pass(false)
	return l, err
}

// checkAcquire checks an acquire's key and options and returns the lock's ttl.
func (c *Client) checkAcquire(key string, o AcquireOptions) (time.Duration, error) {
	if err := validateKey(key); err != nil {
		return 0, err
	}
	return c.checkOptions(o)
}

// checkOptions checks an acquire's options (Acquire's and AcquireAll's) and returns the
// lock's ttl.
func (c *Client) checkOptions(o AcquireOptions) (time.Duration, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = c.opt.TTL
	}
	switch err := validateTTL(ttl, c.opt.DriftFactor); {
	case err != nil:
		return 0, err
	case ttl > c.opt.MaxTTL:
		// The restart quarantine covers locks up to MaxTTL only (voting.go).
		return 0, fmt.Errorf("redlock: ttl %v is above the client's max_ttl %v", ttl, c.opt.MaxTTL)
	case o.Wait < 0:
		return 0, fmt.Errorf("redlock: wait must be >= 0, got %v", o.Wait)
	case o.Limit < 0 || o.Limit > MaxLimit:
		return 0, fmt.Errorf("redlock: limit must be 0 to %d, got %d", MaxLimit, o.Limit)
	case o.Limit > 1 && o.Shared:
		return 0, errors.New("redlock: a lock cannot be both shared and limited")
	}
	return ttl, nil
}

// contention is one Acquire call's contest for its key in Redis, once it is the head of
// the key's local line (or a reader, which has none).
type contention struct {
	c       *Client
	ctx     context.Context // the caller's
	waitCtx context.Context // ctx, ending when the wait runs out
	turn    *turn           // the key's turn in the local line until a lock kept takes it; nil for a reader
	slots   []names         // where the lock may be taken: one, or a limited key's places (limit.go)
	key     string
	owner   string // the random prefix of every value this call writes
	ttl     time.Duration
	fencing bool
	mode    mode
	start   time.Time
	w       *watch // the key's release notices, once watched
	// misses counts, for a reader, the tries refused right after a release notice woke
	// it: readers' turns it missed, each of which doubles the turn it asks for.
	misses int
}

func (k *contention) busy(attempts int, retryAfter time.Duration) error {
	return &BusyError{Key: k.key, Attempts: attempts, Waited: time.Since(k.start), RetryAfter: retryAfter}
}

// watch starts watching the key's release notices (every place of a limited key shares
// the channel), through the local line's shared watch when there is one.
func (k *contention) watch() {
	if k.turn != nil {
		k.w = k.turn.ensureWatch(k.c.notices, k.slots[0].channel)
	} else {
		k.w = k.c.notices.watch(k.slots[0].channel)
	}
	k.c.waitSubscribed(k.waitCtx, k.w) // or a release could slip past unnoticed
}

// run is the head-of-line loop: try, and while busy wait for a release notice or a
// jittered delay, until the wait runs out.
func (k *contention) run() (*Lock, error) {
	c := k.c
	k.owner = rand.Text() + ":" // 130 random bits: values must be unguessable (they allow release)
	if k.turn == nil {
		defer func() {
			if k.w != nil {
				k.w.unwatch()
			}
		}()
	}
	if k.turn != nil && k.turn.takeYield() {
		// Our release just reached other clients' waiters: give them the first go, so
		// that instances take turns. Bounded: if none of them takes the key, we try.
		k.watch()
		c.yieldTo(k.waitCtx, k.w)
	}
	unavailable := 0
	noticed := false // the last wait ended with a release notice
	for attempt := 1; ; attempt++ {
		if c.closed.Load() {
			return nil, ErrClosed
		}
		var wake <-chan struct{}
		if k.w != nil {
			wake = k.w.next() // before the try: a notice during it still wakes us
		}
		l, res, retry := k.try(attempt)
		switch {
		case l != nil:
			return l, nil
		case retry:
			continue
		case res.unavailable != nil:
			// One more round after a delay rides out a blip (a reconnect, a slow moment);
			// a second one in a row means the nodes are down: say so now rather than wait.
			unavailable++
			if unavailable > 1 || k.waitCtx.Err() != nil {
				res.unavailable.Key = k.key
				return nil, res.unavailable
			}
			sleep(k.waitCtx, c.retryDelay(), nil)
			continue
		}
		unavailable = 0
		if noticed && k.slots[0].shared {
			k.misses++ // refused right after a release: the readers' turn, if any, was too short for us
		}
		noticed = false
		switch {
		case k.ctx.Err() != nil:
			return nil, k.ctx.Err()
		case k.waitCtx.Err() != nil:
			return nil, k.busy(attempt, res.minPTTL)
		case k.w == nil:
			// Subscribe before the next try, and make sure enough nodes confirmed, so a
			// release between that try and our sleep cannot go unnoticed.
			k.watch()
			continue
		}
		delay := c.retryDelay()
		if res.minPTTL > 0 && res.minPTTL < delay {
			delay = res.minPTTL // the holder's key expires sooner than our next try
		}
		noticed = sleep(k.waitCtx, delay, wake) // or until a release notice
	}
}

// try is one round on the key's places. It returns the lock when the round took it, or
// retry when a lock it took had to be given up (a force release began meanwhile) and the
// wait allows another round at once; else the round's result says why not.
func (k *contention) try(attempt int) (l *Lock, res attemptResult, retry bool) {
	c := k.c
	forces := c.queues.forceNow(k.key)
	mark := c.writerMarkTTL()
	if k.waitCtx.Err() != nil {
		mark = 0 // no try after this one: do not hold readers back
	}
	a := try{owner: k.owner, n: attempt, ttl: k.ttl, fencing: k.fencing, mark: mark}
	if k.slots[0].shared {
		a.turnAsk = c.readersTurnAsk(k.misses)
	}
	got, res := c.trySlots(k.ctx, k.slots, a)
	if res.validity <= 0 {
		return nil, res, res.closed // closed: run says ErrClosed
	}
	l = c.newLock(got, k.key, k.owner+strconv.Itoa(attempt), k.ttl, k.fencing, k.mode, k.start, attempt, res)
	if l == nil {
		return nil, res, true // the client shut down meanwhile: run sees it closed
	}
	// A force release of this key that began since this round did may have found no
	// holder registered (ForceRelease marks the holder lost) and deleted our SETs: the
	// lock cannot be trusted. Give it up and, while the wait lasts, try again (the key
	// was just freed).
	line := &k.turn
	if len(k.slots) > 1 {
		line = nil // a place of a limited key: no line kept, no handoff
	}
	if !c.queues.forcedSince(k.key, forces) && l.keep(line) {
		return l, res, false
	}
	c.abandon(l)
	if k.waitCtx.Err() != nil {
		return nil, attemptResult{}, false // busy: the wait is over
	}
	return nil, res, true
}

// sleep waits d, or until ctx ends or wake (if not nil) fires, and reports whether wake
// ended it.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// newLock registers the lock a successful round took, or gives it back and returns nil
// when the client shut down while the round was out.
func (c *Client) newLock(nm names, key, value string, ttl time.Duration, fencing bool, m mode, start time.Time,
	attempt int, res attemptResult) *Lock {
	l := &Lock{c: c, nm: nm, key: key, value: value, ttl: ttl, token: res.token, fencing: fencing, mode: m,
		acquiredAt: start, attempts: attempt, waited: attempt > 1, settled: res.settled, state: provisional}
	if fencing {
		l.tokenMax = res.token + res.reserve
	}
	l.start(res.roundStart)
	// The round is counted in c.pending until here (tryOnce), so that shutdown, which
	// waits for it, sees either the lock registered or its give-back counted in turn.
	defer c.pending.done()
	if !c.register(l) {
		c.abandon(l)
		return nil
	}
	return l
}

// abandon gives up a lock just taken that cannot be trusted, without giving up the
// key's turn in the local queue: it is marked lost, unregistered, and its value deleted
// on every node in the background (after its round's late replies without pipelining,
// as in giveBack).
func (c *Client) abandon(l *Lock) {
	l.mu.Lock()
	l.markLostLocked(&LostError{Key: l.key, Reason: LostForceReleased})
	if l.state == provisional { // else a force release's Release of it is under way and ends it
		l.moveLocked(released)
	}
	l.mu.Unlock()
	c.pending.add(1)
	c.goBackground(func() {
		defer c.pending.done()
		if c.opt.DisablePipelining {
			<-l.settled
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opt.NodeTimeout)
		defer cancel()
		c.releaseOnNodes(ctx, l.nm, l.value, nil, false)
	})
	c.unregister(l) // last: it may shut a closed client down, which waits for the above
}

// waitSubscribed waits until enough nodes confirmed w's subscription that any majority
// includes one of them, at most a node timeout.
func (c *Client) waitSubscribed(ctx context.Context, w *watch) {
	t := time.NewTimer(c.opt.NodeTimeout)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// yieldWait bounds how long a head that yields waits for another client to take the key
// and release it: long enough for their notice and SET to land (a few round trips).
const yieldWait = 5 * time.Millisecond

// yieldTo waits until another client's release notice, or at most yieldWait (or
// node_timeout when smaller). Notices that came before our own release do not count.
func (c *Client) yieldTo(ctx context.Context, w *watch) {
	wake := w.next()
	t := time.NewTimer(min(yieldWait, c.opt.NodeTimeout))
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

// writerMarkTTL is how long a writer's waiting mark keeps new readers out (shared locks):
// a waiting writer tries again, and so renews it, at least once per retry delay plus a
// round; a writer that gave up stops holding readers back soon after.
func (c *Client) writerMarkTTL() time.Duration {
	return 2 * (c.opt.RetryDelayMax + c.opt.NodeTimeout)
}

func (c *Client) retryDelay() time.Duration {
	lo, hi := c.opt.RetryDelayMin, c.opt.RetryDelayMax
	if hi <= lo {
		return lo
	}
	return lo + chance.N(hi-lo)
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
	pttl     time.Duration
	err      error
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
		plainCmd = transport.NewCommand(nil, nil, "set", nm.lock, value, "nx", "px", a.ttl.Milliseconds()).Then(c.markerGet)
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
			script, keys := acquireScript, []string{nm.lock, nm.counter, nm.writer, c.markerKey(), c.boundKey()}
			if nm.shared {
				script, keys = readAcquireScript, []string{nm.lock, nm.counter, nm.writer, nm.readers, nm.turn, c.markerKey(), c.boundKey()}
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
	for _, r := range replies {
		switch {
		case r.ok && !c.votes(r):
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

// scriptReply reads the acquire script's answer: {1, token, reserved, marker, evicted}
// or {0, PTTL}.
func scriptReply(reply transport.Reply) nodeReply {
	r, err := reply.Slice()
	rep := nodeReply{evicted: -1}
	if err != nil {
		rep.err = err
		return rep
	}
	ints := make([]int64, 0, 4)
	for _, v := range r {
		if n, ok := v.(int64); ok {
			ints = append(ints, n)
		}
	}
	switch {
	case len(r) == 5 && len(ints) == 4 && ints[0] == 1:
		m, ok := r[3].(string)
		if !ok {
			rep.err = fmt.Errorf("unexpected acquire reply %v", r)
			break
		}
		rep.ok, rep.token, rep.reserved, rep.marker, rep.evicted = true, ints[1], ints[2] == 1, m, ints[3]
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
	rep := nodeReply{evicted: -1}
	switch s, err := reply.Text(); {
	case reply.IsNil():
		rep.busy = true
	case err != nil:
		rep.err = err
	case s != "OK":
		rep.err = fmt.Errorf("unexpected SET reply %q", s)
	default:
		m := reply.Then()
		switch ms, err := m.Text(); {
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
		r, err := commitScript.Run(cctx, nd.tr, []string{nm.lock, nm.counter, nm.readers, c.boundKey()}, argv...).Int64()
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
