package redlock

// A lock's states
//
// A lock's life is one field, Lock.state (guarded by Lock.mu), changed only through move
// with the transitions listed in lockMoves: a round takes it (provisional: its Acquire
// has not kept it yet, and owns the key's baton meanwhile), Acquire keeps it (held:
// renewed by KeepAlive, watched through Context; keep moves the baton into it), Release or
// HandOver begin its end (releasing: no renewal from here), and it ends handed on (to a
// local waiter, which gets a new provisional Lock for the same value in Redis), released
// (deleted in Redis, or given up by abandon), or unreleased until the next Release when
// HandOver found no waiter after all (TestLockMoves pins the table).
//
//	provisional --keep--> held --Release/HandOver--> releasing --handoff--> handedOn
//	     |                                               |   \--deletes---> released
//	     +--Release (a force release)--> releasing       +--HandOver found no waiter--> unreleased --Release--> releasing
//	     +--abandon--> released
//
// Whether the lock can still be trusted is the other field, Lock.cause: nil while it is,
// then the first *LostError (expired, taken, vanished, max_hold, force released) or
// ErrReleased, the cause its Context reports. They are apart because a loss is an event,
// not a stage: it can strike a lock at any stage before it is ended here (an expiry or a
// renewal in flight may find it gone while its Release is waiting for that renewal), and
// the release then decides with it (hand on only what is still trusted).
//
// The baton spent once. The key's baton in the local line (queue.go, baton) is a value that
// one owner at a time holds, and it moves with the same steps: the Acquire owns it while
// the lock is provisional, keep moves it into the lock, and the lock's handoff or its
// release in Redis spends it. It is spent once: by pass (to the next waiter, or the line
// is freed) or by handTo (with the lock), so it goes on at most once per holder whatever
// order a release, a force release and a handoff run in (TestKeepMovesTheBaton,
// TestBatonIsSpentOnce, TestBatonUnderCancelsHandOversAndForces).
//
// The moves alone already keep handTo from meeting a spent baton through the API: a
// lock's baton is spent only by that lock's handoff or its release in Redis; handoff runs
// only on the one move from held to releasing (Release or HandOver), before anything
// passes the baton; a handoff that did not spend it leads on to the release in Redis
// (unreleased goes there without a handoff), and both end in a final state; a lock
// released while provisional (a force release) has no baton, keep never having run. So
// handTo's own spent check guards direct use of the baton (TestBatonIsSpentOnce), and the
// simulation, which drives only the API, cannot tell it from its absence
// (docs/simulation.md, the `baton` row).

// lockState is where a lock is in its life (the states and their moves: above).
type lockState uint8

const (
	// provisional: a round just took the lock, or a holder just handed it on, and the
	// Acquire it is for has not kept it yet: that Acquire owns the key's baton and may
	// still give the lock up (abandon).
	provisional lockState = iota
	// held: its Acquire returned it. It carries the key's baton (Lock.baton, when it has a
	// line), KeepAlive renews it, its Context watches it.
	held
	// releasing: Release or HandOver began (or a force release's Release of a lock not yet
	// kept): no renewal is scheduled or started from here, and no second release runs.
	releasing
	// unreleased: HandOver ended it here but could not hand it on; the next Release
	// deletes it in Redis.
	unreleased
	// handedOn: given, with the baton, to the next local holder, whose own Lock (a new,
	// provisional one for the same value in Redis) carries it on. Final.
	handedOn
	// released: deleted in Redis (or left to expire where that failed), or given up by
	// abandon. Final.
	released
)

var stateNames = [...]string{"provisional", "held", "releasing", "unreleased", "handed_on", "released"}

func (s lockState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// lockMoves lists, for each state, the states it may move to: the one home of a lock's
// transitions.
var lockMoves = [...][]lockState{
	provisional: {held, releasing, released},
	held:        {releasing},
	releasing:   {handedOn, unreleased, released},
	unreleased:  {releasing},
	handedOn:    nil,
	released:    nil,
}

// live reports whether the lock is still a holder's to renew: provisional or held.
func (s lockState) live() bool { return s == provisional || s == held }

// moveLocked changes the lock's state to to if lockMoves allows it from the current one,
// and reports whether it did. Callers hold l.mu.
func (l *Lock) moveLocked(to lockState) bool {
	for _, s := range lockMoves[l.state] {
		if s == to {
			l.state = to
			return true
		}
	}
	return false
}

// move is moveLocked under l.mu.
func (l *Lock) move(to lockState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.moveLocked(to)
}

// keep ends a lock's provisional state as its Acquire returns it, moving the key's baton
// from the Acquire into the lock (t is the Acquire's: on success *t is nil and the lock
// owns it; nil for a lock without a line: a reader, a place of a limited key). It
// refuses when a force release already marked the lock lost or released it: the caller
// then gives it up (abandon) and keeps the baton, like a lock the force release began too
// late to mark.
func (l *Lock) keep(t **baton) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != nil || !l.moveLocked(held) {
		return false
	}
	if t != nil {
		l.baton, *t = *t, nil
	}
	return true
}

// moveFrom moves the lock from state from to state to, and reports whether it did (it
// was in from, and lockMoves allows the step).
func (l *Lock) moveFrom(from, to lockState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == from && l.moveLocked(to)
}

// renewable reports whether l may be scheduled or renewed: it is trusted and its release
// has not begun.
func (l *Lock) renewable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause == nil && l.state.live()
}
