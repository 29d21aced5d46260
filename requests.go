package caddyredlock

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// This file holds the table of requests that wait for, hold, drain or release a lock. It
// is the one owner of "the locker stays open": an entry holds a reference to its
// handler's locker from trackRequest to untrackRequest, so that a reload that changes the
// node set closes the old client only once its last request is done (released, handed
// over or drained), and an exiting Caddy knows what is still running. The admin API and
// the gauges read it.

// A request's states
//
// A request's life in the table is one field, inflight.state (guarded by inflight.mu),
// changed only through move, with the transitions listed in requestMoves (as
// redlock/state.go does for a lock; TestRequestMoves pins the table):
//
//	waiting --acquired--> held --released off the response path--> releasing --> done
//	   |                   |  \--cut short (endrule.go)--> draining --one ttl later--> releasing
//	   +--refused---> done  +--handed over to the next local request--> done
//
// The admin API and the CLI show the state as it is (done is never shown: the request is
// leaving the table).

// requestState is where a request is in its life; its value is what the admin API shows.
type requestState string

const (
	// stateWaiting: tracked, acquiring its locks (waiting for a busy key included).
	stateWaiting requestState = "waiting"
	// stateHeld: it holds its locks and its ServeHTTP is running.
	stateHeld requestState = "held"
	// stateDraining: the request was cut short; the lock is kept one more ttl.
	stateDraining requestState = "draining"
	// stateReleasing: ServeHTTP is done with the lock and its release runs in the
	// background (at once for a request that completed, after the drain for one cut short).
	stateReleasing requestState = "releasing"
	// stateDone: the request holds nothing any more and leaves the table. Final.
	stateDone requestState = "done"
)

// requestMoves lists, for each state, the states a request may move to: the one home of
// a request's transitions.
var requestMoves = map[requestState][]requestState{
	stateWaiting:   {stateHeld, stateDone},
	stateHeld:      {stateReleasing, stateDraining, stateDone},
	stateDraining:  {stateReleasing},
	stateReleasing: {stateDone},
	stateDone:      nil,
}

// move changes the request's state to to if requestMoves allows it from the current
// one, and reports whether it did. Each caller runs only in a state the table lets it
// leave (the diagram above), so a refused move is a bug, which TestRequestMoves guards.
func (e *inflight) move(to requestState) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moveLocked(to)
}

// moveLocked is move with e.mu held.
func (e *inflight) moveLocked(to requestState) bool {
	if !slices.Contains(requestMoves[e.state], to) {
		return false
	}
	e.state = to
	return true
}

// inflight is one request that waits for or holds a lock (or whose lock drains or is
// being released): one entry of the table.
type inflight struct {
	owner  *Handler
	locker string   // pooledLocker.id
	key    string   // the keys in lock order, joined by a space
	keys   []string // several keys: in lock order
	mode   string   // modeExclusive, modeShared or modeLimit
	method string
	uri    string
	remote string
	since  time.Time
	cancel context.CancelCauseFunc
	above  *inflight // the request's entry held before this one, by another redlock block (coverOf)
	hold   lockSpan  // the redlock.hold span (tracing.go), set once acquired
	x      exchange  // once held: next's response writer and what it saw (exchange.go)
	// unwatch ends the watch of the locks (Handler.watchLock), once finish has decided
	// their end; nil before the watch began.
	unwatch func()
	// cutUnder: a block served under these locks cut its part of the request (its own
	// max_hold, or a loss it saw first): the request ends cut short (under.go). Defence
	// in depth: the cuts known so far also show to the holder (a traced round trip left
	// unanswered, an aborted response, the loss itself).
	cutUnder atomic.Bool

	mu     sync.Mutex // guards state, heldAt, lock, reqCtx and cancelOuter
	state  requestState
	heldAt time.Time
	lock   heldLocks
	// Once the handler returned with routes of Caddy's to run (outer.go): the request's
	// own context, and the cancel of the one those routes got.
	reqCtx      context.Context
	cancelOuter context.CancelCauseFunc
}

// requests is the table of in-flight requests, by pointer.
var requests = struct {
	mu sync.Mutex
	m  map[*inflight]struct{}
}{m: map[*inflight]struct{}{}}

// trackRequest puts a request in the table (waiting) with a reference on its handler's
// locker. It fails once the handler was cleaned up and its last request ended (the
// locker may be closed by then).
func trackRequest(e *inflight) bool {
	if !e.owner.locker.take() {
		return false
	}
	e.state = stateWaiting
	requests.mu.Lock()
	requests.m[e] = struct{}{}
	requests.mu.Unlock()
	return true
}

// untrackRequest takes the request out of the table once it holds no lock any more, and
// gives back its reference on the locker.
func untrackRequest(e *inflight) {
	e.move(stateDone)
	requests.mu.Lock()
	delete(requests.m, e)
	requests.mu.Unlock()
	e.owner.locker.drop()
}

// setHeld moves a waiting request to held, with the locks it holds.
func (e *inflight) setHeld(l heldLocks) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.moveLocked(stateHeld) {
		e.heldAt, e.lock = time.Now(), l
	}
}

// endWatch ends the watch of the request's locks, if it began.
func (e *inflight) endWatch() {
	if e.unwatch != nil {
		e.unwatch()
	}
}

// stillHeld reports whether the request holds its locks now: held, and none lost.
func (e *inflight) stillHeld() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state == stateHeld && len(e.lock) > 0 && e.lock.err() == nil
}

// countRequests counts the table's entries that match (nil h: every handler's).
func countRequests(h *Handler, match func(e *inflight) bool) int {
	requests.mu.Lock()
	defer requests.mu.Unlock()
	n := 0
	for e := range requests.m {
		if h != nil && e.owner != h {
			continue
		}
		e.mu.Lock()
		if match(e) {
			n++
		}
		e.mu.Unlock()
	}
	return n
}

// Matchers for countRequests (called with e.mu held).
var (
	isWaiting = func(e *inflight) bool { return e.state == stateWaiting }
	// isHolding: the request's locks stand in Redis (held, draining or being released).
	isHolding = func(e *inflight) bool { return e.state != stateWaiting && e.state != stateDone }
	// inServeHTTP: the request's ServeHTTP has not yet finished with its lock.
	inServeHTTP = func(e *inflight) bool { return e.state == stateWaiting || e.state == stateHeld }
	isReleasing = func(e *inflight) bool { return e.state == stateReleasing }
)

// heldFor is how long the request has held its lock (0 before it got it).
func (e *inflight) heldFor() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.heldAt.IsZero() {
		return 0
	}
	return time.Since(e.heldAt)
}

// waitedFor is how long the request waited for its lock (so far, if still waiting).
func (e *inflight) waitedFor() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.heldAt.IsZero() {
		return time.Since(e.since)
	}
	return e.heldAt.Sub(e.since)
}

// requestInfo is a snapshot of one in-flight request for the admin API. It never holds
// a lock value (the token is a fencing token, not a secret).
type requestInfo struct {
	Key        string        `json:"key"`
	Keys       []string      `json:"keys,omitempty"`
	Mode       string        `json:"mode"`
	State      requestState  `json:"state"`
	Since      time.Time     `json:"since"`
	HeldSince  time.Time     `json:"held_since,omitzero"`
	Validity   time.Duration `json:"-"`
	Renewals   int           `json:"renewals"`
	Token      int64         `json:"token,omitempty"`
	Tokens     string        `json:"tokens,omitempty"` // several keys: key=token pairs
	Method     string        `json:"method"`
	URI        string        `json:"uri"`
	RemoteAddr string        `json:"remote_addr"`
	Locker     string        `json:"locker"`
	Name       string        `json:"name"` // the handler's name (name.go)
}

// locks reports whether the request waits for or holds key (one of its keys).
func (ri requestInfo) locks(key string) bool {
	if len(ri.Keys) == 0 {
		return ri.Key == key
	}
	return slices.Contains(ri.Keys, key)
}

// inflightRequests lists the requests that wait for or hold a lock, oldest first.
func inflightRequests() []requestInfo {
	requests.mu.Lock()
	entries := make([]*inflight, 0, len(requests.m))
	for e := range requests.m {
		entries = append(entries, e)
	}
	requests.mu.Unlock()
	out := make([]requestInfo, 0, len(entries))
	for _, e := range entries {
		e.mu.Lock()
		if e.state == stateDone { // untracked since the copy above
			e.mu.Unlock()
			continue
		}
		ri := requestInfo{Key: e.key, Mode: e.mode, State: e.state, Since: e.since, HeldSince: e.heldAt,
			Method: e.method, URI: e.uri, RemoteAddr: e.remote, Locker: e.locker,
			Name: e.owner.label()}
		if len(e.keys) > 1 {
			ri.Keys = e.keys
		}
		l := e.lock
		e.mu.Unlock()
		if l != nil {
			ri.Validity, ri.Renewals, ri.Token = l.validity(), l.renewals(), l[0].Token()
			if len(l) > 1 && l.fencing() {
				ri.Tokens = l.fencingHeader()
			}
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

// abortInflight cancels this handler's requests (the process is exiting) and waits, at
// most timeout, for their ServeHTTP to be done with their locks. Locks of cancelled
// requests drain (see Handler.finish): with the process gone they lapse after their ttl
// instead.
func (h *Handler) abortInflight(timeout time.Duration) {
	requests.mu.Lock()
	var mine []*inflight
	for e := range requests.m {
		if e.owner == h {
			mine = append(mine, e)
		}
	}
	requests.mu.Unlock()
	if len(mine) == 0 {
		return
	}
	// A cancellation to the handlers behind (cutCause): no upstream failure, no retry,
	// nothing for handle_errors.
	cause := cutCause{errors.New("redlock: caddy is exiting")}
	for _, e := range mine {
		e.cancel(cause)
	}
	if n := h.waitFor(inServeHTTP, timeout); n > 0 {
		h.logger.Warn("exiting with requests still holding locks; they expire after their ttl", zap.Int("requests", n))
	}
}

// waitReleases waits, at most timeout, for the background releases of completed
// requests, so that they reach Redis before the process exits (else the keys would stand
// for a ttl).
func (h *Handler) waitReleases(timeout time.Duration) {
	if n := h.waitFor(isReleasing, timeout); n > 0 {
		h.logger.Warn("exiting with releases still on the way; those keys expire after their ttl", zap.Int("releases", n))
	}
}

// waitFor polls, at most timeout, until none of h's requests match, and returns how many
// still do. Polling keeps it free of helper goroutines that could outlive the wait.
func (h *Handler) waitFor(match func(e *inflight) bool, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		n := countRequests(h, match)
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}
