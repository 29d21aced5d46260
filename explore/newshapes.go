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

// newShapes are the shapes drawnNewShape may put in place of proxy.
var newShapes = []string{shapeFileServer}

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
}
