package main

// Shapes added for issue 39, drawn in place of some cases of the proxy shape, on a
// stream of their own: the cases of every other seed (and the seeds the revert table
// names) stay what they were. EXPLORE_AVOID=issue39 leaves them, the `vars`/`map` keys
// (keyvia.go) and request_body (bodymax.go) out, for replaying seeds measured before.

import "math/rand/v2"

// shapeFileServer: the locked route begins with `file_server { pass_thru }` over a root
// where no request's file exists, behind `try_files {path} {path}/index.html` before the
// route: a missing file falls through to the locked proxy, inside the lock.
const shapeFileServer = "fileserver"

// shapeForwardAuth: `forward_auth` asks the upstream's /auth (answered at once, no work)
// before the proxy, inside the lock or, half the time, before it (at the site, where
// Caddy's directive order puts it ahead of the route). Some requests (deny) are refused:
// the auth answer, 401, is the client's, and no work runs for them.
const shapeForwardAuth = "forwardauth"

// shapeCopyResponse: the proxy's 2xx answers go through `handle_response` with
// `copy_response`, which reads the upstream's whole response to the client under the
// lock: the covered form (docs/safety.md). A handle_response route that answers by
// itself is a documented hole, not drawn.
const shapeCopyResponse = "copyresponse"

// newShapes are the shapes drawnNewShape may put in place of proxy.
var newShapes = []string{shapeFileServer, shapeForwardAuth, shapeCopyResponse}

// avoidIssue39 is EXPLORE_AVOID=issue39.
var avoidIssue39 bool

// drawNewShape replaces the proxy shape, half the time, by one of newShapes.
func (c *caseSpec) drawNewShape() {
	if avoidIssue39 || c.shape != shapeProxy {
		return
	}
	r := rand.New(rand.NewPCG(c.seed^0x7368617065733339, c.seed))
	if r.IntN(2) == 0 {
		c.shape = pick(r, newShapes)
	}
	if c.shape == shapeForwardAuth {
		c.authInside = r.IntN(2) == 0
		for i := 1; i < len(c.reqs); i++ {
			c.reqs[i].deny = r.IntN(2) == 0
		}
	}
}

// forwardAuth is the case's forward_auth directive.
func forwardAuth(e *env) string {
	return "forward_auth " + e.up + " {\n\turi /auth\n}\n"
}

// judgeDenied: a request forward_auth refused got no 2xx and ran no work.
func (c *caseSpec) judgeDenied(v *verdict, works []work, outs []outcome) {
	for _, o := range outs {
		q, ok := c.request(o.req)
		if !ok || !q.deny {
			continue
		}
		if o.status >= 200 && o.status < 300 {
			v.add("forward_auth: %s was denied by the auth endpoint and got %d", o.req, o.status)
		}
		for _, w := range works {
			if w.req == q.id {
				v.add("forward_auth: %s was denied, yet work ran: %s", o.req, describe(w))
			}
		}
	}
}
