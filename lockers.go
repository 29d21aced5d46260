package caddyredlock

import (
	"crypto/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds the lockers shared by all handlers: one redlock.Client per node set and
// client options, kept across config reloads. The admin module reads them (admin routers
// are provisioned before the apps and cannot reach handler instances). What keeps a
// locker open while requests still use it is the request table (requests.go).

// lockerPool maps a lockerKey to a *pooledLocker. A reload provisions the new handlers
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
	name        string // the configured name, "" for the default (name.go)
}

// pooledLocker is one redlock.Client in the pool.
type pooledLocker struct {
	id     string // random, to tell lockers apart in the admin API
	name   string // the configured name, or prefix and node addresses (no passwords)
	prefix string
	// space is where its keys live: the prefix and the nodes' addresses (no passwords),
	// shared by lockers of other options on the same nodes and prefix (coverOf).
	space  string
	client *redlock.Client
	events *eventQueue // the locker's Caddy events (events.go)
}

// Destruct is called by the pool when the last handler using the locker is gone. Close
// refuses new acquires but keeps the client alive until its last held lock is released.
// Its events end here: no handler is left to emit them through.
func (s *pooledLocker) Destruct() error {
	s.events.stop()
	return s.client.Close()
}

// lockers lists the lockers in use, sorted by name. For the admin module.
func lockers() []*pooledLocker {
	var out []*pooledLocker
	lockerPool.Range(func(_, v any) bool {
		if s, ok := v.(*pooledLocker); ok {
			out = append(out, s)
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].name+out[i].id < out[j].name+out[j].id })
	return out
}

// lockerLease is one handler's reference to a pooled locker. The handler's config holds
// one reference and every running request another, so that a reload that changes the
// node set does not close the client under requests still waiting on the old handler.
// It is a count of its own, not the pool's, because it must refuse a request once it
// reached zero (take), where the pool would build a new client (docs/development.md,
// "Why a locker is counted twice").
type lockerLease struct {
	key    lockerKey
	pooled *pooledLocker

	mu   sync.Mutex
	refs int
}

// openLocker loads or creates the pooled locker for urls and s, and leases it.
func openLocker(urls []string, s *settings) (*lockerLease, error) {
	o := s.lock
	key := lockerKey{urls: strings.Join(urls, "\n"), prefix: o.Prefix, maxTTL: o.MaxTTL, nodeTimeout: o.NodeTimeout,
		drift: o.DriftFactor, retryMin: o.RetryDelayMin, retryMax: o.RetryDelayMax, tls: s.tlsKey, name: s.name}
	v, _, err := lockerPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		// The client outlives this config: log through Caddy's default logger as it is
		// at each line, not the module's (logs.go).
		o.Logger = newRedlockLogger()
		// The name is needed before New (the observer labels with it), the addresses
		// after: parse them as New does.
		addrs, err := redlock.NodeAddresses(urls)
		if err != nil {
			return nil, err
		}
		name := s.name
		if name == "" {
			name = defaultName(o.Prefix, addrs)
		}
		space := o.Prefix + "\x00" + strings.Join(slices.Sorted(slices.Values(addrs)), ",")
		obs := &lockerObserver{name: name, events: newEventQueue(name)}
		o.Observer = obs
		c, err := redlock.New(urls, o)
		if err != nil {
			obs.events.stop()
			return nil, err
		}
		return &pooledLocker{id: rand.Text()[:8], prefix: o.Prefix, space: space, client: c, name: name, events: obs.events}, nil
	})
	if err != nil {
		// LoadOrNew removes a failed entry itself: there is no reference to give back.
		return nil, err
	}
	return &lockerLease{key: key, pooled: v.(*pooledLocker), refs: 1}, nil
}

// take takes a reference for one request. It fails once the handler was cleaned up and
// its last request finished (the client may then be closed).
func (l *lockerLease) take() bool {
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
			pluginLog().Warn("closing redlock client",
				zap.String("locker", l.pooled.name), zap.Error(err))
		}
	}
}
