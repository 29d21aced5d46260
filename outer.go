package caddyredlock

import (
	"context"
	"errors"
	"net/http"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file keeps rule 1 (docs/design.md: a lock watches whatever runs under it, for as
// long as it is held) for the routes Caddy runs with a request once the handler has
// returned: the server's handle_errors routes, a subroute's errors routes, an
// intercept's routes (endrule.go, "When"). Caddy runs them with its own request and
// writer, out of the handler's reach, and derives their request from the request object
// it passed down (Server.ServeHTTP and Subroute.ServeHTTP: Errors.WithError(r, err)).
// In the usual chain that object is the handler's own (routes, subroutes and matchers
// pass it through), so the handler replaces its context in place, with one the lock's
// watch cancels on a loss: a reverse_proxy there stops at once, as next's does, and
// aborts a response it was streaming. Where a handler between Caddy and this one copied
// the request (r.WithContext), only the copy changes and those routes are not cut; a
// redlock block in them is, always (under.go). Their writes cannot be refused (Caddy's
// writer is not the handler's), nor a FastCGI application stopped: docs/safety.md.

// watchOuter gives the routes Caddy runs after the handler a context that the lock's
// watch cancels on a loss (cutOuter), r's own from now on.
func (e *inflight) watchOuter(r *http.Request) {
	ctx, cancel := context.WithCancelCause(r.Context())
	e.mu.Lock()
	e.reqCtx, e.cancelOuter = r.Context(), cancel
	lost := e.lock.err()
	e.mu.Unlock()
	*r = *r.WithContext(ctx)
	if le, ok := errors.AsType[*redlock.LostError](lost); ok && !e.owner.s.dryRun {
		cancel(cutCause{le}) // lost between next's return and now
	}
}

// cutOuter cancels the routes Caddy runs after the handler, if they were given a
// context (watchOuter).
func (e *inflight) cutOuter(le *redlock.LostError) {
	e.mu.Lock()
	cancel := e.cancelOuter
	e.mu.Unlock()
	if cancel != nil {
		cancel(cutCause{le})
	}
}

// requestContext is the request's own context, as net/http ends it: the one r had
// before watchOuter replaced it.
func (e *inflight) requestContext(r *http.Request) context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reqCtx != nil {
		return e.reqCtx
	}
	return r.Context()
}

// endOuter releases the context watchOuter made, once the locks' end is decided.
func (e *inflight) endOuter() {
	e.mu.Lock()
	cancel := e.cancelOuter
	e.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
}
