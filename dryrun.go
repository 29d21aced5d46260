package caddyredlock

import (
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// dry_run is for rolling the plugin out on live traffic: locks are taken when free, so
// contention is real and measured, but no request is ever slowed down or refused by the
// plugin. A request that would have waited (its key is taken) or been refused (no quorum)
// is served unlocked, counted in caddy_redlock_dry_run_total and logged with its key.

// waitFor is how long an acquire may wait: never in dry run (a wait is a slowdown the
// rollout must not cause; the busy answer is what gets counted).
func (s *settings) waitFor() time.Duration {
	if s.dryRun {
		return 0
	}
	return s.wait
}

// dryRunThrough serves a request whose lock could not be taken, unlocked. The acquire
// outcome still goes into the acquire metrics under its real result, so the dashboards
// show what enforcing would have done.
func (h *Handler) dryRunThrough(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	e *inflight, wait time.Duration, err error) error {
	var busy *redlock.BusyError
	reason, result := "error", resultError
	switch {
	case errors.As(err, &busy):
		reason, result = "busy", resultBusy
	case isUnavailable(err), errors.Is(err, redlock.ErrClosed):
		reason, result = "unavailable", resultUnavailable
	}
	countAcquire(h.label(), e.mode, result, wait)
	return h.dryRunUnlocked(w, r, next, e.key, reason, err)
}

// dryRunUnlocked serves a request unlocked that enforcing would have refused or made
// wait: counted by reason, and logged with its key so that the keys in conflict can be
// looked at before dry run is switched off.
func (h *Handler) dryRunUnlocked(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler,
	key, reason string, err error) error {
	countDryRun(h.label(), reason)
	h.logger.Info("redlock dry run: request served unlocked (would have waited or been refused)",
		zap.String("key", key), zap.String("reason", reason), zap.String("method", r.Method),
		zap.String("uri", r.RequestURI), zap.Error(err))
	return next.ServeHTTP(w, r)
}
