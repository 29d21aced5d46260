package caddyredlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds a request's path through the handler: ServeHTTP renders its keys and
// acquires them (requests.go tracks it meanwhile), serveLocked runs the handlers behind
// with the locks held and watched (watchLock), finish ends them as endrule.go says
// (hand over, release off the response path, or drain), and acquireFailed answers a
// request whose locks could not be taken.

// statusClientClosedRequest is what Caddy's reverse_proxy records when the client went
// away; there is no standard code.
const statusClientClosedRequest = 499

// ServeHTTP takes the request's lock, runs next while renewing it, and releases it when
// next returns (also on error or panic: the release is deferred; see finish for requests
// cut short). Keys the request already holds through another block are not taken again
// (cover.go: served under that lock, or refused).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if repl == nil {
		repl = caddy.NewReplacer()
	}
	keys, err := h.keyer.render(r, repl)
	if errors.Is(err, errUnlocked) {
		h.dropClientToken(r)
		repl.Set(phKey, "") // known, so "{http.redlock.key}" renders empty downstream
		repl.Set(phMode, "")
		return next.ServeHTTP(w, r)
	}
	if err != nil {
		return err
	}
	key := strings.Join(keys, " ")
	mode := h.s.modeFor(r.Method)
	repl.Set(phKey, key)
	repl.Set(phMode, mode)
	above := heldList(r)
	switch by, err := h.coverOf(above, keys, mode); {
	case err != nil && h.s.dryRun:
		h.dropClientToken(r)
		return h.dryRunUnlocked(w, r, next, key, "busy", err)
	case err != nil:
		return caddyhttp.Error(http.StatusInternalServerError, err)
	case by != nil:
		return h.serveUnder(w, r, next, repl, keys, by)
	}
	h.dropClientToken(r)

	// One context for the wait and for next: cancelling it (lock lost, process exiting)
	// stops whichever is running.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	e := &inflight{owner: h, locker: h.locker.pooled.id, key: key, keys: keys, mode: mode, method: r.Method,
		uri: r.RequestURI, remote: r.RemoteAddr, since: time.Now(), cancel: cancel, above: above}
	if !trackRequest(e) {
		// Only after Cleanup, for a request that arrived as its server was shutting down.
		if h.s.dryRun {
			return h.dryRunUnlocked(w, r, next, key, "unavailable", errors.New("handler is shutting down"))
		}
		w.Header().Set("Retry-After", "1")
		return caddyhttp.Error(http.StatusServiceUnavailable, errors.New("redlock: handler is shutting down"))
	}
	start := time.Now()
	span := startAcquireSpan(ctx, key, mode)
	l, err := acquire(ctx, h.locker.pooled.client, keys, h.s.acquireOptions(mode, h.readers != nil && h.readers.Load() > 0))
	wait := time.Since(start)
	repl.Set(phWaitMS, wait.Milliseconds())
	if err != nil {
		span.failed(ctx, err, h.s.dryRun)
		untrackRequest(e)
		return h.acquireFailed(w, r.WithContext(ctx), next, e, wait, err)
	}
	countAcquire(h.label(), mode, resultAcquired, wait)
	e.hold = span.acquired(ctx, l)
	if l.waited() {
		countWaited(h.label(), mode, resultAcquired, wait)
	}
	if ce := h.logger.Check(zap.DebugLevel, "redlock acquired"); ce != nil { // fields only when logged: every request passes here
		ce.Write(zap.String("key", key), zap.String("mode", mode), zap.Int64("wait_ms", wait.Milliseconds()),
			zap.Int("attempts", l.attempts()), tokenField(l))
	}
	return h.serveLocked(ctx, w, r, next, repl, l, e)
}

// dropClientToken removes a fencing header the client sent: only the handler may set
// the token, or a stale writer could pass the upstream's fencing check.
func (h *Handler) dropClientToken(r *http.Request) {
	if h.s.fencing {
		r.Header.Del(h.s.fencingHeader)
	}
}

// serveLocked runs next while the request's locks are held: renewed, watched (a lost
// lock cuts the request: its writes and body reads refused, its context cancelled) and,
// on every way out, finished (released, handed over or drained). The watch lasts as
// long as the locks do (finish ends it): routes Caddy runs once next has returned, and
// blocks served under the locks there, run under it.
func (h *Handler) serveLocked(ctx context.Context, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, l heldLocks, e *inflight) (err error) {
	e.setHeld(l) // first: every way out below finishes a held request
	// next writes through x (exchange.go), an upgraded connection's tunnel too (tunnel.go).
	kind := tunnelOf(r)
	x := &e.x
	// Runs on every way out, panics included. ended is filled in only once next returned.
	var ended requestEnd
	abort := false // the response began before the lock was lost: it must not end as if whole
	defer func() {
		// reverse_proxy aborts a response the client stopped reading by panicking with
		// http.ErrAbortHandler, possibly before the context shows the client is gone:
		// the upstream may still be streaming, so that is a cut-short request too. Other
		// panics (handler bugs) release at once. Either way the panic goes on up, but for
		// the abort of a handler whose writes the loss refused before any reached the
		// client: that request gets its 503.
		if rec := recover(); rec != nil {
			h.finish(l, e, r, requestEnd{abortPanic: rec == http.ErrAbortHandler, cancelled: ctx.Err() != nil})
			if rec == http.ErrAbortHandler && x.lostNow() != nil && !x.sent.Load() {
				x.answerLost()
				err = nil
				return
			}
			panic(rec)
		}
		h.finish(l, e, r, ended)
		if abort {
			panic(http.ErrAbortHandler) // net/http then cuts the stream or connection
		}
	}()

	if err := l.keepAlive(h.s.renew, h.s.maxHold); err != nil {
		// The lock lapsed between acquire and now (a very slow start): never run unlocked.
		if h.s.dryRun { // ... except in dry run, which never refuses
			return h.dryRunUnlocked(w, r, next, e.key, "unavailable", err)
		}
		w.Header().Set("Retry-After", "1")
		return caddyhttp.Error(http.StatusServiceUnavailable, fmt.Errorf("redlock: lock on %q lost before the request started: %w", e.key, err))
	}
	if h.s.fencing {
		tok := l.fencingHeader()
		r.Header.Set(h.s.fencingHeader, tok)
		repl.Set(phToken, tok)
	}
	setHeldList(r, e) // for the redlock blocks behind and in error routes (coverOf)
	nextCtx := x.begin(ctx, w)
	r.Body = x.watchBody(r.Body) // in place: error routes read the request's own body
	var settle func()
	settle, e.unwatch = h.watchLock(r.Context(), l, e, r) // not ctx: it ends with ServeHTTP, before Caddy's error routes
	err = next.ServeHTTP(x, r.WithContext(nextCtx))
	settle()
	ended = requestEnd{cancelled: ctx.Err() != nil || e.cutUnder.Load(), mayWork: upstreamMayStillWork(err, r), tunnel: tunnelEndOf(kind, x),
		retries: proxyRetries(repl), unsent: x.unsent(), unanswered: x.unanswered()}
	if x.lostNow() != nil {
		// Cut by the loss (never in dry run): next's error, if any, is that cut seen from
		// behind. Returned, it would run handle_errors, which may proxy the request
		// again, unlocked; the loss itself was logged when it happened.
		if err != nil {
			h.logger.Debug("redlock lock lost: the error of the handler behind is not passed on (no handle_errors)",
				zap.String("key", e.key), zap.Error(err))
		}
		abort = x.afterLoss(w)
		return nil
	}
	if ended.outerWork = h.outerWork(err, w, r); ended.outerWork {
		e.watchOuter(r) // the routes Caddy runs next are cut on a loss too
	}
	return err
}

// finish hands over, releases or drains the locks of a request whose ServeHTTP is
// returning, as endOf says (endrule.go), and gives back the request's reference to the
// locker.
func (h *Handler) finish(l heldLocks, e *inflight, r *http.Request, ended requestEnd) {
	if ended.outerWork {
		// handle_errors or an intercept's routes may run next (endrule.go, "When"):
		// the locks stay held, renewed, until the request ends, then drain. Its context
		// ends once Caddy's handling returns (net/http cancels it), or never for a
		// virtual request: that one drains at once.
		ended.outerWork, ended.outerRan = false, true
		if ctx := e.requestContext(r); ctx.Done() != nil {
			context.AfterFunc(ctx, func() { h.finish(l, e, r, ended) })
			return
		}
	}
	e.endWatch() // the locks are released, handed over or drained from here on
	e.endOuter()
	if ended.cut() {
		ended.allGone = locksGone(l) // read only here: every request passes by
	}
	action := endOf(ended)
	if action == endHandOver && l.handOver() {
		// The next request of this instance waiting for the key has the lock now, with no
		// Redis round trip: it starts on the upstream while this response is still being
		// finished (the upstream is done with this one: next has returned).
		h.logReleased(l, e, zap.Bool("handed_over", true))
		observeHold(h.label(), e.mode, holdHandedOver, e.heldFor())
		e.hold.endHold(l, holdHandedOver)
		untrackRequest(e)
		// Let the new holder run first: it was queued on this thread and would otherwise
		// wait for this response's final write to the client, and the key's throughput is
		// bound by how soon the next request reaches the upstream.
		runtime.Gosched()
		return
	}
	if action != endDrain {
		// Off the response's critical path: net/http finishes the response (the last
		// flush, the end of a chunked body) only once ServeHTTP has returned, so a
		// release round trip here would delay every client. The request's table entry
		// (and with it its locker reference) stays until the release is done: within
		// about two node timeouts (a local handoff at once); an exiting Caddy waits for it.
		how := holdReleased
		if l.err() != nil {
			how = holdLost
		}
		observeHold(h.label(), e.mode, how, e.heldFor())
		e.hold.endHold(l, how)
		e.move(stateReleasing)
		go func() {
			h.release(l, e, r)
			untrackRequest(e)
		}()
		return
	}
	// Of several keys, those still held drain (a lost one drains with them: there is
	// nothing left to keep).
	e.move(stateDraining)
	h.logger.Debug("redlock request cut short, upstream error, retried or tunnel not closed cleanly: lock kept one more ttl before release (draining)",
		zap.String("key", e.key), zap.Bool("tunnel", ended.tunnel != tunnelNone), zap.Int("retries", ended.retries),
		zap.Int64("held_ms", e.heldFor().Milliseconds()), tokenField(l))
	// The timer owns the lock and the request's table entry until it fires; it always
	// fires (within one ttl), also on reloads and shutdown.
	time.AfterFunc(h.s.lock.TTL, func() {
		observeHold(h.label(), e.mode, holdDrained, e.heldFor())
		e.hold.endHold(l, holdDrained)
		e.move(stateReleasing)
		h.release(l, e, r)
		untrackRequest(e)
	})
}

// varHeld is the Caddy request variable (caddyhttp.VarsCtxKey's map, one per request,
// seen by every handler and error route of it) that lists the request's held entries,
// the latest first (inflight.above): cover.go reads it. Its NUL keeps it out of reach of placeholders.
const varHeld = "redlock\x00held"

// heldList is the request's latest held entry (nil: none, or no Caddy variables).
func heldList(r *http.Request) *inflight {
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	e, _ := vars[varHeld].(*inflight)
	return e
}

// setHeldList makes e, which holds its locks, the request's latest held entry. The
// list stays until the request ends: whatever runs of the request after this handler
// (its error routes) runs while the locks are still held (endrule.go, "When").
func setHeldList(r *http.Request, e *inflight) {
	if vars, ok := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any); ok {
		vars[varHeld] = e
	}
}

// upstreamMayStillWork reports whether an error from the next handler can leave the
// upstream still working on the request. reverse_proxy gives up on its own (a response
// header or read timeout, a broken upstream connection: 502, 504) without cancelling the
// request's context, and the upstream may not notice and go on (a database transaction
// does): handing the lock on at once would let the next request overlap it. So any
// error drains like a request cut short, except a client error (4xx) on a request
// without a body. A request with a body may fail on the client's side after the proxy
// has sent the headers and part of the body (request_body max_size on a chunked body:
// 413), with the upstream already at work.
func upstreamMayStillWork(err error, r *http.Request) bool {
	if err == nil {
		return false
	}
	var he caddyhttp.HandlerError
	bodiless := r.ContentLength == 0 && len(r.TransferEncoding) == 0
	return !(bodiless && errors.As(err, &he) && he.StatusCode >= 400 && he.StatusCode < 500)
}

// acquireFailed answers a request whose lock could not be taken.
func (h *Handler) acquireFailed(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	e *inflight, wait time.Duration, err error) error {
	var busy *redlock.BusyError
	key, mode := e.key, e.mode
	if h.s.dryRun && r.Context().Err() == nil {
		return h.dryRunThrough(w, r, next, e, wait, err)
	}
	switch {
	case r.Context().Err() != nil:
		// Checked first: a round cut short by the cancellation can look like a node failure.
		countAcquire(h.label(), mode, resultCancelled, wait)
		countWaited(h.label(), mode, resultCancelled, wait) // a round takes a millisecond: cancelled means cancelled while waiting
		h.logger.Debug("redlock wait cancelled", zap.String("key", key), zap.Int64("wait_ms", wait.Milliseconds()))
		return caddyhttp.Error(statusClientClosedRequest, fmt.Errorf("redlock: gave up waiting for key %q: %w", key, context.Cause(r.Context())))
	case errors.As(err, &busy):
		countAcquire(h.label(), mode, resultBusy, wait)
		countWaited(h.label(), mode, resultBusy, wait)
		h.logger.Info("redlock key busy", zap.String("key", key), zap.String("busy_key", busy.Key), zap.String("mode", mode), zap.Int64("wait_ms", wait.Milliseconds()),
			zap.Int("attempts", busy.Attempts), zap.Int("status", h.s.busyStatus))
		w.Header().Set("Retry-After", retryAfter(busy.RetryAfter))
		return caddyhttp.Error(h.s.busyStatus, fmt.Errorf("redlock: key %q still busy after waiting %v: %w", key, wait.Round(time.Millisecond), err))
	case isUnavailable(err), errors.Is(err, redlock.ErrClosed):
		// A closed locker (ErrClosed) is a shutdown, not a Redis outage: never a reason to
		// serve unlocked, whatever on_unavailable says.
		if h.s.bypass && !errors.Is(err, redlock.ErrClosed) {
			countAcquire(h.label(), mode, resultBypassed, wait)
			h.logger.Warn("no Redis quorum: serving the request UNLOCKED (on_unavailable bypass)",
				zap.String("key", key), zap.String("method", r.Method), zap.String("uri", r.RequestURI), zap.Error(err))
			return next.ServeHTTP(w, r)
		}
		countAcquire(h.label(), mode, resultUnavailable, wait)
		w.Header().Set("Retry-After", "1")
		return caddyhttp.Error(http.StatusServiceUnavailable, fmt.Errorf("redlock: key %q: %w", key, err))
	default:
		countAcquire(h.label(), mode, resultError, wait)
		return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("redlock: acquiring key %q: %w", key, err))
	}
}

// retryAfter formats a Retry-After value: whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// watchLock cuts the request the moment one of its locks is lost: its writes are
// refused from then on (exchange.go) and its context is cancelled with a cutCause, so
// that reverse_proxy stops proxying (and closes streams and websockets) instead of
// running on unlocked, and takes it for a cancellation, not an upstream failure. The
// loss is counted and logged. In dry run the request goes on: the loss is only counted
// (also as a dry run "lost") and logged. No goroutine waits meanwhile (Lock.Context and
// context.AfterFunc). The watch ends with parent (the request's own context) or when
// the returned stop is called; stop waits for a loss already being handled, and may be
// called more than once; it settles first. settle waits, if a lock is lost, until the
// loss was handled: a block served under the locks may have seen the loss first and
// cut its part, and the request must then end as cut (x.lost set), and the loss be
// counted, not missed by a stop that came before the watch ran.
func (h *Handler) watchLock(parent context.Context, l heldLocks, e *inflight, r *http.Request) (settle, stop func()) {
	lockCtx, cancelLockCtx := l.context(parent)
	handled := make(chan struct{})
	stopWatch := context.AfterFunc(lockCtx, func() {
		defer close(handled)
		le, ok := lossOf(context.Cause(lockCtx), l.err())
		if !ok {
			return // the request itself ended (client gone, Caddy exiting): not a loss
		}
		if !h.s.dryRun {
			e.x.cut(le) // first: no write may follow the cancellation
			e.cancel(cutCause{le})
			e.cutOuter(le) // the routes Caddy runs after the handler, if running
		}
		metrics.lost.WithLabelValues(h.label(), string(le.Reason)).Inc()
		h.lockLostEvent(e, le)
		fields := []zap.Field{zap.String("key", e.key), zap.String("lost_key", le.Key), zap.String("reason", string(le.Reason)),
			zap.Int("renewals", l.renewals()), zap.Int64("wait_ms", e.waitedFor().Milliseconds()),
			zap.Int64("held_ms", e.heldFor().Milliseconds()), tokenField(l), zap.String("method", e.method), zap.String("uri", e.uri)}
		if h.s.dryRun {
			countDryRun(h.label(), "lost")
			h.logger.Info("redlock dry run: lock lost while the request ran; it goes on unlocked (enforcing would have aborted it)", fields...)
			return
		}
		h.logger.Error("redlock lock lost while the request ran: request aborted", fields...)
	})
	settle = func() {
		if isLost(l.err()) { // the lock's own Context ends lockCtx, and then the watch runs
			<-lockCtx.Done()
			<-handled
		}
	}
	var once sync.Once
	return settle, func() {
		once.Do(func() {
			settle() // a loss is handled (counted), never dropped by stopping the watch first
			if !stopWatch() {
				<-handled
			}
			cancelLockCtx()
		})
	}
}

// lossOf is the loss a lock's watch wakes for: the cause its context ended with, or, when
// that is the request's own end, the lock's error. A loss wakes each of the lock's
// watchers in a goroutine of its own, in no set order: a block served under the lock in
// an error route may cut and answer the request, and net/http end its context, before
// this watch runs; the loss must still be logged and counted (found 2026-12-02).
func lossOf(cause, lockErr error) (*redlock.LostError, bool) {
	if le, ok := errors.AsType[*redlock.LostError](cause); ok {
		return le, true
	}
	return errors.AsType[*redlock.LostError](lockErr)
}

// release gives the lock back. Release uses the request context's values but not its
// cancellation, and is bounded by node_timeout.
func (h *Handler) release(l heldLocks, e *inflight, r *http.Request) {
	err := l.release(r.Context())
	switch {
	case err == nil:
		h.logReleased(l, e, zap.Skip())
	case errors.Is(err, redlock.ErrReleased): // already released (force release from the admin API)
	default:
		h.logger.Warn("redlock release did not reach a quorum; the rest expires after the ttl",
			zap.String("key", e.key), zap.Int64("held_ms", e.heldFor().Milliseconds()), tokenField(l), zap.Error(err))
	}
}

// logReleased logs a release at debug level (extra: how it went).
func (h *Handler) logReleased(l heldLocks, e *inflight, extra zap.Field) {
	ce := h.logger.Check(zap.DebugLevel, "redlock released") // fields only when logged: every request passes here
	if ce == nil {
		return
	}
	ce.Write(zap.String("key", e.key), zap.Int64("held_ms", e.heldFor().Milliseconds()),
		zap.Int("renewals", l.renewals()), extra, tokenField(l))
}

// tokenField logs the fencing token(s) of locks that have them, as the fencing header
// carries them. A token is no secret (the upstream sees it); the lock value is, and is
// never logged.
func tokenField(l heldLocks) zap.Field {
	if !l.fencing() {
		return zap.Skip()
	}
	return zap.String("token", l.fencingHeader())
}
