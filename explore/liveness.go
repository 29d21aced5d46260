package main

// The liveness rule: a request refused as busy (423) once its wait ran out, although no
// other request of its case worked on any of its keys while it waited, waited for a
// lock nobody else held: its own (a block asking for a key its request already holds
// through another block must be served under that lock, or refused at once: cover.go).
//
// Every other way a key stays taken for a whole wait (3 s) shows in the work log: a
// holder holds while its request's work runs (logged from its arrival at the upstream,
// work after the client left included), and a drain after a cut lasts one ttl (1 s).
// Left out: endings where a key is taken with no work to show (an outage: 503, not
// 423; Caddy stopping or reloading; an upstream never dialled), and dry runs (never
// refused: their own rule).

import (
	"slices"
	"time"
)

func (c *caseSpec) judgeLiveness(v *verdict, works []work, outs []outcome, f faults, end func(work) time.Time) {
	switch {
	case c.lock.dryRun, f.bypassed, c.ending == endOutage, c.ending == endStop, c.ending == endReload, c.ending == endNoDial:
		return
	}
	if !f.pauseStart.IsZero() || !f.stopAt.IsZero() || !f.reloadAt.IsZero() {
		return // a global fault of the batch
	}
	for _, o := range outs {
		q, ok := c.request(o.req)
		if !ok || o.status != 423 || o.ended.Sub(o.sent) < caseWait-slackCancel {
			continue
		}
		mine := c.allKeys(q)
		busy := false
		for _, w := range works {
			p, ok := c.request(w.req)
			if !ok || p.id == q.id || !w.start.Before(o.ended) || !end(w).After(o.sent) {
				continue
			}
			if slices.ContainsFunc(c.modelKeys(p, w.role), func(k string) bool { return slices.Contains(mine, k) }) {
				busy = true
				break
			}
		}
		if !busy {
			v.add("liveness: %s was refused 423 after waiting %s, while no other request of the case worked on its keys %v: it waited for its own lock",
				q.id, ms(o.ended.Sub(o.sent)), mine)
		}
	}
}

// allKeys is every key some block of the case may take for q, in any route.
func (c *caseSpec) allKeys(q request) []string {
	var keys []string
	for _, b := range c.blocks {
		for _, k := range c.keyOf(b.keys, q.keyID) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}
