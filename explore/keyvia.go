package main

// Keys fed by other handlers: a case may take its blocks' keys from `vars` or `map`
// outputs (issue 39) instead of path placeholders. Those handlers render from Caddy's
// raw path, not the lock's normalized one (docs/configuration.md, "Keys"): `/c/./a/x`
// gives them "." where the lock's own {path.1} gives "a". That is documented, not a
// hole, so such cases spell their paths plainly; what they check is that a key made by
// another handler, late (map evaluates lazily, on the lock's first look), in error
// routes and virtual requests too, is the key the lock takes and holds.

import (
	"math/rand/v2"
	"strings"
)

const (
	viaPath = ""     // {path.0}:{path.1} in the key templates
	viaVars = "vars" // vars { lane {path.0}  rid {path.1} }, keys x:{vars.lane}:{vars.rid}
	viaMap  = "map"  // map {path.1} {map.rid} { a a  b b  default none }, keys x:{path.0}:{map.rid} (the lock wants dotted names)
)

// drawKeyVia draws where the case's key parts come from, on a stream of its own so that
// the cases of other seeds (and the revert table's seeds) stay what they were.
func (c *caseSpec) drawKeyVia() {
	if avoidIssue39 {
		return
	}
	r := rand.New(rand.NewPCG(c.seed^0x6b65797669612121, c.seed))
	switch r.IntN(8) {
	case 0:
		c.keyVia = viaVars
	case 1:
		c.keyVia = viaMap
	}
	if c.keyVia != viaPath {
		for i := range c.reqs {
			c.reqs[i].spell = "plain"
		}
	}
}

// viaKey rewrites a key line's path placeholders to the case's source.
func (c *caseSpec) viaKey(line string) string {
	switch c.keyVia {
	case viaVars:
		return strings.NewReplacer("{path.0}", "{vars.lane}", "{path.1}", "{vars.rid}").Replace(line)
	case viaMap:
		return strings.ReplaceAll(line, "{path.1}", "{map.rid}")
	}
	return line
}

// viaHandlers is what the site runs before its route to make those values.
func (c *caseSpec) viaHandlers() string {
	switch c.keyVia {
	case viaVars:
		return "vars {\n\tlane {path.0}\n\trid {path.1}\n}\n"
	case viaMap:
		return "map {path.1} {map.rid} {\n\ta a\n\tb b\n\tdefault none\n}\n"
	}
	return ""
}
