package main

// The generator: a case drawn from its seed. A case is one site's route tree (the shape
// of the work behind the lock and where the redlock blocks sit in it, with their keys
// and options), a few concurrent requests on a few keys, and an ending. Everything
// random is drawn here, from the seed alone, so that a seed names its case.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Timing every case shares. A ttl of a second keeps drains short (cases per minute);
// deaf work goes on at most deafMax after its request was cut, well within a drain.
const (
	caseTTL     = 1 * time.Second
	caseWait    = 3 * time.Second
	maxHoldTime = 300 * time.Millisecond
	deafMax     = 300 * time.Millisecond
	hdrTimeout  = 250 * time.Millisecond
)

// Shapes: how Caddy runs the work behind (and around) the lock.
const (
	shapeProxy          = "proxy"          // reverse_proxy
	shapeStream         = "stream"         // reverse_proxy flush_interval -1
	shapeRetry          = "retry"          // lb_retries / lb_try_duration over two upstreams, response_header_timeout
	shapeHandleResponse = "handleresponse" // a first hop answers X-Accel-Redirect, handle_response proxies the work
	shapeFastCGI        = "fastcgi"        // reverse_proxy transport fastcgi (net/http/fcgi)
	shapeHandleErrors   = "handleerrors"   // the upstream fails (502), handle_errors proxies again
	shapeIntercept      = "intercept"      // the upstream answers 500, intercept's handle_response proxies again
	shapeNested         = "nested"         // two redlock blocks, one inside the other
	shapeRewrite        = "rewrite"        // rewrite before the lock: the key from the original path
	shapeEncode         = "encode"         // encode gzip around the proxy
	shapeTemplates      = "templates"      // templates with httpInclude of a locked path (a virtual request)
	shapeSubrouteErrors = "subrouteerrors" // handleerrors with the error routes in the site's subroute (JSON only)
)

var shapes = []string{shapeProxy, shapeStream, shapeRetry, shapeHandleResponse, shapeFastCGI,
	shapeHandleErrors, shapeIntercept, shapeNested, shapeRewrite, shapeEncode, shapeTemplates, shapeSubrouteErrors}

// Endings, one per case. The first group touches only the case; the global ones
// (outage, reload, stop) touch every case of the batch it runs in.
const (
	endClean     = "clean"
	endAbort     = "abort"     // a client leaves early
	endFail      = "fail"      // the upstream answers 502 after its work
	endClose     = "close"     // the upstream closes the connection midway
	endTimeout   = "timeout"   // response_header_timeout (FastCGI: read_timeout) gives up
	endNoDial    = "nodial"    // the upstream is never dialled (nothing listens)
	endForce     = "force"     // DELETE /redlock/keys while a request works
	endMaxHold   = "maxhold"   // max_hold runs out while the upstream works
	endOutage    = "outage"    // 3 of 5 nodes paused (SIGSTOP) past the ttl: a real loss
	endReload    = "reload"    // a config reload while requests run
	endStop      = "stop"      // Caddy stops while requests run
	endBodyAfter = "bodyafter" // a slow body still arriving when the lock is lost (force)
)

var endings = []string{endClean, endAbort, endFail, endClose, endTimeout, endNoDial, endForce,
	endMaxHold, endOutage, endReload, endStop, endBodyAfter}

func globalEnding(e string) bool { return e == endOutage || e == endReload || e == endStop }

// externalLoss: the key is gone from under the holder (deleted or unreachable).
func externalLoss(e string) bool { return e == endForce || e == endOutage || e == endBodyAfter }

// Lock modes of a case's blocks (one per case: nested blocks of one case agree).
const (
	modeExclusive = "exclusive"
	modeShared    = "shared" // GET requests are readers
	modeLimit     = "limit"
)

// keyKind is what a block's key is made of.
const (
	keyID       = "id"      // key x:{path.0}:{path.1}: the id segment, through path placeholders
	keyCapture  = "capture" // path /{ln}/{id}/* x:{ln}:{id}: the block's own capture
	keyAll      = "all"     // x:{path.0}:all: every request of the case
	keyIDAndAll = "id+all"  // both: a superset of either
	keyOther    = "other"   // y:{path.0}:{path.1}: a key no other block names
)

var keyKinds = []string{keyID, keyCapture, keyAll, keyIDAndAll, keyOther}

// keyApart is z:{path.0}:{path.1}, a key only a second block names. With
// EXPLORE_AVOID=issue38 the blocks inside another take only such keys, so that no case
// reaches the path where a block is served under a lock its request already holds, and
// the judge does not ask a loss to stop an error route (issue 38 items 1-5 and its rule
// 1, open as this is written: they fail most runs and would hide the reverts
// docs/explore.md measures).
const keyApart = "apart"

// avoidIssue38 is EXPLORE_AVOID=issue38.
var avoidIssue38 bool

// block is one redlock block.
type block struct {
	where  string // "outer", "inner", "error" (in handle_errors / intercept / handle_response)
	keys   string // a keyKind
	dryRun bool   // this block alone is a dry run (mixedDry: the outer block of a case)
	// Options of this block alone, where the case's blocks differ (mix): mode "" is the
	// case's mode (and limit); maxHold gives this block alone max_hold.
	mode    string
	limit   int
	maxHold bool
}

// spec is the lock options every block of the case has.
type lockSpec struct {
	mode    string
	limit   int
	fencing bool
	dryRun  bool
	maxHold bool
	bypass  bool // on_unavailable bypass
}

// request is one client request of a case.
type request struct {
	id      string // "<case>.<n>"
	keyID   string // "a" or "b": the id segment
	spell   string // how the path is spelled: "plain", "dot", "double", "dotdot"
	method  string
	at      time.Duration // when it is sent, from the case's start
	work    string        // X-Work
	errWork string        // X-Work-Err: the work of the case's error route, where the mix sets it
	first   string        // X-Work-First (the retry shape's slow first attempt)
	client  string        // "normal", "abort", "slowbody", "expect", "h2c", "big" (bodymax.go)
	// sized: a slow body with its length told (Content-Length) whose first 5000 bytes come
	// at once: Caddy's FastCGI transport buffers the first 4 KiB, then streams the rest
	// to the application as it arrives (a trickled body of unknown length it buffers whole).
	sized bool
	deny  bool // forward_auth refuses it (X-Auth: deny; newshapes.go)
	// A websocket client's plan (client "ws": wsclient.go): wsMsgs messages wsGap apart;
	// it leaves after wsLeave of them (0: it closes), with a reset if wsReset.
	wsMsgs, wsLeave int
	wsGap           time.Duration
	wsReset         bool
	abortAt         time.Duration // for "abort": when the client leaves, from its send
}

// caseSpec is one case.
type caseSpec struct {
	seed    uint64
	lane    string // "c<seed mod 1e6>", the first path segment and the key namespace
	shape   string
	lock    lockSpec
	blocks  []block
	reqs    []request
	ending  string
	faultAt time.Duration // the ending's moment (force, reload, stop, outage), from the start
	target  string        // for force: the key released (as rendered)
	// nestedRetry: the handle_response shape's second hop retries (lb_retries 1,
	// response_header_timeout) after a slow first attempt.
	nestedRetry bool
	// mix: how the case's two blocks differ on one key (mix.go; "" none).
	mix string
	// keyVia: where the keys' path parts come from (keyvia.go; "" the path placeholders).
	keyVia string
	// authInside: the forwardauth shape's forward_auth is inside the lock (newshapes.go).
	authInside bool
	// bodyMax: request_body { max_size bodyMax } before the route (bodymax.go).
	bodyMax bool
}

// generate draws the case of seed.
func generate(seed uint64) *caseSpec {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := &caseSpec{seed: seed, lane: fmt.Sprintf("c%d", seed%1_000_000)}
	c.shape = pick(r, shapes)
	if avoidIssue38 && c.shape == shapeSubrouteErrors {
		c.shape = shapeHandleErrors // issue 38 item 6
	}
	c.ending = pick(r, endings)
	if c.shape == shapeFastCGI && r.IntN(3) == 0 {
		// A body whose rest arrives after a loss, behind an application that reads its
		// whole stdin before it works (PHP-FPM): issue 38 item 7.
		c.ending = endBodyAfter
	}
	c.fixEnding(r)

	switch p := r.IntN(10); {
	case p < 6:
		c.lock.mode = modeExclusive
	case p < 8:
		c.lock.mode = modeShared
	default:
		c.lock.mode, c.lock.limit = modeLimit, 2
	}
	c.lock.fencing = r.IntN(2) == 0
	c.lock.dryRun = r.IntN(10) == 0
	c.lock.maxHold = c.ending == endMaxHold
	c.lock.bypass = r.IntN(8) == 0 && c.ending != endOutage

	c.blocks = []block{{where: "outer", keys: pick(r, keyKinds)}}
	second := func() string {
		k := pick(r, keyKinds)
		if avoidIssue38 {
			return keyApart
		}
		return k
	}
	if c.shape == shapeNested {
		c.blocks = append(c.blocks, block{where: "inner", keys: second()})
	}
	switch c.shape {
	case shapeHandleErrors, shapeSubrouteErrors, shapeIntercept, shapeHandleResponse:
		if r.IntN(3) != 0 {
			c.blocks = append(c.blocks, block{where: "error", keys: second()})
		}
	}
	// Now and then a dry-run block around an enforcing one (a site-wide rollout and a
	// route's own lock): the enforcing block's promise must hold whatever the outer does.
	if len(c.blocks) > 1 && !c.lock.dryRun && r.IntN(4) == 0 {
		c.blocks[0].dryRun = true
	}
	// Half the cases with two blocks put one key in both, differing in one option (mix.go).
	if len(c.blocks) > 1 && !c.lock.dryRun && !avoidIssue38 && r.IntN(2) == 0 {
		c.drawMix(r)
	}

	n := 2 + r.IntN(3)
	if c.mix == mixLimit {
		n = 4 // three at once to pass limit 2
	}
	for i := range n {
		c.reqs = append(c.reqs, c.drawRequest(r, i))
	}
	c.fixRequests(r)
	c.fixMixRequests()
	c.drawKeyVia()
	c.drawBodyMax()
	c.drawNewShape()
	c.drawWebsocket()
	return c
}

// fixEnding makes the ending fit the shape.
func (c *caseSpec) fixEnding(r *rand.Rand) {
	switch {
	case c.ending == endTimeout && c.shape == shapeTemplates,
		c.ending == endClose && c.shape == shapeFastCGI:
		c.ending = endClean
	}
	c.faultAt = time.Duration(80+r.IntN(150)) * time.Millisecond
}

func (c *caseSpec) drawRequest(r *rand.Rand, i int) request {
	q := request{id: fmt.Sprintf("%s.%d", c.lane, i), keyID: pick(r, []string{"a", "a", "b"}),
		spell:  pick(r, []string{"plain", "plain", "dot", "double", "dotdot"}),
		method: pick(r, []string{"GET", "GET", "POST"}), client: "normal"}
	if i > 0 {
		q.at = time.Duration(r.IntN(200)) * time.Millisecond
	}
	d := 60 + r.IntN(240)
	q.work = fmt.Sprintf("d=%dms", d)
	if r.IntN(2) == 0 || c.shape == shapeStream {
		q.work += ",stream"
	}
	if r.IntN(4) == 0 && !externalLoss(c.ending) && !c.lock.dryRun {
		q.work += ",deaf"
	}
	switch p := r.IntN(10); {
	case p < 5:
	case p < 6:
		q.client, q.abortAt = "abort", time.Duration(30+r.IntN(150))*time.Millisecond
	case p < 8:
		q.client, q.method = "slowbody", "POST"
		q.sized = c.shape == shapeFastCGI
	case p < 9:
		q.client, q.method = "expect", "POST"
	default:
		q.client = "h2c"
	}
	return q
}

// fixRequests makes the first request carry the ending.
func (c *caseSpec) fixRequests(r *rand.Rand) {
	q := &c.reqs[0]
	q.at = 0
	switch c.ending {
	case endAbort:
		q.client, q.abortAt = "abort", time.Duration(50+r.IntN(150))*time.Millisecond
		q.work = "d=250ms,stream"
		if r.IntN(2) == 0 {
			q.work += ",deaf"
		}
	case endFail:
		q.work = "d=100ms,fail"
	case endClose:
		q.work = "d=200ms,stream,close"
	case endTimeout:
		q.work = fmt.Sprintf("d=%dms,late,deaf", hdrTimeout.Milliseconds()+150+int64(r.IntN(100)))
	case endForce, endOutage, endBodyAfter:
		q.work = "d=900ms,stream"
		if r.IntN(2) == 0 {
			q.work = "d=900ms,late"
		}
		c.target = c.keyOf(c.blocks[0].keys, q.keyID)[0]
		if c.ending == endBodyAfter {
			q.client, q.method = "slowbody", "POST"
			q.sized = c.shape == shapeFastCGI
			c.faultAt = time.Duration(250+r.IntN(300)) * time.Millisecond // the body takes 900 ms
		}
		if c.ending == endOutage {
			q.work = "d=1800ms,stream"
		}
	case endMaxHold:
		q.work = "d=700ms,stream"
		if r.IntN(2) == 0 {
			q.work += ",deaf"
		}
	case endReload, endStop:
		q.work = "d=500ms,stream"
	}
	if c.shape == shapeHandleResponse && (c.ending == endTimeout || r.IntN(3) == 0) && !externalLoss(c.ending) {
		c.nestedRetry = true
	}
	if c.shape == shapeRetry || c.nestedRetry {
		for i := range c.reqs {
			if r.IntN(2) == 0 || i == 0 {
				// The first attempt answers late (past response_header_timeout) and goes on:
				// the retry must not let the next request in while it runs.
				c.reqs[i].first = fmt.Sprintf("d=%dms,late,deaf", hdrTimeout.Milliseconds()+100+int64(r.IntN(150)))
				if externalLoss(c.ending) || c.lock.dryRun {
					// Deaf work outlives a key taken from under it: fencing's job, not the lock's.
					c.reqs[i].first = strings.TrimSuffix(c.reqs[i].first, ",deaf")
				}
			}
		}
	}
	if c.shape == shapeHandleErrors && c.ending == endClean {
		c.reqs[0].work = "d=80ms,fail"
	}
}

// keyOf renders a key kind for an id, as the judge's model has it: what the request holds.
func (c *caseSpec) keyOf(kind, id string) []string {
	switch kind {
	case keyID, keyCapture:
		return []string{"x:" + c.lane + ":" + id}
	case keyAll:
		return []string{"x:" + c.lane + ":all"}
	case keyIDAndAll:
		return []string{"x:" + c.lane + ":" + id, "x:" + c.lane + ":all"}
	case keyOther:
		return []string{"y:" + c.lane + ":" + id}
	case keyApart:
		return []string{"z:" + c.lane + ":" + id}
	}
	return nil
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }
