package caddyredlock

import (
	"errors"

	"github.com/caddyserver/caddy/v2"

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
	allGone bool // none of the request's locks keeps anyone out any more (locksGone; read only when cut)
}

// earlierAttemptMayRun reports whether reverse_proxy retried after an attempt that may
// have reached its upstream and still run there. Only a failure before the request was
// written (a dial or TLS error) proves the upstream never saw it: when the traced round
// trips that ended unwritten match the retries one for one, every retried attempt was
// such a failure. Any other count (an attempt timed out or broke after writing; a
// transport that is not traced, such as FastCGI or HTTP/3) cannot tell, so it drains.
func (e requestEnd) earlierAttemptMayRun() bool {
	return e.retries > 0 && e.unsent != e.retries
}

// cut reports whether the exchange ended early, on Caddy's side only.
func (e requestEnd) cut() bool {
	return e.cancelled || e.abortPanic || e.mayWork || e.tunnel == tunnelCut || e.earlierAttemptMayRun()
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
