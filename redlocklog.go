package caddyredlock

import (
	"context"
	"log/slog"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap/exp/zapslog"
)

// The redlock package logs through log/slog (it never imports Caddy or zap). Its lines
// (a node restarted, unusable, or the same server as another) must reach Caddy's log as
// lines of the handler's logger, "http.handlers.redlock", like the handler's own:
//
//   - with the logger name: zap's Named sets a name on the *zap.Logger, not on its core,
//     so a zapslog handler over caddy.Log().Named(...).Core() writes lines with no
//     "logger" field, which a `log { include/exclude http.handlers.redlock }` cannot
//     select either (Caddy filters on the entry's logger name). zapslog.WithName sets it;
//   - to Caddy's default logger as it is when the line is logged: a redlock.Client is
//     shared across config reloads (lockers.go), and a reload that changes the logging
//     config replaces the default logger and closes the old one's writers. A core taken
//     once at the client's creation would keep writing to the old output.

// redlockLoggerName is the logger name of the redlock package's lines in Caddy's log: the
// handler module's ID, which ctx.Logger gives the handler's own lines.
const redlockLoggerName = "http.handlers.redlock"

// newRedlockLogger returns the slog.Logger handed to redlock.Options.
func newRedlockLogger() *slog.Logger { return slog.New(caddySlog{}) }

// caddySlog is a slog.Handler that writes to caddy.Log() as it is at each call, under
// redlockLoggerName. With and WithGroup calls are kept and replayed on that handler.
type caddySlog struct {
	with []func(slog.Handler) slog.Handler
}

func (h caddySlog) current() slog.Handler {
	var s slog.Handler = zapslog.NewHandler(caddy.Log().Core(), zapslog.WithName(redlockLoggerName))
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
