package redlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Readers of one client share their entry in Redis: a reader that finds another reader of
// the same client holding the key (same ttl and fencing) joins its entry instead of
// taking one of its own. It costs no round trip, so reads of a hot key through one
// client do not queue behind Redis at all. The entry stays in Redis while any of its
// readers holds it (a count here); the last one out releases it.
//
// Safety is the shared lock's (doc.go, "Shared locks"): the entry is held on a quorum
// until at least the validity of any of its readers, since each validity comes from a
// quorum grant or renewal of that same entry; a joiner starts with the latest of them,
// as a handed lock does, and renews the entry itself. Every reader is registered, so a
// force release marks each of them lost.
//
// Writers: a waiting writer's mark is in Redis, and joining does not ask Redis. So a
// group takes joiners only for about one round trip after its entry was taken (as long
// as its own acquire round took, at most joinWindow), and none while a writer of this
// client waits for the key; later readers go to Redis (where a writer's mark refuses
// them) and start a new group. A writer then waits for the readers inside when it came,
// plus about a round trip of joiners, not for a fixed window longer than the work.
//
// Phases: readers that wait for the key (a writer holds it or waits) are counted per
// key, and while any does, a writer's release goes to Redis instead of handing the lock
// to the next writer of this client (handoffAllowed): the waiting readers, woken all at
// once by the release (notifier.poke), go in together before the next writer, as in a
// phase-fair reader-writer lock. Across processes the same holds through Redis: readers
// refused mark themselves as waiting there, and a writer's release that finds the mark
// gives them a turn of readersTurn in which writers are refused (scripts.go).
//
// Fencing: joiners carry the entry's token (readers of one client holding the key
// together share it).

// joinWindow caps how long after its entry was taken a group of readers takes joiners.
const joinWindow = 5 * time.Millisecond

// The readers' turn after a writer's release (scripts.go, releaseScript) must be long
// enough for the release notice to reach the waiting readers of every process and for
// their rounds to land: readersTurnRounds of this client's recent acquire rounds (which
// grow with the load on the machine and the nodes), at least readersTurnMin, at most
// node_timeout. Short next to the work a lock guards; it only delays writers (doc.go).
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
// fit in that gets in within a few releases (doc.go, "Shared locks").

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

// writerWaits reports whether a caller of this client owns the key's turn: a writer (a
// reader never takes a turn) contending for the key, since readers of this client hold
// it. Read here rather than in queue.go to keep the reader-side rule in one file.
func (qs *queues) writerWaits(key string) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.writerWaitsLocked(key)
}

func (qs *queues) writerWaitsLocked(key string) bool {
	q := qs.m[key]
	return q != nil && q.turnTaken
}
