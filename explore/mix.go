package main

// Mixes: a case's two blocks (nested, or the outer one and one in an error route) on one
// key, differing in one option. A block asking for a key its request already holds is
// served under that lock only if the lock gives it everything it asks for (cover.go);
// otherwise it is refused (500). Each mix comes with the ending and the work that tell
// whether the served block got what it asked for (issue 38 item 5 and round 5's rules):
//
//   - mixDry: the outer block in dry run, the other enforcing. Served under the dry-run
//     lock, the enforcing block's work would go on past a force release (a dry run cuts
//     nothing) beside the next holder.
//   - mixLimit: limit 3 and limit 2 (either way round), four requests on one id: served
//     under limit 3, a limit 2 block's work would run three at once.
//   - mixMode: two of exclusive, shared, limit 2: refused unless the held mode excludes
//     all the other's does (the judge holds each piece of work to its strictest block).
//   - mixMaxHold: only the second block has max_hold: served under a lock without one,
//     its work must still be cut at its own max_hold (a long streamed work shows it).
//   - mixFastCGIErr: the error route's proxy is a FastCGI transport (which a cancelled
//     context does not stop once dialled) and its block is served under the outer's
//     lock; a force release while it streams: its own watch must refuse the writes
//     (Caddy runs error routes with its own writer, out of the outer block's reach).

import "math/rand/v2"

const (
	mixDry        = "dry"
	mixLimit      = "limit"
	mixMode       = "mode"
	mixMaxHold    = "maxhold"
	mixFastCGIErr = "fcgierr"
)

// errorShape: a shape whose second block sits in an error route Caddy runs after the
// handler returned (its writer is Caddy's, not the outer block's).
func errorShape(s string) bool {
	return s == shapeHandleErrors || s == shapeSubrouteErrors || s == shapeIntercept
}

// drawMix makes the case's second block name the outer's keys and differ in one option,
// and fits the ending to it.
func (c *caseSpec) drawMix(r *rand.Rand) {
	mixes := []string{mixDry, mixDry, mixLimit, mixMode, mixMaxHold}
	if errorShape(c.shape) && c.blocks[1].where == "error" {
		mixes = append(mixes, mixFastCGIErr, mixFastCGIErr)
	}
	c.mix = pick(r, mixes)
	outer, second := &c.blocks[0], &c.blocks[1]
	outer.dryRun = false
	second.keys = outer.keys
	switch c.mix {
	case mixDry:
		outer.dryRun = true
		c.ending = endForce
	case mixLimit:
		c.lock.mode, c.lock.limit = modeLimit, 3
		second.mode, second.limit = modeLimit, 2
		if r.IntN(3) == 0 { // the other way round: served, under limit 2
			c.lock.limit, second.limit = 2, 3
		}
		c.ending = endClean
	case mixMode:
		modes := []string{modeExclusive, modeShared, modeLimit}
		a := r.IntN(3)
		b := (a + 1 + r.IntN(2)) % 3
		c.lock.mode, c.lock.limit = modes[a], 2
		second.mode, second.limit = modes[b], 2
	case mixMaxHold:
		second.maxHold = true
		c.ending = endMaxHold
	case mixFastCGIErr:
		c.ending = endForce
	}
	c.lock.maxHold = false // the case's blocks share max_hold only with the maxhold ending and no mix
	c.lock.bypass = false
}

// fixMixRequests sets the work a mix needs, once fixRequests has fitted the ending.
func (c *caseSpec) fixMixRequests() {
	if c.mix == "" {
		return
	}
	for i := range c.reqs {
		c.reqs[i].errWork = "d=120ms,stream"
	}
	q := &c.reqs[0]
	long := ""
	switch c.mix {
	case mixLimit:
		for i := range c.reqs {
			c.reqs[i].keyID = "a"
			c.reqs[i].work = "d=400ms,stream"
			c.reqs[i].first = ""
			if c.reqs[i].client == "abort" {
				c.reqs[i].client = "normal"
			}
		}
		return
	case mixMaxHold:
		// Attentive and long: cut at 300 ms, it would otherwise stream for 1.5 s.
		long = "d=1500ms,stream"
	case mixFastCGIErr, mixDry:
		// Under the second block as the force comes (80-230 ms).
		long = "d=700ms,stream"
	default:
		return
	}
	q.first = ""
	switch c.shape {
	case shapeHandleErrors:
		q.work, q.errWork = "d=50ms,fail", long
	case shapeIntercept:
		q.work, q.errWork = "d=50ms", long
	default: // the route or the error route proxies the request's own work
		q.work = long
	}
}
