package caddyredlock

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file serves a redlock block under locks its request already holds through other
// blocks (cover.go says when), watched as the block's own locks would be.
//
// The rule (docs/design.md, "A lock watches whatever runs under it"): from the acquire
// to the release or the drain, whatever runs under a lock is cut on its loss: its
// context cancelled, its writes refused, its request body reads refused. A block served
// under a held lock may run where the block that holds it watches nothing: in the
// server's handle_errors routes, a subroute's errors routes, an intercept's routes, all
// of which Caddy runs with its own request and writer once that block's handler has
// returned (round 5, hole 3). So the served block watches its own next: on a loss of any
// lock that serves it, as the holder would, and at its own max_hold, counted from the
// holder's acquire (the held lock's own max_hold may be longer or unset).

// serveUnder runs next under the held entries by (every key of the block held by one of
// them, each serving the block: coverOf), watched.
func (h *Handler) serveUnder(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	repl *caddy.Replacer, keys []string, by []*inflight) error {
	if h.s.fencing {
		// The token the block would send: that of the held locks of its keys.
		tok := tokensOf(by, keys)
		r.Header.Set(h.s.fencingHeader, tok)
		repl.Set(phToken, tok)
	}
	if ce := h.logger.Check(zap.DebugLevel, "redlock keys already held by this request through another block: served under those locks"); ce != nil {
		ce.Write(zap.Strings("keys", keys), zap.String("held_by", by[0].owner.describe(by[0].mode)))
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	x := &exchange{}
	nextCtx := x.begin(ctx, w)
	r.Body = x.watchBody(r.Body) // in place: whatever reads it under this block
	stop := h.watchUnder(ctx, by, x, cancel, keys[0])
	defer stop()
	err := next.ServeHTTP(x, r.WithContext(nextCtx))
	stop()
	if x.lostNow() != nil {
		if x.afterLoss(w) {
			panic(http.ErrAbortHandler) // the holder's deferred finish still runs
		}
		return nil // not passed on: error routes could run the work again, unlocked
	}
	return err
}

// watchUnder cuts the served block (x, cancel) when a lock of by is lost or the block's
// max_hold is reached; the loss itself is the holder's to log and count. In dry run the
// block is not cut. The returned stop ends the watch (waiting for a cut under way).
func (h *Handler) watchUnder(ctx context.Context, by []*inflight, x *exchange, cancel context.CancelCauseFunc, key string) (stop func()) {
	watchCtx := ctx
	var cancels []context.CancelFunc
	for _, e := range by {
		e.mu.Lock()
		l := e.lock
		e.mu.Unlock()
		var c context.CancelFunc
		watchCtx, c = l.context(watchCtx)
		cancels = append(cancels, c)
	}
	// The block's own max_hold, where the holder's does not end the hold as soon (the
	// holder's own is its watch's to count and cut, as for any loss).
	var ownMaxHold *redlock.LostError
	if held := by[0].owner.s.maxHold; h.s.maxHold > 0 && (held == 0 || held > h.s.maxHold) {
		ownMaxHold = &redlock.LostError{Key: key, Reason: redlock.LostMaxHold}
		var c context.CancelFunc
		watchCtx, c = context.WithDeadlineCause(watchCtx, by[0].heldSince().Add(h.s.maxHold), ownMaxHold)
		cancels = append(cancels, c)
	}
	cut := func() {
		le, ok := errors.AsType[*redlock.LostError](context.Cause(watchCtx))
		if !ok || h.s.dryRun {
			return // the request itself ended; or dry run, which never cuts
		}
		x.cut(le)
		cancel(cutCause{le})
		for _, e := range by {
			e.cutUnder.Store(true) // the holders end cut short, whatever they see of it
		}
		if le == ownMaxHold {
			metrics.lost.WithLabelValues(h.label(), string(le.Reason)).Inc()
			h.logger.Error("redlock max_hold of a block served under a held lock reached: request aborted",
				zap.String("key", key), zap.Duration("max_hold", h.s.maxHold))
			return
		}
		h.logger.Error("redlock lock lost while a block served under it ran: request aborted",
			zap.String("key", key), zap.String("reason", string(le.Reason)))
	}
	handled := make(chan struct{})
	stopWatch := context.AfterFunc(watchCtx, func() { defer close(handled); cut() })
	return sync.OnceFunc(func() {
		if !stopWatch() {
			<-handled
		}
		for _, c := range cancels {
			c()
		}
	})
}

// tokensOf is the fencing header of keys held by the entries by: the token for one key,
// key=token pairs for several (heldLocks.fencingHeader's form).
func tokensOf(by []*inflight, keys []string) string {
	keys = slices.Sorted(slices.Values(keys)) // lock order
	tokens := make([]int64, len(keys))
	for i, k := range keys {
		for _, e := range by {
			e.mu.Lock()
			for _, l := range e.lock {
				if l.Info().Key == k {
					tokens[i] = l.Token()
				}
			}
			e.mu.Unlock()
		}
	}
	if len(keys) == 1 {
		return strconv.FormatInt(tokens[0], 10)
	}
	return fencingPairs(keys, tokens)
}

// heldSince is when the entry acquired its locks.
func (e *inflight) heldSince() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.heldAt
}
