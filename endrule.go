package caddyredlock

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// What the end of a request means for its locks: one pure rule (endOf), table-tested
// (endrule_test.go), applied by Handler.finish.
//
// A request that completed hands its lock to the next waiting request of this instance
// when that costs no round trip, else releases it. A request cut short (the client went
// away, the lock was lost, max_hold, Caddy exiting, reverse_proxy aborting the response),
// one whose next handler failed in a way that can leave the upstream working
// (upstreamMayStillWork), one that reverse_proxy retried after an attempt that may have
// reached its upstream (earlierAttemptMayRun), and a tunnel that did not end cleanly on
// both sides (tunnel.go) only stopped on Caddy's side: the upstream may still be working
// on it. Its lock, if still held, is kept, renewed, for one more ttl before it is
// released (draining), so that the next holder does not overlap a straggler. A lock
// past max_hold is kept too (not renewed: it stands on the nodes until its validity
// ends). Locks that keep nobody out any more (lost otherwise: expired, taken, deleted)
// are given back at once.
//
// When: at once, unless Caddy may still run work of the request outside this handler
// once it returns (outerWork): the server's handle_errors routes, when next's error is
// passed on, and the routes of an intercept around the handler, when it holds the
// response back. A reverse_proxy there sends the request to the locked upstream again,
// so the locks stay held, renewed, until the request itself ends (its context, which
// net/http cancels once Caddy's handling, error routes included, has returned, or when
// the client goes away). Those routes' round trips are not traced and their end is not
// seen (the request's context also ends when the client leaves while they run), so
// their upstream may still be working: the locks then drain (outerRan), as for a
// request cut short. A request whose context never ends (a virtual request, templates'
// httpInclude) drains at once.

// requestEnd is what finish knows of how a request's exchange ended.
type requestEnd struct {
	cancelled  bool      // the request's context was done when next returned or panicked
	abortPanic bool      // next panicked with http.ErrAbortHandler (reverse_proxy aborting a response)
	mayWork    bool      // next returned an error that can leave the upstream working
	tunnel     tunnelEnd // how an upgraded connection's tunnel ended (tunnelNone: none was opened)
	// retries is how many times reverse_proxy retried ({http.reverse_proxy.retries}; with
	// several proxies in the route, the last one's); unsent is how many traced round trips
	// (Go's HTTP transport) ended before writing their request (exchange.unsent).
	retries int
	unsent  int
	// unanswered is how many traced round trips were written and got no response
	// (exchange.unanswered): given up by whichever proxy sent them, nested ones included.
	unanswered int
	allGone    bool // none of the request's locks keeps anyone out any more (locksGone; read only when cut)
	// outerWork: Caddy may run routes of the request once the handler returns (outerWork):
	// the end waits for the request's own end. outerRan: it did, and may have left work.
	outerWork bool
	outerRan  bool
}

// earlierAttemptMayRun reports whether an attempt that may have reached its upstream
// was given up and may still run there. A traced request written and never answered
// was (a response_header_timeout, a broken connection), whichever proxy sent it: one
// nested in another's handle_response retries without the last proxy's retry count
// showing it. And when reverse_proxy retried, only a failure before the request was
// written (a dial or TLS error) proves the upstream never saw it: when the traced round
// trips that ended unwritten match the retries one for one, every retried attempt was
// such a failure. Any other count (an attempt that got a response and was retried by
// retry_match; a transport that is not traced, such as FastCGI or HTTP/3) cannot tell,
// so it drains.
func (e requestEnd) earlierAttemptMayRun() bool {
	return e.unanswered > 0 || (e.retries > 0 && e.unsent != e.retries)
}

// cut reports whether the exchange ended early, on Caddy's side only.
func (e requestEnd) cut() bool {
	return e.cancelled || e.abortPanic || e.mayWork || e.tunnel == tunnelCut || e.earlierAttemptMayRun() || e.outerRan
}

// endAction is what happens to a request's locks when it ends.
type endAction int

const (
	endHandOver endAction = iota // hand over to the next local waiter if free of round trips, else release
	endRelease                   // release at once, off the response path
	endDrain                     // keep, renewed, one more ttl, then release
)

func (a endAction) String() string {
	return [...]string{"hand over", "release", "drain"}[a]
}

// endOf is the rule above.
func endOf(e requestEnd) endAction {
	switch {
	case !e.cut():
		return endHandOver
	case e.allGone:
		return endRelease
	}
	return endDrain
}

// locksGone reports whether none of the locks keeps anyone out any more (lockGone).
func locksGone(l heldLocks) bool {
	for _, lk := range l {
		if !lockGone(lk.Info().Err) {
			return false
		}
	}
	return true
}

// lockGone reports whether a lock whose LockInfo.Err is err keeps nobody out any more:
// it was lost, and not by max_hold. A lock past max_hold is lost here (renewals stopped,
// the request cut) but still stands on a majority until its validity ends; the work cut
// at max_hold may still run upstream, so it is kept like a held lock, not deleted.
func lockGone(err error) bool {
	if err == nil {
		return false
	}
	le, ok := errors.AsType[*redlock.LostError](err)
	return !ok || le.Reason != redlock.LostMaxHold
}

// outerWork reports whether Caddy may run routes of the request outside the handler
// once it returns err: error routes (an error passed on, and the server's handle_errors
// or a subroute's errors routes may run: hasErrorRoutes) or an intercept's, on a
// response held back (bufferedOutside).
func (h *Handler) outerWork(err error, w http.ResponseWriter, r *http.Request) bool {
	return (err != nil && h.hasErrorRoutes(r)) || bufferedOutside(w)
}

// bufferedOutside reports whether a handler outside this one holds a response back in
// a buffer (a caddyhttp.ResponseRecorder along the writer's Unwrap chain that got a
// status and buffers: before any status, every recorder says it buffers): intercept
// does, to run its handle_response routes once this handler has returned (templates
// does too, and runs no upstream).
func bufferedOutside(w http.ResponseWriter) bool {
	for range 32 { // a chain of wrappers, not a cycle
		if b, ok := w.(caddyhttp.ResponseRecorder); ok && b.Status() != 0 && b.Buffered() {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}

// proxyRetries reads how many times reverse_proxy retried the request (0 without one).
func proxyRetries(repl *caddy.Replacer) int {
	v, _ := repl.Get("http.reverse_proxy.retries")
	n, _ := v.(int)
	return n
}

// tunnelEndOf says how a request's tunnel ended: watched for an Upgrade (x), unknown
// for an extended CONNECT (no hijack to watch: treated as cut short).
func tunnelEndOf(kind tunnelKind, x *exchange) tunnelEnd {
	switch kind {
	case upgradeTunnel:
		return x.tunnelEnd()
	case extendedTunnel:
		return tunnelCut
	}
	return tunnelNone
}
