package main

// request_body { max_size } in front of the lock (issue 39). A case with it (1 in 8)
// caps bodies at bodyMax bytes, more than its small bodies and less than the others:
//   - a body whose length is told and too long ("big" requests, and the fastcgi shape's
//     sized trickles) is refused 413 by request_body before the lock: no work at all;
//   - a trickled body of unknown length ("slowbody") passes the cap mid-upload, inside
//     reverse_proxy, under the lock: a 4xx on a request with a body, which drains
//     (docs/configuration.md, "What happens to a request"): the upstream may have begun.
//     The judge's usual rules hold it (exclusion while deaf work goes on).

import "math/rand/v2"

// bodyMax is the cap: "payload c999999.3" (17 bytes) passes, a trickle's four pieces
// (32 bytes) and a big body (64) do not.
const bodyMax = 24

// bigBody is what a "big" request sends, its length told.
const bigBody = 64

// drawBodyMax draws the cap and the big requests, on a stream of its own so that the
// cases of other seeds (and the revert table's seeds) stay what they were.
func (c *caseSpec) drawBodyMax() {
	if avoidIssue39 {
		return
	}
	r := rand.New(rand.NewPCG(c.seed^0x626f64796d617821, c.seed))
	if r.IntN(8) != 0 || c.ending == endBodyAfter {
		return // bodyafter's body must reach the lock: its loss is the ending
	}
	c.bodyMax = true
	for i := 1; i < len(c.reqs); i++ {
		if c.reqs[i].client == "normal" && r.IntN(2) == 0 {
			c.reqs[i].client, c.reqs[i].method = "big", "POST"
		}
	}
}

// tooBigTold reports whether q's body is over the cap with its length told: request_body
// refuses it before any handler behind it runs.
func (c *caseSpec) tooBigTold(q request) bool {
	return c.bodyMax && (q.client == "big" || (q.client == "slowbody" && q.sized))
}

// judgeBodyMax: a request refused by request_body got 413 (or nothing, when Caddy stopped
// or reloaded under it) and no piece of work.
func (c *caseSpec) judgeBodyMax(v *verdict, works []work, outs []outcome) {
	if !c.bodyMax {
		return
	}
	for _, o := range outs {
		q, ok := c.request(o.req)
		if !ok || !c.tooBigTold(q) {
			continue
		}
		if o.status != 0 && o.status != 413 {
			v.add("request_body: %s sent a body over max_size with its length told and got %d, not 413", o.req, o.status)
		}
		for _, w := range works {
			if w.req == q.id {
				v.add("request_body: %s sent a body over max_size with its length told, yet work ran: %s", o.req, describe(w))
			}
		}
	}
}
