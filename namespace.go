package caddyredlock

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// A handler's namespace is where its keys live in Redis: the node set, the prefix, the
// key templates and case folding. Two handlers with the same namespace take the same
// Redis key for the same request, so the requests of an old config and a new one
// exclude each other across a reload. A reload that changes the namespace cannot: old
// requests keep their locks in the old place while new requests lock another key for
// the same resource. Caddy's handlers are not told which config replaced theirs, so the
// check is made when it is known: when the old config is cleaned up, after the new one
// started. Each handler remembers its config by the config context's Done channel (a
// handler's context derives from it by values only, which share the channel).
type namespace struct {
	nodes           string // expanded URLs, sorted: may hold passwords, never logged
	prefix          string
	keys            string // the path and key templates, in order
	caseInsensitive bool
	// limit: a limited key lives in its places, not under its own name, so holders of
	// one limit and of another do not exclude each other.
	limit int
}

func newNamespace(urls []string, s *settings, h *Handler) namespace {
	sorted := slices.Sorted(slices.Values(urls))
	var keys strings.Builder
	for _, p := range h.Paths {
		keys.WriteString(p.Path + " " + p.Key + " " + strings.Join(p.Keys, " ") + "\n")
	}
	keys.WriteString(h.Key + " " + strings.Join(h.Keys, " "))
	return namespace{nodes: strings.Join(sorted, "\n"), prefix: s.lock.Prefix, keys: keys.String(), caseInsensitive: h.CaseInsensitive,
		limit: s.limit}
}

// changes names what differs from o, for the log.
func (n namespace) changes(o namespace) []string {
	var out []string
	if n.nodes != o.nodes {
		out = append(out, "nodes")
	}
	if n.prefix != o.prefix {
		out = append(out, "prefix")
	}
	if n.keys != o.keys {
		out = append(out, "key templates")
	}
	if n.caseInsensitive != o.caseInsensitive {
		out = append(out, "case_insensitive")
	}
	if n.limit != o.limit {
		out = append(out, "limit")
	}
	return out
}

// liveHandlers are the provisioned handlers not yet cleaned up, of every config.
var liveHandlers = struct {
	mu sync.Mutex
	m  map[*Handler]struct{}
}{m: map[*Handler]struct{}{}}

func (h *Handler) goLive() {
	liveHandlers.mu.Lock()
	liveHandlers.m[h] = struct{}{}
	h.readers = readersOn(h.ns)
	if h.s.shared != nil {
		h.readers.Add(1)
	}
	liveHandlers.mu.Unlock()
}

// readerCounts counts, per node set and prefix, the live handlers that take keys shared
// (guarded by liveHandlers.mu; entries stay: one per place keys ever lived). A writer's
// release looks for readers waiting for their turn only where some handler takes keys
// shared (redlock.AcquireOptions.NoReaders): the read costs every node a little on every
// release, and where nobody reads shared there is no turn to give. Key templates do not
// count: two handlers with other templates may still render the same key.
var readerCounts = map[string]*atomic.Int32{}

// readersOn is the count of handlers taking keys shared where ns's keys live.
func readersOn(ns namespace) *atomic.Int32 {
	k := ns.nodes + "\x00" + ns.prefix
	c := readerCounts[k]
	if c == nil {
		c = new(atomic.Int32)
		readerCounts[k] = c
	}
	return c
}

// leave takes h off the live handlers and, on a config reload, warns if requests of h
// still hold locks that no handler of the new config takes the same way.
func (h *Handler) leave() {
	liveHandlers.mu.Lock()
	delete(liveHandlers.m, h)
	if h.s.shared != nil {
		h.readers.Add(-1)
	}
	var successors []namespace
	var active <-chan struct{}
	if ac := caddy.ActiveContext(); ac.Context != nil { // nil once Caddy stopped
		active = ac.Done()
	}
	for o := range liveHandlers.m {
		if o.cfgDone == active && o.cfgDone != h.cfgDone {
			successors = append(successors, o.ns)
		}
	}
	liveHandlers.mu.Unlock()
	if caddy.Exiting() || active == nil || h.cfgDone == active {
		return // not a reload, or this handler's config is still the active one
	}
	held := h.holdingRequests()
	if held == 0 {
		return
	}
	changed := []string{"handler removed"}
	for _, ns := range successors {
		c := h.ns.changes(ns)
		if len(c) == 0 {
			return // a handler of the new config locks these keys in the same place
		}
		if len(c) < len(changed) || changed[0] == "handler removed" {
			changed = c
		}
	}
	h.logger.Warn("config reload changed where keys live while requests of the previous config still hold locks: "+
		"new requests for the same resources do not wait for them; drain before changing nodes, prefix, key templates or case_insensitive",
		zap.Int("held_locks", held), zap.String("old_prefix", h.ns.prefix), zap.Strings("changed", changed))
}

// holdingRequests counts h's requests that hold or drain a lock.
func (h *Handler) holdingRequests() int { return countRequests(h, isHolding) }
