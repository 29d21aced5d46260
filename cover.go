package caddyredlock

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// This file holds the rule for a redlock block that asks for keys its request already
// holds through another block (one around it, or the block whose error or intercept
// routes it runs in): docs/design.md, "Locks held by the request".
//
// The rule: a held lock serves a block only when it gives the block everything the block
// asks for. Every key of the block is held; by an enforcing lock (not dry_run, whose
// loss cuts nothing); in a mode that excludes at least what the block's mode excludes,
// across every route that may take those keys: an exclusive lock (or a shared writer) is
// the lock's value and keeps readers out, so it serves exclusive and shared blocks; a
// reader serves only readers; `limit m` holds one of m places, which live under other
// Redis names than the lock's value (so neither an exclusive lock nor a reader serves a
// `limit n` block, nor the other way round: round 5, hole 5), and serves `limit n` only
// if m <= n (`limit 4` lets in more than `limit 2`); with a fencing token if the block
// sends one (under.go sets it: the held lock's); and with a ttl at least the block's (a
// request cut short drains one of the held lock's ttls: a shorter one would hand the key
// on while the block's upstream may still work). The block's own max_hold is kept by its
// watch (under.go).
//
// Otherwise the block fails at once with a 500 that names the key and both blocks:
// taking its own locks would wait for itself. Of one key, a process keeps one local line
// for every mode (redlock's queues: a held lock keeps the line's baton), so even a
// `limit n` place under an exclusive lock waits for the request's own hold. A block some
// of whose keys are held and others not is refused too (hole 1: serving it under the
// held key alone left its other keys unlocked). Keys held in another space (other nodes
// or prefix) are other locks: the block takes those itself.

// coverOf decides how a block asking for keys in mode is served: under the request's
// held entries by (every key held, each entry serving it), on its own locks (by nil, err
// nil: none of its keys is held), or not at all (err: it would wait for itself).
func (h *Handler) coverOf(above *inflight, keys []string, mode string) (by []*inflight, err error) {
	if above == nil {
		return nil, nil // most requests: no block around
	}
	space := h.locker.pooled.space
	var missing string
	for _, k := range keys {
		e := heldKey(above, space, k)
		if e == nil {
			if missing == "" {
				missing = k
			}
			continue
		}
		if why := e.lacks(h, mode); why != "" {
			return nil, h.refusal(k, e, why)
		}
		if !slices.Contains(by, e) {
			by = append(by, e)
		}
	}
	switch {
	case by == nil:
		return nil, nil
	case missing != "":
		return nil, h.refusal(by[0].firstOf(keys), by[0], fmt.Sprintf("it does not hold %q, which this block also asks for", missing))
	}
	return by, nil
}

// heldKey returns the latest entry of the request (from e through its above) that holds
// key in space.
func heldKey(e *inflight, space, key string) *inflight {
	for ; e != nil; e = e.above {
		if e.owner.locker.pooled.space == space && slices.Contains(e.keys, key) && e.stillHeld() {
			return e
		}
	}
	return nil
}

// lacks says what e's locks do not give a block of handler b asking for mode ("" if
// they give it everything: the rule above).
func (e *inflight) lacks(b *Handler, mode string) string {
	held := e.owner.s
	switch {
	case held.dryRun && !b.s.dryRun:
		return "in dry run (its loss cuts nothing)"
	case !modeServes(e.mode, held.limit, mode, b.s.limit):
		return "in a mode that does not exclude all this block's mode does"
	case b.s.fencing && !held.fencing:
		return "without fencing (this block sends a token)"
	case held.lock.TTL < b.s.lock.TTL:
		return fmt.Sprintf("with ttl %v, shorter than this block's %v (a request cut short drains one ttl)", held.lock.TTL, b.s.lock.TTL)
	}
	return ""
}

// modeServes reports whether a lock held in mode held (limit heldN) excludes at least
// what a block asking for mode want (limit wantN) must exclude.
func modeServes(held string, heldN int, want string, wantN int) bool {
	switch held {
	case modeExclusive:
		return want == modeExclusive || want == modeShared
	case modeShared:
		return want == modeShared
	}
	return want == modeLimit && heldN <= wantN
}

// firstOf is the first of keys that e holds.
func (e *inflight) firstOf(keys []string) string {
	for _, k := range keys {
		if slices.Contains(e.keys, k) {
			return k
		}
	}
	return ""
}

// refusal is the error of a block that can be neither served under the request's held
// lock on key (held by e) nor take its own: it names the key and both blocks.
func (h *Handler) refusal(key string, e *inflight, why string) error {
	return fmt.Errorf("redlock: key %q is already held by this request through another redlock block (%s), %s: "+
		"this block (%s) cannot be served under that lock, nor take its own (it would wait for itself); "+
		"give the blocks the same keys, mode, fencing and ttl, or render different keys",
		key, e.owner.describe(e.mode), why, h.describe(h.s.modeFor("")))
}

// describe names the block in errors for people: its name, or its key templates, and
// what it asks for. Templates come from the config, not from a client.
func (h *Handler) describe(mode string) string {
	var b strings.Builder
	switch {
	case h.Name != "":
		fmt.Fprintf(&b, "name %q", h.Name)
	case len(h.Keys) > 0:
		fmt.Fprintf(&b, "keys %q", h.Keys)
	case h.Key != "":
		fmt.Fprintf(&b, "key %q", h.Key)
	case len(h.Paths) > 0:
		fmt.Fprintf(&b, "path %q", h.Paths[0].Path)
	default:
		b.WriteString("key {http.request.uri.path}")
	}
	switch {
	case len(h.s.shared) > 0:
		b.WriteString(", shared " + strings.Join(sortedMethods(h.s.shared), " "))
	case h.s.limit > 1:
		fmt.Fprintf(&b, ", limit %d", h.s.limit)
	case mode == modeExclusive || mode == "":
		b.WriteString(", exclusive")
	}
	if h.s.fencing {
		b.WriteString(", fencing")
	}
	if h.s.dryRun {
		b.WriteString(", dry_run")
	}
	fmt.Fprintf(&b, ", ttl %v", h.s.lock.TTL.Round(time.Millisecond))
	return b.String()
}

// sortedMethods lists a method set in order, for messages.
func sortedMethods(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// warnCoverClashes says at provision what can be seen then of the rule above: another
// block of the same config, where the same keys live, with a key template in common
// (so the two may render the same key), one in dry run and the other not, or in modes
// that live under other Redis names (exclusive or shared, and `limit`; or two limits).
// Nested, such blocks refuse every request (500); side by side in two routes, an
// exclusive lock and a `limit` place of one key do not exclude each other at all. The
// default key (the path) is left out: blocks of other routes seldom render the same
// path. Ttl and fencing differences are not told: harmless side by side, and nested the
// 500 names them.
func (h *Handler) warnCoverClashes() {
	liveHandlers.mu.Lock()
	var clash *Handler
	for o := range liveHandlers.m {
		if o != h && o.cfgDone == h.cfgDone && o.locker.pooled.space == h.locker.pooled.space &&
			sharesTemplate(o, h) && (o.s.dryRun != h.s.dryRun || o.s.limit != h.s.limit) {
			clash = o
			break
		}
	}
	liveHandlers.mu.Unlock()
	if clash != nil {
		h.logger.Warn("redlock: two redlock blocks can render the same key in dry run and not, or in modes that do not exclude each other "+
			"(an exclusive lock and a limit place live under other Redis names): nested, the inner one refuses every request (500); "+
			"in two routes, their requests are not kept apart. Use different keys (or one mode) for the two",
			zap.String("block", h.describe("")), zap.String("other_block", clash.describe("")))
	}
}

// sharesTemplate reports whether two blocks have a key template in common.
func sharesTemplate(a, b *Handler) bool {
	ta := a.templateSet()
	for _, t := range b.templateSet() {
		if slices.Contains(ta, t) {
			return true
		}
	}
	return false
}

// templateSet is every key template the block names, path templates' keys included.
func (h *Handler) templateSet() []string {
	out := append([]string{h.Key}, h.Keys...)
	for _, p := range h.Paths {
		out = append(out, p.Key)
		out = append(out, p.Keys...)
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}
