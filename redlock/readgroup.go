package redlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Shared locks
//
// AcquireOptions.Shared takes a key as a reader. On each node, readers keep an entry each
// in a sorted set beside the lock name (value -> expiry on the node's clock), and while
// any entry lives the lock name itself holds sharedMarker with the expiry of the
// longest-lived entry (readAcquireScript); during a readers' turn (below) it holds
// sharedMarker with no entry, for the turn. A writer is an ordinary exclusive lock: the
// same SET NX PX on the lock name.
//
// Claim: a writer never holds a key while a reader does, across N masters. A reader holds
// when a majority R of nodes granted its entry within its validity; a writer when a
// majority W granted the lock name. R and W share a node x. On x, each grant is one
// atomic script: a reader is granted only while the name is free or holds the marker
// (no writer), and from then until the entry expires or is released the name holds the
// marker (every script that changes the entries sets the name's expiry to the last
// entry's, and only the last entry out deletes it), so a writer's SET NX there fails;
// a writer's grant makes the name hold its value, and a reader is refused while it does.
// So x granted at most one of them for any moment at which both would be valid: the
// validity of each is counted, as for the mutex, from before its round on the client's
// monotonic clock, minus drift, while the node's entry and the name's expiry run at
// least as long. Readers do not exclude each other: their entries are separate.
//
// A crashed reader's entry lapses after its ttl on each node (expired entries are dropped
// by every later script), so it holds up writers for one ttl, like a crashed writer.
// Restarts: a node that lost its entries is quarantined exactly as for the mutex
// (voting.go), since a reader's entries on a majority are what a writer's majority must
// meet. A renewal (extendScript) extends a reader only where its entry is still live and
// the name still holds the marker; readers are not re-taken on a node that lost them.
//
// Writers are not starved: a writer refused because readers hold the key leaves a mark
// (its owner prefix, for writerMarkTTL, renewed at each of its tries, cleared when it
// gets the key), and a reader is refused while a mark stands (outside the readers' turn,
// below). So the readers present when a writer came finish, no new ones start, and the
// writer gets the key; readers that came after it wait for its release notice. A writer
// that gives up leaves its mark until it lapses (at most writerMarkTTL). A writer that
// will not wait (its last try) leaves no mark.
//
// Phases, so that readers and writers alternate (a phase-fair reader-writer lock) across
// processes: a reader refused by a writer (its lock or its mark) marks readers as waiting
// (the turn key, for writerMarkTTL, renewed at each of its tries, holding the longest
// turn a waiting reader asked for); a writer's release that deletes its value and finds
// that mark leaves the lock name holding sharedMarker with no reader entry, and the mark
// saying "t", both for the readers' turn: the releasing client's own (readersTurn: 4 of
// its recent acquire rounds, 10ms to node_timeout), or the longer one asked for, up to 4
// of its node timeouts (readersTurnAsk, below). Meanwhile writers are refused (the name
// holds the marker: they mark themselves as waiting, and retry when the turn ends) and
// readers go in even past a writer's mark; each reader's grant gives the name its entry's
// expiry as usual. So the readers woken by the release go in as one batch before the
// next writer, whichever process it is in, and the next writer then goes before any
// later reader. Within a process (below): while readers of a client wait for a key, a
// writer's release there goes to Redis rather than to that client's next writer, and
// that writer lets them go first (as for other clients' waiters); one release notice
// wakes every waiter of a process at once.
//
// The marks and the turn only delay; safety never rests on them. A reader's grant still
// needs the name free or holding the marker on that node, a writer's still needs SET NX
// (the turn's marker, holding no entry, only refuses writers, like a reader that leaves
// at once), and every argument above is about grants. A lost, lapsed or forced-away mark
// or turn costs ordering, never exclusion.
//
// A writer's wait is bounded: the readers inside when it came, plus, if it came during a
// turn, the rest of that turn and the readers that went in during it (their work and
// ttl bound each), plus about a round trip of local joiners (below); no reader that comes
// after its mark stands and the turn is over goes in before it. A writer that gets the key
// ends the phase; the next release starts a turn only if readers were refused meanwhile.
// A reader waits for the writer inside and, while it waits, its turn comes at that
// writer's release, if its release notice and its round land within the turn. The
// releasing client's own rounds say nothing of that: a reader of a distant or slower
// instance hears of the release later and its round takes longer, and with a turn sized
// by the writer alone it would miss every turn for as long as writers kept coming. So a
// refused reader asks for a turn of 4 of its own rounds (readersTurnAsk), doubled for
// each turn it missed (a try refused right after a release notice woke it), and the mark
// keeps the longest asked. Claim: a reader whose notice and round take less than the
// turn cap (4 node timeouts of the releasing client, 400ms by default) goes in at one of
// the first releases after its first refusal: each missed turn doubles its ask, so
// after k misses the turn is 2^k times its own 4 rounds, or the cap
// (TestDistantReaderGetsATurn). Not covered: a reader slower than the cap, and one whose
// release notices are lost (it then tries on its retry delay, which need not fall in a
// turn); their wait is bounded only by the writers' coming to an end. A writer's wait
// grows by at most the longer turn. Also not covered: a local handoff between two writers
// of one process does not go through Redis, so readers of another process may wait for
// up to HandoffLimit such handoffs in a row (handoff.go: then the lock goes back through
// Redis, whose release gives them their turn). Nor the release of a writer taken with
// AcquireOptions.NoReaders (a key its caller says nobody takes shared; the plugin sets it
// where no handler takes keys shared on those nodes and prefix: the plugin's
// namespace.go, readersOn): it does not look for the mark at all, so readers of such a key, if any
// came after all, wait for the writers' coming to an end (TestNoReadersReleaseGivesNoTurn).
// Exclusion does not rest on the turn: a writer still never holds the key while a reader
// does.
//
// Other Redlock clients (redsync, node-redlock) see the marker as somebody's lock: their
// exclusive locks exclude our readers and writers both ways. They cannot take the key
// shared, and a writer of theirs leaves no mark (readers may then keep it from the key
// for as long as they overlap). A readers' turn delays their locks as any holder would,
// for at most the turn.
//
// Fencing: readers and writers draw tokens from the key's one counter by the same rule
// (fencingLua) and the same argument as the mutex's (fencing.go), so every holder's
// token is larger than the tokens of all holders that got the key before it, readers and
// writers alike; readers that hold the key together have distinct tokens, but for
// readers of one client sharing one entry (below), which share its token. A storage
// layer that rejects writes with a token below the largest it has seen therefore rejects
// a writer that was overtaken by any later holder.

// Shared locks within one client
//
// Readers have no local line (they would only wait for each other) and are never handed
// over. Readers of one client share their entry in Redis: a reader that finds another
// reader of the same client holding the key (same ttl and fencing) joins its entry
// instead of taking one of its own. It costs no round trip, so reads of a hot key
// through one client do not queue behind Redis at all. The entry stays in Redis while
// any of its readers holds it (a count here); the last one out releases it.
//
// Safety is the shared lock's (above): the entry is held on a quorum at least until the
// validity of any reader that shares it, since each validity comes from a quorum grant
// or renewal of that same entry; a joiner starts with the latest of them, as a handed
// lock does, and renews the entry itself. Every reader is registered, so a force release
// marks each of them lost, and a force release by the same client never misses a joiner
// (force.go; joinReader checks and registers in one step).
//
// Writers: a waiting writer's mark is in Redis, and joining does not ask Redis. So a
// group takes joiners only for about one round trip after its entry was taken (as long
// as its own acquire round took, at most joinWindow), and none while a writer of this
// client waits for the key; later readers go to Redis (where a writer's mark refuses
// them) and start a new group. A writer (whose mark only Redis sees) then waits for the
// readers inside when it came, plus about a round trip of joiners, not for a fixed window
// longer than the work.
//
// Phases: readers that wait for the key (a writer holds it or waits) are counted per
// key, and while any does, a writer's release goes to Redis instead of handing the lock
// to the next writer of this client (handoffAllowed): the waiting readers, woken all at
// once by the release (notifier.poke), go in together before the next writer, as in a
// phase-fair reader-writer lock. Readers of a client waiting for a writer each go to
// Redis when woken (a reader joins only as it starts), and during a readers' turn that is
// where they go in. Readers wait for release notices like the head of a line, and this
// client wakes its own waiters when it releases (it ignores its own notices from Redis).
// Across processes the same holds through Redis: readers refused mark themselves as
// waiting there, and a writer's release that finds the mark gives them a turn of
// readersTurn in which writers are refused (above; scripts.go).
//
// Fencing: joiners carry the entry's token (readers of one client holding the key
// together share it).

// joinWindow caps how long after its entry was taken a group of readers takes joiners.
const joinWindow = 5 * time.Millisecond

// The readers' turn after a writer's release (scripts.go, releaseScript) must be long
// enough for the release notice to reach the waiting readers of every process and for
// their rounds to land: readersTurnRounds of this client's recent acquire rounds (which
// grow with the load on the machine and the nodes), at least readersTurnMin, at most
// node_timeout. Short next to the work a lock guards; it only delays writers (above).
const (
	readersTurnRounds = 4
	readersTurnMin    = 10 * time.Millisecond
)

// readersTurn is how long a writer's release that finds readers waiting keeps writers
// out (and lets readers past a waiting writer's mark), unless they asked for longer.
func (c *Client) readersTurn() time.Duration {
	round := time.Duration(c.readers.round.Load())
	return min(max(readersTurnRounds*round, readersTurnMin), c.opt.NodeTimeout)
}

// The releasing client's rounds say nothing of the waiting readers': those of a distant
// instance get the notice later and their rounds take longer, and could miss every turn
// while writers keep coming. So a refused reader asks for a turn (the readers' mark
// keeps the longest asked: scripts.go, waitMarkLua) of readersTurnRounds of its own
// rounds, doubled for each turn it missed (a try refused right after a release notice),
// and a release gives the longer of its own turn and the one asked, up to
// readersTurnRounds node timeouts of its own client. A reader whose notice and round
// fit in that gets in within a few releases ("Shared locks", above).

// readersTurnAsk is the turn a reader that missed misses turns asks for.
func (c *Client) readersTurnAsk(misses int) time.Duration {
	ask := max(readersTurnRounds*time.Duration(c.readers.round.Load()), readersTurnMin)
	for range min(misses, 8) {
		ask *= 2
	}
	return min(ask, c.readersTurnMax())
}

// readersTurnMax is the longest readers' turn this client gives or asks for.
func (c *Client) readersTurnMax() time.Duration { return readersTurnRounds * c.opt.NodeTimeout }

// noteRound folds an acquire round's length (until decided) into the client's running
// average (weight 1/8), which sizes the readers' turn. Concurrent updates may lose one:
// it is an estimate.
func (rg *readGroups) noteRound(d time.Duration) {
	old := rg.round.Load()
	rg.round.Store(old + (int64(d)-old)/8)
}

// readGroup is the readers of one client sharing one entry.
type readGroup struct {
	key     string
	nm      names
	value   string
	ttl     time.Duration
	fencing bool
	token   int64
	settled <-chan struct{}
	opened  time.Time     // when the entry was taken
	window  time.Duration // joiners are taken until opened + window
	// broken: one of its readers was lost (the entry may be gone: a force release from
	// another client, a renewal that found it deleted): no more joiners.
	broken atomic.Bool

	// Guarded by readGroups.mu.
	refs  int       // readers holding the entry; 0: released (or being released) in Redis
	until time.Time // the latest validity any of its readers has
}

// readGroups are a client's groups of readers, by key (the newest group of each key).
type readGroups struct {
	mu sync.Mutex
	m  map[string]*readGroup
	// waiting counts, per key, the readers of this client contending in Redis.
	waiting map[string]int
	// round is the running average of this client's acquire rounds, ns (noteRound).
	round atomic.Int64
}

// wait counts a reader contending for key in Redis until the returned func is called.
func (rg *readGroups) wait(key string) (done func()) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if rg.waiting == nil {
		rg.waiting = map[string]int{}
	}
	rg.waiting[key]++
	return func() {
		rg.mu.Lock()
		defer rg.mu.Unlock()
		if rg.waiting[key]--; rg.waiting[key] <= 0 {
			delete(rg.waiting, key)
		}
	}
}

// readersWait reports whether readers of this client contend for key in Redis: a
// writer's lock then is not handed to the next writer (phases, above).
func (rg *readGroups) readersWait(key string) bool {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return rg.waiting[key] > 0
}

// open makes l, a reader just taken in Redis, the head of a new group for its key.
func (rg *readGroups) open(l *Lock) {
	now := time.Now()
	g := &readGroup{key: l.key, nm: l.nm, value: l.value, ttl: l.ttl, fencing: l.fencing, token: l.token,
		settled: l.settled, opened: now, refs: 1}
	until := l.validUntil()
	// The winning round began at until - (ttl - drift) (Lock.start): its length is the
	// round trip the window follows.
	g.window = min(joinWindow, max(0, now.Sub(until.Add(-(l.ttl-drift(l.ttl, l.c.opt.DriftFactor))))))
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if rg.m == nil {
		rg.m = map[string]*readGroup{}
	}
	g.until = until
	rg.m[l.key] = g
	l.mu.Lock()
	l.group = g // under l.mu: its timers and a force release may read it already
	broken := l.cause != nil
	l.mu.Unlock()
	if broken {
		g.broken.Store(true)
	}
}

// readGroup returns the reader's group (nil: not a reader, or not yet in one).
func (l *Lock) readGroup() *readGroup {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.group
}

// join returns a reader of key sharing a group's entry, or nil when no group of the key
// takes joiners now (none, another ttl or fencing, its window passed, a writer of this
// client waits for the key, too little validity left, or a force release of the key
// began since forces).
//
// The force check and the registration are one step under queues.mu, where a force
// release numbers itself (beginForce) before it lists the holders it marks lost: so
// either the force began first and the joiner sees it and goes to Redis, or the joiner
// is registered before the force lists the holders and is marked lost with them. Checked
// before registering, a force beginning and listing between the two would neither refuse
// nor mark the joiner, which would then trust an entry the force deletes.
func (c *Client) joinReader(key string, ttl time.Duration, fencing bool, start time.Time, forces uint64) *Lock {
	rg := &c.readers
	rg.mu.Lock()
	defer rg.mu.Unlock()
	g := rg.m[key]
	now := time.Now()
	if g == nil || g.refs == 0 || g.broken.Load() || g.ttl != ttl || g.fencing != fencing || now.Sub(g.opened) > g.window ||
		g.until.Sub(now) < ttl/2 {
		return nil
	}
	if joinHook != nil {
		joinHook()
	}
	l := &Lock{c: c, nm: g.nm, key: key, value: g.value, ttl: ttl, token: g.token, fencing: fencing, mode: mode{shared: true},
		acquiredAt: start, settled: g.settled, group: g, state: held} // no round, no line: nothing to keep
	l.startUntil(g.until)
	qs := c.queues
	qs.mu.Lock()
	if qs.writerWaitsLocked(key) || qs.forcedSinceLocked(key, forces) {
		qs.mu.Unlock()
		l.expiry.Stop() // never registered: nothing else holds it
		return nil
	}
	// Never refused: the group has a reader, registered (readers leave the group before
	// they are unregistered), so the client holds a lock and has not shut down.
	c.register(l)
	qs.mu.Unlock()
	g.refs++
	return l
}

// joinHook, when set (tests only), runs in joinReader once a group was found to take the
// joiner, before the joiner is checked against force releases and registered.
var joinHook func()

// renewed notes a reader's new validity: joiners start from the latest.
func (rg *readGroups) renewed(g *readGroup, until time.Time) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if until.After(g.until) {
		g.until = until
	}
}

// leave takes a reader out of its group and reports whether it was the last, whose
// release deletes the entry in Redis. The group then takes no joiners.
func (rg *readGroups) leave(g *readGroup) (last bool) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	g.refs--
	if g.refs > 0 {
		return false
	}
	if rg.m[g.key] == g {
		delete(rg.m, g.key)
	}
	return true
}

// writerWaits reports whether a caller of this client owns the key's baton: a writer (a
// reader never takes a turn) contending for the key, since readers of this client hold
// it. Read here rather than in queue.go to keep the reader-side rule in one file.
func (qs *queues) writerWaits(key string) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.writerWaitsLocked(key)
}

func (qs *queues) writerWaitsLocked(key string) bool {
	q := qs.m[key]
	return q != nil && q.batonOut
}
