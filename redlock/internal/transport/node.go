package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one Redis server: its go-redis client, its batcher, and the facts the
// transport owns about it (whether it answers, how fast, its errors). What the node's
// answers mean (run_id, markers, voting) is the owner's.
type Node struct {
	addr   string // host:port[/db], never a password
	cfg    Config
	client *redis.Client
	// batch pipelines the calls of concurrent callers (batcher.go); nil without
	// Config.Pipelining.
	batch  *batcher
	probed probeState // permission probe (probe.go)
	// silent: the node's last command got no answer at all (a timeout, a refused or
	// broken connection: noAnswer), as opposed to a reply, a Redis error or garbage.
	// Cleared by the next answer; read without mu.
	silent atomic.Bool

	mu        sync.Mutex
	up        bool
	checked   bool
	lastRTT   time.Duration
	lastErr   error
	lastErrAt time.Time
	lastCheck time.Time
	errors    uint64
}

// Facts are what the transport knows of a node at one moment.
type Facts struct {
	Up      bool          // its last health check (and permission probe) succeeded
	Checked bool          // it has been checked at least once
	LastRTT time.Duration // of the last health check that succeeded
	LastErr error         // the last failure, if any (a *ConfigError when only the operator can fix it)
	// LastErrAt and LastCheck are when the last failure and the last health check were.
	LastErrAt, LastCheck time.Time
	Errors               uint64 // failed calls so far
	Probed               bool   // the permission probe passed since the node last answered (probe.go)
}

// New makes the node of a URL (ParseURL's forms) and its client. It does not connect:
// go-redis dials on the first command.
func New(raw string, cfg Config) (*Node, error) {
	opt, addr, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	n := &Node{addr: addr, cfg: cfg}
	n.prepare(opt)
	if n.client, err = buildClient(opt, cfg); err != nil {
		return nil, err
	}
	if cfg.Pipelining {
		n.batch = newBatcher(n)
	}
	return n, nil
}

// Addr is how the node is shown: host:port[/db] or unix:///path[/db], never a password.
func (n *Node) Addr() string { return n.addr }

// Close closes the node's connections.
func (n *Node) Close() error { return n.client.Close() }

// Facts returns what is known of the node now.
func (n *Node) Facts() Facts {
	n.probed.mu.Lock()
	probed := n.probed.passed
	n.probed.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	return Facts{Up: n.up, Checked: n.checked, LastRTT: n.lastRTT, LastErr: n.lastErr,
		LastErrAt: n.lastErrAt, LastCheck: n.lastCheck, Errors: n.errors, Probed: probed}
}

// Silent reports whether the node's last command got no answer at all (noAnswer).
func (n *Node) Silent() bool { return n.silent.Load() }

// Record notes the outcome of one call for the node's facts and Config.Observe.
func (n *Node) Record(op string, rtt time.Duration, err error) {
	if n.cfg.Observe != nil {
		n.cfg.Observe(n.addr, op, rtt, err)
	}
	n.silent.Store(noAnswer(err))
	if err == nil {
		return
	}
	n.mu.Lock()
	n.errors++
	n.lastErr = err
	n.lastErrAt = time.Now()
	n.mu.Unlock()
}

// noAnswer reports whether err means the node did not answer at all: a timeout, a
// refused, reset or closed connection. A Redis error reply, garbage, or a TLS or
// authentication failure is an answer of sorts.
func noAnswer(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET)
}

// Do sends one command, on a connection of its own (not batched), unrecorded.
func (n *Node) Do(ctx context.Context, args ...any) Reply {
	return replyOf(n.client.Do(ctx, args...))
}

// Pipeline sends cmds in one round trip, unrecorded, and returns their replies, in
// order; the error is the pipeline's (the first failed command's, or the connection's).
func (n *Node) Pipeline(ctx context.Context, cmds ...[]any) ([]Reply, error) {
	var sent []*redis.Cmd
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		sent = queue(ctx, p, cmds)
		return nil
	})
	return replies(sent), err
}

// queue adds cmds to p.
func queue(ctx context.Context, p redis.Pipeliner, cmds [][]any) []*redis.Cmd {
	out := make([]*redis.Cmd, len(cmds))
	for i, args := range cmds {
		out[i] = p.Do(ctx, args...)
	}
	return out
}

func replies(cmds []*redis.Cmd) []Reply {
	out := make([]Reply, len(cmds))
	for i, c := range cmds {
		out[i] = replyOf(c)
	}
	return out
}

// hello is what a new connection and a health check send first (Config.Hello).
func (n *Node) hello() [][]any {
	if n.cfg.Hello == nil {
		return [][]any{{"ping"}}
	}
	return n.cfg.Hello()
}

// onConnect sends Hello's commands on every new connection before it carries any
// command (so the owner learns of a restart before the node's first answer after it),
// and, until the scripts' digests are known, asks for them in the same pipeline
// (digest.go).
func (n *Node) onConnect(ctx context.Context, cn *redis.Conn) error {
	var hello []*redis.Cmd
	var dig *redis.Cmd
	_, err := cn.Pipelined(ctx, func(p redis.Pipeliner) error {
		hello = queue(ctx, p, n.hello())
		dig = learnDigests(ctx, p, n.cfg.Scripts) // last: Exec's error is then the first failed command's
		return nil
	})
	// A refused digest request alone costs nothing but EVALs (scripts go with their
	// text): the connection stays usable.
	helloFailed := false
	for _, h := range hello {
		helloFailed = helloFailed || h.Err() != nil
	}
	if err != nil && (dig == nil || dig.Err() == nil || helloFailed) {
		return fmt.Errorf("redlock: hello on connect (INFO, max_ttl announce): %w", err)
	}
	if n.cfg.Heard != nil {
		n.cfg.Heard(replies(hello))
	}
	noteDigests(dig, n.cfg.Scripts)
	return nil
}

// Check is one health check: Hello's commands in one pipeline, bounded by timeout,
// recorded as "health"; on success their replies go to Heard, then the node counts as
// up with the check's round trip as its latency.
func (n *Node) Check(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var sent []*redis.Cmd
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		sent = queue(ctx, p, n.hello())
		return nil
	})
	rtt := time.Since(start)
	n.Record("health", rtt, err)
	if err == nil && n.cfg.Heard != nil {
		n.cfg.Heard(replies(sent))
	}
	n.mu.Lock()
	n.checked = true
	n.lastCheck = time.Now()
	n.up = err == nil
	if err == nil {
		n.lastRTT = rtt
	}
	n.mu.Unlock()
}
