package caddyredlock

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
)

// This file holds how the lines that do not come from a handler's own logger reach
// Caddy's log: the redlock package's (through log/slog), go-redis's (through its one
// process-wide logger), and the plugin's lines that belong to no single handler (a node's
// transitions, dropped events, a locker that failed to close).
//
// All but go-redis's are lines of the handler's logger name, moduleID
// ("http.handlers.redlock"), which ctx.Logger gives the handler's own lines, so that a
// `log { include/exclude http.handlers.redlock }` selects them all. Each is written to
// Caddy's default logger as it is when the line is logged: a redlock.Client is shared
// across config reloads (lockers.go), and a reload that changes the logging config
// replaces the default logger and closes the old one's writers, so a logger taken once at
// the client's creation would keep writing to the old output.

// pluginLog is the logger for the plugin's lines that belong to no single handler.
func pluginLog() *zap.Logger { return caddy.Log().Named(moduleID) }

// go-redis reports connection-pool trouble (a failed dial while a node is down, say)
// through one process-wide logger that writes plain text to stderr, outside Caddy's
// logging config and format. Route it through Caddy's logger instead, at debug, as the
// "redis" logger: the same facts are in the admin API's node view and the node-error
// metrics, and a node that is down would otherwise print a line per dial attempt.
//
// It is process-wide by go-redis's design, so other go-redis users in the same Caddy
// binary are routed here too, which is what a Caddy operator wants anyway.
func init() {
	redis.SetLogger(redisLogger{})
}

type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	// caddy.Log() at call time: the default logger is configured after init.
	caddy.Log().Named("redis").Debug(fmt.Sprintf(format, v...))
}

// The redlock package logs through log/slog (it never imports Caddy or zap). Its lines (a
// node restarted, unusable, or the same server as another) carry the logger name through
// zapslog.WithName: zap's Named sets a name on the *zap.Logger, not on its core, so a
// zapslog handler over caddy.Log().Named(...).Core() would write lines with no "logger"
// field, which Caddy's log filters cannot select either (they filter on the entry's
// logger name).

// newRedlockLogger returns the slog.Logger handed to redlock.Options.
func newRedlockLogger() *slog.Logger { return slog.New(caddySlog{}) }

// caddySlog is a slog.Handler that writes to caddy.Log() as it is at each call, under
// moduleID. With and WithGroup calls are kept and replayed on that handler.
type caddySlog struct {
	with []func(slog.Handler) slog.Handler
}

func (h caddySlog) current() slog.Handler {
	var s slog.Handler = zapslog.NewHandler(caddy.Log().Core(), zapslog.WithName(moduleID))
	for _, f := range h.with {
		s = f(s)
	}
	return s
}

func (h caddySlog) Enabled(ctx context.Context, l slog.Level) bool {
	return h.current().Enabled(ctx, l)
}

func (h caddySlog) Handle(ctx context.Context, r slog.Record) error {
	return h.current().Handle(ctx, r)
}

func (h caddySlog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.then(func(s slog.Handler) slog.Handler { return s.WithAttrs(attrs) })
}

func (h caddySlog) WithGroup(name string) slog.Handler {
	return h.then(func(s slog.Handler) slog.Handler { return s.WithGroup(name) })
}

// then returns h with f appended, never sharing h's slice with another handler.
func (h caddySlog) then(f func(slog.Handler) slog.Handler) slog.Handler {
	return caddySlog{with: append(h.with[:len(h.with):len(h.with)], f)}
}
