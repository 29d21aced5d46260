package caddyredlock

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
)

// This file holds the table of requests that wait for, hold, drain or release a lock. It
// is the one owner of "the locker stays open": an entry holds a reference to its
// handler's locker from trackRequest to untrackRequest, so that a reload that changes the
// node set closes the old client only once its last request is done (released, handed
// over or drained), and an exiting Caddy knows what is still running. The admin API and
// the gauges read it.

// Request states in the table, as the admin API shows them.
const (
	stateWaiting  = "waiting"
	stateHeld     = "held"
	stateDraining = "draining" // the request was cut short; the lock is kept one more ttl
)

// inflight is one request that waits for or holds a lock (or whose lock drains or is
// being released).
type inflight struct {
	owner  *Handler
	locker string   // sharedLocker.id
	key    string   // the keys in lock order, joined by a space
	keys   []string // several keys: in lock order
	mode   string   // modeExclusive, modeShared or modeLimit
	method string
	uri    string
	remote string
	since  time.Time
	cancel context.CancelCauseFunc
	hold   lockSpan // the redlock.hold span (tracing.go), set once acquired
	x      exchange // once held: next's response writer and what it saw (exchange.go)

	mu        sync.Mutex
	state     string
	releasing bool // ServeHTTP returned and the lock is released in the background
	heldAt    time.Time
	lock      heldLocks
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
	if !e.owner.locker.hold() {
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
	requests.mu.Lock()
	delete(requests.m, e)
	requests.mu.Unlock()
	e.owner.locker.drop()
}

func (e *inflight) setHeld(l heldLocks) {
	e.mu.Lock()
	e.state, e.heldAt, e.lock = stateHeld, time.Now(), l
	e.mu.Unlock()
}

func (e *inflight) setState(state string) {
	e.mu.Lock()
	e.state = state
	e.mu.Unlock()
}

func (e *inflight) setReleasing() {
	e.mu.Lock()
	e.releasing = true
	e.mu.Unlock()
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
	isHolding = func(e *inflight) bool { return e.state != stateWaiting }
	// inServeHTTP: the request's ServeHTTP has not yet finished with its lock.
	inServeHTTP = func(e *inflight) bool { return e.state != stateDraining && !e.releasing }
	isReleasing = func(e *inflight) bool { return e.releasing }
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
	State      string        `json:"state"`
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
