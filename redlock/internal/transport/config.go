package transport

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is what a Node needs from its owner: plain values and callbacks, no pointer to
// the owner. The zero value of a callback means none.
type Config struct {
	// NodeTimeout bounds every command (dial, write, read) and every Call.
	NodeTimeout time.Duration
	// Pipelining sends Calls through the node's batcher (batcher.go); else each Call goes
	// on a connection and goroutine of its own.
	Pipelining bool
	// TLS is used for rediss:// nodes instead of go-redis's default (system roots),
	// cloned per node (connect.go).
	TLS *tls.Config
	// Build makes the go-redis client from the prepared options; nil: redis.NewClient.
	Build func(*redis.Options) (*redis.Client, error)
	// Scripts are the scripts run by digest: their digests are learned on every new
	// connection until known, and ACL hints name them. Required.
	Scripts *Scripts
	// Observe is told about every recorded call (Record): op names what it was for.
	// It must not block.
	Observe func(node, op string, rtt time.Duration, err error)
	// Hello gives the commands every new connection sends before any other (in one
	// pipeline, with the scripts' digest request), and each health check sends (Check).
	// nil: PING.
	Hello func() [][]any
	// Heard is handed Hello's replies, when the pipeline went through (a new
	// connection's, a health check's), before the node's facts are updated.
	Heard func(replies []Reply)
	// ProbeName is the key and channel the permission probe uses: under the owner's
	// prefix, so the user's key and channel patterns are checked too (probe.go).
	ProbeName string
	// Closed is what Calls get once Flush ended (redlock.ErrClosed).
	Closed error
	// Logger receives a node's configuration problems (probe.go). Required.
	Logger *slog.Logger
}
