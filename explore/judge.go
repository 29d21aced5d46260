package main

// The judge: a case's work log, its clients' outcomes and its faults against the lock's
// promises. Every rule is judged from the order of events on this process's clock, with
// small allowances for what a cancellation takes to travel (slack*).
//
//   - exclusion: two pieces of work of different requests on one key (the keys the
//     request must hold, by the judge's own model of the route: modelKeys) that their
//     modes forbid at once: exclusive with anything, a writer with readers, more than n
//     under limit n; where the blocks around a piece of work differ (mix.go), by the
//     strictest of the enforcing ones naming the key (holdOf). Work counts from its
//     arrival to its end by the upstream's account,
//     work after the client or Caddy gave up included. Allowance: attentive work of a
//     request whose key was taken from under it (force release) counts until the fault.
//   - tokens: with fencing, locked work carries a token, and none below one the upstream
//     already accepted for the key from another request (exclusive modes).
//   - after a loss: no work of a request starts after its lock was surely lost (a force
//     release returned, max_hold ran out, a majority was paused a ttl ago, Caddy stopped),
//     attentive work does not go on past it, the upstream gets no rest of a request
//     body after it, and no byte written after it reaches the client (a response
//     answered as if whole after a loss is one of those).
//   - dry run: never refused (423/503), never cut by a loss.
//   - liveness: no request is refused as busy (423) after a wait in which no other
//     request of the case worked on its keys: it waited for its own lock.
//   - held: after the case no request of it waits or holds in /redlock/locks, no lock key
//     of it stays on the nodes (a drain's ttl and a margin allowed).

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	slackStart  = 30 * time.Millisecond  // a piece of work arriving just as the loss was known
	slackBytes  = 40 * time.Millisecond  // a chunk written as the loss struck
	slackCancel = 300 * time.Millisecond // a cancellation reaching the upstream on a loaded box
	// slackTimer is the slack of a loss a timer strikes (max_hold): on a loaded two-core
	// box a timer fires that late (a force release is known when its call returns); 300 ms
	// was once exceeded at a load average of 8 (a false alarm: seed 100177, not replayed).
	slackTimer = 500 * time.Millisecond
)

// faults is what happened to a case (its own ending, and its batch's global faults).
type faults struct {
	forceStart, forceDone time.Time // the force release call (zero: none)
	forceKey              string
	firstHeld             bool      // the case's first request held its key as the force came (/redlock/locks)
	pauseStart, pauseEnd  time.Time // the majority outage
	stopAt                time.Time
	reloadAt              time.Time
	bypassed              bool // a block with on_unavailable bypass met the outage
}

// verdict is a case's judgement.
type verdict struct {
	violations []string
}

func (v *verdict) add(f string, a ...any) { v.violations = append(v.violations, fmt.Sprintf(f, a...)) }

// holderKind is how a request holds a key.
type holderKind int

const (
	holdExclusive holderKind = iota
	holdReader
	holdLimited
)

// modelKeys is what a piece of work must be done under: the keys of every block around
// it, by the judge's own reading of the route.
func (c *caseSpec) modelKeys(q request, role string) []string {
	return c.keysOf(q, role, false)
}

// enforcedKeys are the model keys some enforcing (not dry-run) block names: those the
// work must truly be done under.
func (c *caseSpec) enforcedKeys(q request, role string) []string {
	if c.lock.dryRun {
		return nil
	}
	return c.keysOf(q, role, true)
}

// anyDry reports whether some block of the case is a dry run.
func (c *caseSpec) anyDry() bool {
	for _, b := range c.blocks {
		if b.dryRun || c.lock.dryRun {
			return true
		}
	}
	return false
}

// enforcingEntry reports whether a /redlock/locks entry of q with key (its keys joined
// by a space) is an enforcing block's: a dry-run block's hold promises nothing, and an
// enforcing block behind it takes a lock of its own (issue 38's rule 2), fresh if the
// dry-run lock was lost first.
func (c *caseSpec) enforcingEntry(q request, key string) bool {
	if c.lock.dryRun {
		return false
	}
	if !c.anyDry() {
		return true // no dry-run block: every entry is an enforcing block's
	}
	// With a dry-run block, only an entry no dry-run block renders is surely an
	// enforcing block's (seed 48166420: both rendered {x:c:b}, and the enforcing one
	// took the key only after the force released the dry-run lock).
	entry := strings.Fields(key)
	same := func(b block) bool {
		ks := c.keyOf(b.keys, q.keyID)
		return len(ks) == len(entry) && !slices.ContainsFunc(entry, func(k string) bool { return !slices.Contains(ks, k) })
	}
	enforcing := false
	for _, b := range c.blocks {
		if same(b) {
			if b.dryRun {
				return false
			}
			enforcing = true
		}
	}
	return enforcing
}

// blocksOver is the blocks around a piece of work the route sent with role: the outer
// and inner ones around all of it, an error route's only around that route's work.
func (c *caseSpec) blocksOver(role string) []block {
	var out []block
	for _, b := range c.blocks {
		if b.where == "error" && !(role == "error" || role == "intercept" || (c.shape == shapeHandleResponse && role == "work")) {
			continue
		}
		out = append(out, b)
	}
	return out
}

func (c *caseSpec) keysOf(q request, role string, enforcedOnly bool) []string {
	var keys []string
	for _, b := range c.blocksOver(role) {
		if enforcedOnly && b.dryRun {
			continue
		}
		for _, k := range c.keyOf(b.keys, q.keyID) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// hold is how a piece of work holds a key: by the strictest rule of the enforcing blocks
// around it that name the key (blocks of one case may differ in mode and limit: mix.go).
// A dry-run block is no lock at all. Exclusive (a writer of a shared lock too) is
// stricter than a limit, a limit stricter than a reader, limit n stricter than limit m > n.
type hold struct {
	kind holderKind
	n    int // limit n
}

func (c *caseSpec) holdOf(q request, role, key string) hold {
	method := q.method
	if c.shape == shapeTemplates {
		method = "GET" // the virtual request httpInclude makes
	}
	var h hold
	found := false
	for _, b := range c.blocksOver(role) {
		if b.dryRun || c.lock.dryRun || !slices.Contains(c.keyOf(b.keys, q.keyID), key) {
			continue
		}
		mode, n := c.modeOf(b)
		k := hold{kind: holdExclusive}
		switch {
		case mode == modeShared && method == "GET":
			k = hold{kind: holdReader}
		case mode == modeLimit:
			k = hold{kind: holdLimited, n: n}
		}
		switch {
		case !found:
			h, found = k, true
		case k.kind == holdExclusive || h.kind == holdExclusive:
			h = hold{kind: holdExclusive}
		case k.kind == holdLimited && h.kind == holdLimited:
			h.n = min(h.n, k.n)
		case k.kind == holdLimited:
			h = k
		}
	}
	if !found {
		return hold{kind: holdExclusive} // not reached: the key is an enforcing block's
	}
	return h
}

// underMaxHold reports whether work of role runs under an enforcing block with max_hold.
func (c *caseSpec) underMaxHold(role string) bool {
	if c.lock.dryRun {
		return false
	}
	for _, b := range c.blocksOver(role) {
		if !b.dryRun && (c.lock.maxHold || b.maxHold) {
			return true
		}
	}
	return false
}

func (c *caseSpec) request(id string) (request, bool) {
	for _, q := range c.reqs {
		if q.id == id {
			return q, true
		}
	}
	return request{}, false
}

// lossAt is when q's lock was surely lost (zero: never), and whether the key was taken
// from under it (external: the allowance of the exclusion rule). A loss a timer strikes
// (max_hold) is given slackTimer more.
func (c *caseSpec) lossAt(q request, role string, works []work, f faults) (at time.Time, external bool) {
	at, external, timer := c.lossAtTimer(q, role, works, f)
	if timer {
		at = at.Add(slackTimer)
	}
	return at, external
}

func (c *caseSpec) lossAtTimer(q request, role string, works []work, f faults) (at time.Time, external, timer bool) {
	// The first work of q under an enforcing lock of the forced key (or of any key): work
	// of a dry-run block's role holds nothing, and an enforcing block behind it takes a
	// lock of its own, fresh if it comes after the force.
	first := time.Time{}
	for _, w := range works {
		if w.req == q.id && len(c.enforcedKeys(q, w.role)) > 0 && (first.IsZero() || w.start.Before(first)) {
			first = w.start
		}
	}
	heldAtForce := (!first.IsZero() && first.Before(f.forceStart)) || (f.firstHeld && q.id == c.reqs[0].id)
	if first.IsZero() && !heldAtForce {
		return time.Time{}, false, false
	}
	if !f.forceDone.IsZero() && heldAtForce && slices.Contains(c.enforcedKeys(q, "work"), f.forceKey) {
		at, external = f.forceDone, true
	}
	if !f.pauseStart.IsZero() && !first.IsZero() && first.Before(f.pauseStart) && len(c.enforcedKeys(q, "work")) > 0 {
		if t := f.pauseStart.Add(caseTTL); at.IsZero() || t.Before(at) {
			at, external, timer = t, true, true // the validity's timer cuts
		}
	}
	// max_hold: counted from the request's first locked work (its acquire came before);
	// it cuts only the work under a block that has it (mix.go: one block of two may).
	if c.underMaxHold(role) && !first.IsZero() && len(c.enforcedKeys(q, role)) > 0 {
		if t := first.Add(maxHoldTime); at.IsZero() || t.Before(at) {
			at, external, timer = t, false, true
		}
	}
	return at, external, timer
}

// judge judges one case.
func (c *caseSpec) judge(works []work, outs []outcome, f faults, leftLocks, leftKeys []string) verdict {
	var v verdict
	end := func(w work) time.Time {
		if w.done {
			return w.end
		}
		return time.Now()
	}
	chunkAt := map[chunkRef]time.Time{}
	for _, w := range works {
		if avoidIssue38 && errorRole(w.role) {
			continue // error routes run on Caddy's request, which a loss cannot cut yet (issue 38 rule 1)
		}
		for i, t := range w.chunks {
			chunkAt[chunkRef{w.req, w.n, i}] = t
		}
	}

	// Exclusion.
	if !c.lock.dryRun && !f.bypassed {
		type span struct {
			w        work
			from, to time.Time
			kind     hold
		}
		byKey := map[string][]span{}
		for _, w := range works {
			q, ok := c.request(w.req)
			if !ok {
				continue
			}
			to := end(w)
			// A FastCGI application is not stopped by a loss (Caddy's transport ignores the
			// request's context once dialled; docs/safety.md): only its input and output are.
			// With EXPLORE_AVOID=issue38, an error route running as the loss struck is not
			// asked to stop (issue 38 rule 1); one that starts after it is judged in full.
			stopped := w.how == endCancelled || w.via == "fcgi" || (avoidIssue38 && errorRole(w.role) && w.start.Before(f.forceStart))
			if at, ext := c.lossAt(q, w.role, works, f); ext && stopped && !f.forceStart.IsZero() && to.After(f.forceStart) && at == f.forceDone {
				to = f.forceStart
			}
			for _, k := range c.enforcedKeys(q, w.role) {
				byKey[k] = append(byKey[k], span{w, w.start, to, c.holdOf(q, w.role, k)})
			}
		}
		for k, ss := range byKey {
			reported := map[string]bool{}
			for i, a := range ss {
				// Those overlapping a, of other requests.
				var with []span
				for j, b := range ss {
					if i != j && a.w.req != b.w.req && a.from.Before(b.to) && b.from.Before(a.to) {
						with = append(with, b)
					}
				}
				bad := ""
				for _, b := range with {
					if (a.kind.kind == holdExclusive || b.kind.kind == holdExclusive) && (a.w.start.Before(b.w.start) || (a.w.start.Equal(b.w.start) && a.w.req < b.w.req)) {
						// Each pair once: from the one that started first.
						bad = fmt.Sprintf("%s (%s) and %s (%s)", describe(a.w), kindName(a.kind.kind), describe(b.w), kindName(b.kind.kind))
						break
					}
				}
				if bad == "" && a.kind.kind == holdLimited {
					// More than n requests at the moment a started, n the strictest limit
					// of any of them?
					reqs := map[string]bool{a.w.req: true}
					var who []string
					limit := a.kind.n
					for _, b := range with {
						if b.kind.kind == holdLimited && !b.from.After(a.from) && b.to.After(a.from) && !reqs[b.w.req] {
							reqs[b.w.req] = true
							who = append(who, describe(b.w))
							limit = min(limit, b.kind.n)
						}
					}
					if n := len(reqs); n > limit {
						bad = fmt.Sprintf("%s started while %d others held it under limit %d: %s", describe(a.w), n-1, limit, strings.Join(who, ", "))
					}
				}
				if bad != "" && !reported[bad] {
					reported[bad] = true
					v.add("exclusion: key %s: %s worked at once", k, bad)
				}
			}
		}
	}

	// Tokens.
	if c.lock.fencing && !c.anyDry() && !f.bypassed {
		sorted := slices.Clone(works)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].start.Before(sorted[j].start) })
		best := map[string]struct {
			tok int64
			req string
		}{}
		for _, w := range sorted {
			q, ok := c.request(w.req)
			if !ok {
				continue
			}
			if w.token == "" {
				v.add("tokens: %s reached the fenced upstream without a fencing token", describe(w))
				continue
			}
			keys := c.modelKeys(q, w.role)
			for k, tok := range parseTokens(w.token, keys) {
				if c.holdOf(q, w.role, k).kind != holdExclusive {
					continue
				}
				if b, ok := best[k]; ok && tok < b.tok && b.req != w.req {
					v.add("tokens: %s carried token %d for %s, below %d already accepted from %s", describe(w), tok, k, b.tok, b.req)
				}
				if b, ok := best[k]; !ok || tok > b.tok {
					best[k] = struct {
						tok int64
						req string
					}{tok, w.req}
				}
			}
		}
	}

	// After a loss, and Caddy stopping.
	if !c.lock.dryRun {
		for _, q := range c.reqs {
			// The loss is per piece of work: a max_hold cuts only what runs under a block
			// that has it (mix.go: one block of two may).
			roleOf := map[int]string{}
			for _, w := range works {
				if w.req != q.id {
					continue
				}
				roleOf[w.n] = w.role
				if at, _ := c.lossAt(q, w.role, works, f); !at.IsZero() {
					if w.start.After(at.Add(slackStart)) {
						v.add("after loss: %s started %s after its lock was surely lost", describe(w), ms(w.start.Sub(at)))
					}
					if !w.bodyEnd.IsZero() && w.start.Before(at) && w.bodyEnd.After(at.Add(slackCancel)) && !(avoidIssue38 && w.via == "fcgi") {
						v.add("after loss: %s got the rest of its request body %s after its lock was lost", describe(w), ms(w.bodyEnd.Sub(at)))
					}
					if !w.spec.deaf && w.via != "fcgi" && !(avoidIssue38 && errorRole(w.role)) && w.start.Before(at) && end(w).After(at.Add(slackCancel)) && !c.underMaxHold(w.role) {
						v.add("after loss: attentive %s went on %s after its lock was lost", describe(w), ms(end(w).Sub(at)))
					}
				}
			}
			for _, o := range outs {
				if o.req != q.id {
					continue
				}
				for _, ref := range o.chunks {
					at, _ := c.lossAt(q, roleOf[ref.n], works, f)
					if t, ok := chunkAt[ref]; ok && !at.IsZero() && t.After(at.Add(slackBytes)) {
						v.add("after loss: %s's client got chunk %d of piece %d, written %s after the loss (whole: %v)", q.id, ref.i, ref.n, ms(t.Sub(at)), o.whole)
						break
					}
				}
			}
		}
	}

	// Dry run.
	if c.lock.dryRun {
		for _, o := range outs {
			if o.status == 423 || (o.status == 503 && c.ending != endFail) {
				v.add("dry run: %s was refused with %d", o.req, o.status)
			}
			q, _ := c.request(o.req)
			if q.id == c.reqs[0].id && (externalLoss(c.ending) || c.ending == endMaxHold) && f.stopAt.IsZero() && !o.aborted && (o.status == 200 || o.status == 101) && !o.whole && c.shape != shapeTemplates {
				v.add("dry run: %s was cut (a dry run never cuts): %s", o.req, o.err)
			}
		}
	}

	c.judgeLiveness(&v, works, outs, f, end)
	c.judgeBodyMax(&v, works, outs)
	c.judgeDenied(&v, works, outs)
	c.judgeWebsocket(&v, works, f, end)

	for _, l := range leftLocks {
		v.add("held: after the case, /redlock/locks still lists %s", l)
	}
	for _, k := range leftKeys {
		v.add("held: after the case, a lock key stays on a node: %s", k)
	}
	return v
}

// parseTokens reads a fencing header: "key=token,key=token" (keys percent-encoded), or
// one bare token, which belongs to the only key when there is one.
func parseTokens(h string, keys []string) map[string]int64 {
	out := map[string]int64{}
	if !strings.Contains(h, "=") {
		if len(keys) == 1 {
			if t, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64); err == nil {
				out[keys[0]] = t
			}
		}
		return out
	}
	for p := range strings.SplitSeq(h, ",") {
		k, t, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			k = strings.ReplaceAll(k, "%3A", ":")
			out[k] = n
		}
	}
	return out
}

func kindName(k holderKind) string {
	return [...]string{"exclusive", "reader", "limited"}[k]
}

func describe(w work) string {
	return fmt.Sprintf("%s/%s#%d", w.req, w.role, w.n)
}

func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// errorRole: work an error route sent (handle_errors, intercept's handle_response).
func errorRole(role string) bool { return role == "error" || role == "intercept" }
