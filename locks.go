package caddyredlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds the package-level state: the lockers shared by all handlers (one
// redlock.Client per node set and timing options, kept across config reloads) and the
// table of requests that wait for or hold a lock. The admin module reads both: admin
// routers are provisioned before the apps and cannot reach handler instances.

// lockerPool maps a lockerKey to a *sharedLocker. A reload provisions the new handlers
// (LoadOrNew) before the old ones are cleaned up (Delete), so an unchanged node set keeps
// its connections, subscriptions and held locks.
var lockerPool = caddy.NewUsagePool()

// lockerKey identifies a redlock.Client: everything that is per client in the redlock
// package. It holds URLs with passwords, so it is never logged or shown.
type lockerKey struct {
	urls        string // expanded URLs, newline-separated
	prefix      string
	maxTTL      time.Duration
	nodeTimeout time.Duration
	drift       float64
	retryMin    time.Duration
	retryMax    time.Duration
	tls         string // fingerprint of the tls block and its files (tls.go)
}

// sharedLocker is one redlock.Client in the pool.
type sharedLocker struct {
	id     string // random, to tell lockers apart in the admin API
	name   string // prefix and node addresses, without passwords
	prefix string
	client *redlock.Client
}

// Destruct is called by the pool when the last handler using the locker is gone. Close
// refuses new acquires but keeps the client alive until its last held lock is released.
func (s *sharedLocker) Destruct() error { return s.client.Close() }

// lockerInfo describes a shared locker for the admin API.
type lockerInfo struct {
	ID     string
	Name   string
	Prefix string
	Client *redlock.Client
}

// lockers lists the lockers in use, sorted by name. For the admin module.
func lockers() []lockerInfo {
	var out []lockerInfo
	lockerPool.Range(func(_, v any) bool {
		if s, ok := v.(*sharedLocker); ok {
			out = append(out, lockerInfo{ID: s.id, Name: s.name, Prefix: s.prefix, Client: s.client})
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name+out[i].ID < out[j].Name+out[j].ID })
	return out
}

// lockerLease is one handler's reference to a shared locker. The handler's config holds
// one reference and every running request another, so that a reload that changes the
// node set does not close the client under requests still waiting on the old handler.
type lockerLease struct {
	key    lockerKey
	shared *sharedLocker

	mu   sync.Mutex
	refs int
}

// openLocker loads or creates the shared locker for urls and s, and leases it.
func openLocker(urls []string, s *settings) (*lockerLease, error) {
	key := lockerKey{urls: strings.Join(urls, "\n"), prefix: s.prefix, maxTTL: s.maxTTL, nodeTimeout: s.nodeTimeout,
		drift: s.drift, retryMin: s.retryMin, retryMax: s.retryMax, tls: s.tlsKey}
	v, _, err := lockerPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := redlock.New(urls, redlock.Options{
			Prefix: s.prefix, TTL: s.ttl, MaxTTL: s.maxTTL, NodeTimeout: s.nodeTimeout, DriftFactor: s.drift,
			RetryDelayMin: s.retryMin, RetryDelayMax: s.retryMax, TLSConfig: s.tls,
			// The client outlives this config: use the process logger, not the module's.
			Logger:   caddy.Log().Named("http.handlers.redlock"),
			Observer: hooks.observer,
		})
		if err != nil {
			return nil, err
		}
		addrs := make([]string, 0, len(urls))
		for _, n := range c.Nodes() {
			addrs = append(addrs, n.Address)
		}
		return &sharedLocker{id: rand.Text()[:8], prefix: s.prefix, client: c,
			name: s.prefix + " @ " + strings.Join(addrs, ",")}, nil
	})
	if err != nil {
		// LoadOrNew removes a failed entry itself: there is no reference to give back.
		return nil, err
	}
	return &lockerLease{key: key, shared: v.(*sharedLocker), refs: 1}, nil
}

// hold takes a reference for one request. It fails once the handler was cleaned up and
// its last request finished (the client may then be closed).
func (l *lockerLease) hold() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return false
	}
	l.refs++
	return true
}

// drop gives back one reference; the last one gives the locker back to the pool.
func (l *lockerLease) drop() {
	l.mu.Lock()
	l.refs--
	last := l.refs == 0
	l.mu.Unlock()
	if last {
		if _, err := lockerPool.Delete(l.key); err != nil {
			caddy.Log().Named("http.handlers.redlock").Warn("closing redlock client",
				zap.String("locker", l.shared.name), zap.Error(err))
		}
	}
}

// Request states in the in-flight table.
const (
	stateWaiting  = "waiting"
	stateHeld     = "held"
	stateDraining = "draining" // the request was cut short; the lock is kept one more ttl
)

// inflight is one request that waits for or holds a lock (or whose lock drains).
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

	mu     sync.Mutex
	state  string
	heldAt time.Time
	lock   heldLocks
}

func (e *inflight) setHeld(l heldLocks) {
	e.mu.Lock()
	e.state, e.heldAt, e.lock = stateHeld, time.Now(), l
	e.mu.Unlock()
}

// requests is the table of in-flight requests, by pointer.
var requests = struct {
	mu sync.Mutex
	m  map[*inflight]struct{}
}{m: map[*inflight]struct{}{}}

// addInflight puts a request in the table and counts it as running on its handler.
func addInflight(e *inflight) {
	e.state = stateWaiting
	requests.mu.Lock()
	requests.m[e] = struct{}{}
	requests.mu.Unlock()
	e.owner.active.Add(1)
}

// requestDone says the request's ServeHTTP returned (its lock may still be draining).
func requestDone(e *inflight) { e.owner.active.Add(-1) }

// removeInflight takes the request out of the table once its lock is released.
func removeInflight(e *inflight) {
	requests.mu.Lock()
	delete(requests.m, e)
	requests.mu.Unlock()
}

func (e *inflight) setState(state string) {
	e.mu.Lock()
	e.state = state
	e.mu.Unlock()
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
			Method: e.method, URI: e.uri, RemoteAddr: e.remote, Locker: e.locker}
		if len(e.keys) > 1 {
			ri.Keys = e.keys
		}
		l := e.lock
		e.mu.Unlock()
		if l != nil {
			ri.Validity, ri.Renewals, ri.Token = l.validity(), l.renewals(), l[0].Token()
			if len(l) > 1 && l[0].Fencing() {
				ri.Tokens = l.fencingHeader()
			}
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

// abortInflight cancels this handler's requests (the process is exiting) and waits, at
// most timeout, for them to return. Locks of cancelled requests drain (see
// Handler.finish): with the process gone they lapse after their ttl instead.
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
	cause := fmt.Errorf("redlock: caddy is exiting")
	for _, e := range mine {
		e.cancel(cause)
	}
	// Polling keeps this free of helper goroutines that could outlive the wait.
	deadline := time.Now().Add(timeout)
	for h.active.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.active.Load(); n > 0 {
		h.logger.Warn("exiting with requests still holding locks; they expire after their ttl", zap.Int64("requests", n))
	}
}

// Acquire outcomes, for counters and metrics.
const (
	resultAcquired    = "acquired"
	resultBusy        = "busy"
	resultUnavailable = "unavailable"
	resultBypassed    = "bypassed"
	resultCancelled   = "cancelled"
	resultError       = "error"
)

// hooks let metrics.go observe the handler without this package's request path knowing
// Prometheus. They are set in an init function only (never while serving).
var hooks = struct {
	lost     func(reason string) // a held lock lost while the request ran
	observer redlock.Observer    // passed to every new redlock.Client
}{
	lost: func(string) {},
}

// counters are process totals (tests and the admin API read them).
var counters struct {
	acquired, busy, unavailable, bypassed, cancelled, lost atomic.Uint64
}

// countAcquire counts an acquire outcome (counters and the acquire histogram).
func countAcquire(mode, result string, wait time.Duration) {
	switch result {
	case resultAcquired:
		counters.acquired.Add(1)
	case resultBusy:
		counters.busy.Add(1)
	case resultUnavailable:
		counters.unavailable.Add(1)
	case resultBypassed:
		counters.bypassed.Add(1)
	case resultCancelled:
		counters.cancelled.Add(1)
	}
	metrics.acquire.WithLabelValues(mode, result).Observe(wait.Seconds())
}

// countWaited records the outcome of a request that found its key taken.
func countWaited(mode, result string, wait time.Duration) {
	metrics.wait.WithLabelValues(mode, result).Observe(wait.Seconds())
}
