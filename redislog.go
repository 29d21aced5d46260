package caddyredlock

import (
	"context"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
)

// go-redis reports connection-pool trouble (a failed dial while a node is down, say)
// through one process-wide logger that writes plain text to stderr, outside Caddy's
// logging config and format. Route it through Caddy's logger instead, at debug: the same
// facts are in the admin API's node view and the node-error metrics, and a node that is
// down would otherwise print a line per dial attempt.
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
