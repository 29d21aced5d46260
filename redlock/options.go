package redlock

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"log/slog"

	"github.com/redis/go-redis/v9"
)

// Defaults for Options (Options.Resolve), the one home of the plugin's lock defaults too.
// The ratios follow the Redis "Distributed Locks with Redis" page: the per-node timeout
// is small against the ttl so a dead node costs little of the validity.
const (
	defaultPrefix         = "redlock:"
	defaultTTL            = 10 * time.Second
	defaultNodeTimeout    = 100 * time.Millisecond
	defaultDriftFactor    = 0.01
	defaultRetryDelayMin  = 25 * time.Millisecond
	defaultRetryDelayMax  = 250 * time.Millisecond
	defaultHealthInterval = time.Second
	// driftFloor is the constant part of the clock drift allowance (2ms in the reference algorithm).
	driftFloor = 2 * time.Millisecond
)

// Options configure a Client. The zero value of every field means its default.
type Options struct {
	// Prefix is prepended to every key in Redis. Default "redlock:".
	Prefix string
	// TTL is the validity of a lock per acquire or renewal. Default 10s. AcquireOptions.TTL overrides it per lock.
	TTL time.Duration
	// MaxTTL is the longest ttl a lock of this client may have (Acquire refuses longer
	// ones, e.g. through AcquireOptions.TTL). The client announces it to the nodes, which
	// keep the largest any client announced, and a restarted node does not vote for that
	// largest bound plus drift (a quarantine): so a client with a short ttl still waits out
	// the locks of a client with a long one. Default: TTL; at most 24h. Best set to the
	// same value, the longest ttl in use, on every client of a node set.
	MaxTTL time.Duration
	// NodeTimeout bounds every command to one node (dial, write and read). Default 100ms.
	NodeTimeout time.Duration
	// DriftFactor is the clock drift allowance as a fraction of the ttl. Default 0.01.
	DriftFactor float64
	// RetryDelayMin and RetryDelayMax bound the jittered delay between tries when no release
	// notice arrives. Defaults 25ms and 250ms.
	RetryDelayMin, RetryDelayMax time.Duration
	// HealthInterval is the period of the per-node health check. Default 1s.
	HealthInterval time.Duration
	// HandoffLimit is how many times in a row a released lock may be handed straight to
	// the next waiter of this client for the same key (no Redis round trip) before it is
	// released in Redis so other clients get their turn. Default 8, at most 64 (with
	// fencing, every acquire reserves that many tokens, in
	// µs of the nodes' clocks); negative disables handoffs.
	HandoffLimit int
	// DisablePipelining sends every acquire and release script on a connection of its
	// own. By default the scripts of concurrent callers go to each node in pipelines
	// (one write, read and round trip per batch): much less CPU per lock on both sides
	// under concurrency, and a lone call still goes out at once.
	DisablePipelining bool
	// TLSConfig is used for the rediss:// nodes instead of go-redis's default (system
	// roots): RootCAs for a private CA, Certificates for mutual TLS, ServerName for
	// nodes addressed by IP. It is cloned per node; an empty ServerName becomes the
	// node's host. redis:// and unix:// nodes never use TLS.
	TLSConfig *tls.Config
	// ClientBuilder, if set, makes each node's go-redis client from the options redlock
	// prepared (address, credentials and TLS from the URL and TLSConfig, timeouts, and
	// the OnConnect that detects node restarts): change what you need (Dialer,
	// CredentialsProvider, hooks for tracing) and return redis.NewClient(opt). Keep
	// OnConnect, the timeouts and MaxRetries: the lock's safety relies on them. The
	// Client closes the clients it was given on Close.
	ClientBuilder func(opt *redis.Options) (*redis.Client, error)
	// Logger receives warnings about nodes (restarts, unusable nodes, duplicates).
	// Default: no logging.
	Logger *slog.Logger
	// Observer, if set, is told about every node call (for metrics). It must not block.
	Observer Observer
}

// Observer receives events for metrics. Implementations must be fast and must not block.
// One that also implements HealthObserver is told of node transitions too.
type Observer interface {
	// NodeCall reports one command to one node: op is "acquire", "extend", "retake",
	// "release", "commit", "health", "inspect", "force_release" or "subscribe" (a failed
	// subscription to release notices, with rtt 0).
	NodeCall(node, op string, rtt time.Duration, err error)
	// Renewal reports one KeepAlive renewal: nil, a transient error, or a *LostError.
	Renewal(err error)
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = o.TTL
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = defaultNodeTimeout
	}
	if o.DriftFactor == 0 {
		o.DriftFactor = defaultDriftFactor
	}
	if o.RetryDelayMin == 0 && o.RetryDelayMax == 0 {
		o.RetryDelayMin, o.RetryDelayMax = defaultRetryDelayMin, defaultRetryDelayMax
	} else if o.RetryDelayMax == 0 {
		o.RetryDelayMax = o.RetryDelayMin
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = defaultHealthInterval
	}
	if o.HandoffLimit == 0 {
		o.HandoffLimit = defaultHandoffLimit
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Resolve returns o with every zero field set to its default, or an error naming the
// first invalid option (by its Caddyfile name). New resolves its options the same way.
func (o Options) Resolve() (Options, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// validate reports the first invalid option of resolved options, by its Caddyfile name.
func (o Options) validate() error {
	switch {
	case strings.ContainsRune(o.Prefix, 0):
		return errors.New("prefix: must not contain a NUL byte") // names.go separates with NUL
	case o.TTL <= 0:
		return fmt.Errorf("ttl: must be > 0, got %v", o.TTL)
	case o.MaxTTL > maxBound:
		return fmt.Errorf("max_ttl: must be at most %v, got %v", maxBound, o.MaxTTL)
	case o.MaxTTL < o.TTL:
		return fmt.Errorf("max_ttl (%v) must be at least ttl (%v): set it to the longest ttl used on these nodes, on every client", o.MaxTTL, o.TTL)
	case o.NodeTimeout <= 0:
		return fmt.Errorf("node_timeout: must be > 0, got %v", o.NodeTimeout)
	case o.NodeTimeout >= o.TTL:
		return fmt.Errorf("node_timeout (%v) must be smaller than ttl (%v)", o.NodeTimeout, o.TTL)
	case !(o.DriftFactor >= 0 && o.DriftFactor < 0.5): // so also NaN, which every comparison fails
		return fmt.Errorf("drift_factor: must be > 0 and < 0.5, got %v", o.DriftFactor)
	case drift(o.TTL, o.DriftFactor)+o.NodeTimeout >= o.TTL:
		return fmt.Errorf("ttl (%v) leaves no validity after node_timeout and drift_factor", o.TTL)
	case o.RetryDelayMin < 0 || o.RetryDelayMax < o.RetryDelayMin:
		return fmt.Errorf("retry_delay: must satisfy 0 <= min <= max, got %v %v", o.RetryDelayMin, o.RetryDelayMax)
	case o.HandoffLimit > maxHandoffLimit:
		return fmt.Errorf("handoff limit: must be at most %d, got %d", maxHandoffLimit, o.HandoffLimit)
	case o.HealthInterval < 0:
		return fmt.Errorf("health_interval: must be >= 0, got %v", o.HealthInterval)
	}
	return nil
}

// validateTTL refuses a ttl that leaves no validity once drift is taken off.
func validateTTL(ttl time.Duration, driftFactor float64) error {
	if ttl <= 0 {
		return fmt.Errorf("redlock: ttl must be > 0, got %v", ttl)
	}
	if ttl <= drift(ttl, driftFactor) {
		return fmt.Errorf("redlock: ttl (%v) is not larger than its clock drift allowance", ttl)
	}
	return nil
}

// drift is the clock drift allowance for a ttl: ttl*factor + 2ms.
func drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}

// AcquireOptions are per-lock settings.
type AcquireOptions struct {
	// Wait is how long Acquire may wait for a busy key. 0 means one try only.
	Wait time.Duration
	// TTL overrides Options.TTL for this lock.
	TTL time.Duration
	// Fencing makes the lock carry a fencing token (see Lock.Token).
	Fencing bool
	// Shared takes the key as a reader: readers hold it together, never while an
	// exclusive holder (a writer) does, and a waiting writer keeps new readers out;
	// readers that a writer kept out get a turn at its release. Readers of one client
	// holding a key together may share one entry in Redis (and its fencing token).
	Shared bool
	// Limit > 1 lets up to Limit holders have the key at once, across all clients (a
	// distributed concurrency limit: Limit places, each an exclusive lock of its own);
	// 0 or 1 is a mutex. At most MaxLimit; not with Shared.
	Limit int
	// NoReaders says that no client takes this key Shared, for an exclusive lock: its
	// release then does not look for readers waiting for their turn, one read less on
	// every node on every release (about a sixth of the nodes' work for a lock). Readers
	// of a key whose writers set it still get the key, but only once those writers leave
	// it free: their wait is then bounded by the writers' coming to an end. Exclusion is
	// the same either way. Ignored with Shared.
	NoReaders bool
}
