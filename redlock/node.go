package redlock

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redact"
)

// node is one independent Redis master: its client and what we know of its health.
type node struct {
	addr   string // host:port[/db], never a password
	client *redis.Client
	// batch pipelines the per-request scripts of concurrent callers (batcher.go);
	// nil with Options.DisablePipelining.
	batch *batcher
	c     *Client
	// startedAt is when the node's current run started (UnixNano, the latest instant its
	// INFO uptime allows), 0 until seen; read without mu (Client.freshStart).
	startedAt atomic.Int64
	// bound is the largest MaxTTL any client announced to this node (ns), as it last
	// said; read without mu (Client.bound, voting.go).
	bound  atomic.Int64
	probed probeState // permission probe (probe.go)
	// silent: the node's last command got no answer at all (a timeout, a refused or
	// broken connection: noAnswer), as opposed to a reply, a Redis error or garbage. An acquire round does
	// not wait for a silent node to decide (round.decisiveLocked). Cleared by the next
	// answer; read without mu.
	silent atomic.Bool
	health healthReport // what the HealthObserver was told; health loop only

	mu          sync.Mutex
	up          bool
	checked     bool
	lastRTT     time.Duration
	lastErr     string
	lastErrAt   time.Time
	lastCheck   time.Time
	runID       string
	restartSeen time.Time // when this client saw the run_id change (monotonic reading)
	youngWarned bool      // warnYoung logged
	errors      uint64
}

// NodeStatus is one node's health at one moment (Status.Nodes).
type NodeStatus struct {
	Address   string        // never with a password
	Up        bool          // its last command or health check succeeded
	Checked   bool          // it has been checked at least once
	LastRTT   time.Duration // of the last health check
	LastError string        // the last failure, if any
	// LastErrorAt and LastCheck are when the last failure and the last health check were.
	LastErrorAt, LastCheck time.Time
	RunID                  string    // the server's run_id: a change means a restart
	QuarantinedUntil       time.Time // a restarted node does not vote before then (voting.go)
	Errors                 uint64    // failed commands so far
}

// parseNodeURL accepts redis://, rediss:// (TLS), unix:// and bare host:port (connect.go).
func parseNodeURL(raw string) (*redis.Options, string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, "", fmt.Errorf("redlock: empty node URL")
	}
	var opt *redis.Options
	if strings.Contains(raw, "://") {
		o, err := redis.ParseURL(raw)
		if err != nil {
			// go-redis quotes the URL in its error: keep a password out of it.
			msg := strings.ReplaceAll(err.Error(), raw, redact.URL(raw))
			return nil, "", fmt.Errorf("redlock: node URL %q: %s", redact.URL(raw), msg)
		}
		opt = o
	} else {
		host, port, err := net.SplitHostPort(raw)
		if err != nil || host == "" || port == "" {
			return nil, "", fmt.Errorf("redlock: node address %q: want host:port, redis://..., rediss://... or unix:///path", raw)
		}
		opt = &redis.Options{Addr: raw}
	}
	return opt, nodeAddr(opt), nil
}

func newNode(c *Client, raw string) (*node, error) {
	opt, addr, err := parseNodeURL(raw)
	if err != nil {
		return nil, err
	}
	n := &node{addr: addr, c: c}
	t := c.opt.NodeTimeout
	opt.DialTimeout = t
	opt.ReadTimeout = t
	opt.WriteTimeout = t
	opt.PoolTimeout = t
	opt.DialerRetries = 1
	opt.MaxRetries = -1 // a retried SET would double the time spent; Redlock retries itself
	opt.ContextTimeoutEnabled = true
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.OnConnect = n.onConnect
	applyTLS(opt, c.opt)
	if n.client, err = buildClient(opt, c.opt); err != nil {
		return nil, err
	}
	if !c.opt.DisablePipelining {
		n.batch = newBatcher(n)
	}
	return n, nil
}

// call runs a per-request script on the node and hands the reply to deliver, exactly
// once and by about the node timeout (or ctx's deadline, if sooner): through the batcher
// when pipelining, else on a connection and goroutine of its own. deliver must not block.
func (n *node) call(ctx context.Context, deliver func(*redis.Cmd), cmd *command) {
	deadline := time.Now().Add(n.c.opt.NodeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if n.batch != nil {
		n.batch.submit(deadline, deliver, cmd)
		return
	}
	go func() {
		// Not cancelled with ctx: the batcher does not cancel sent calls either, and a
		// caller may stop waiting early (a release returns at a quorum of deletes) while
		// the rest must still reach their nodes. Each is bounded by its deadline.
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		if cmd.script == nil {
			deliver(n.client.Do(cctx, cmd.argv...))
			return
		}
		deliver(cmd.script.Run(cctx, n.client, cmd.keys, cmd.argv...))
	}()
}

// onConnect learns the run_id on every new connection, and announces this client's
// MaxTTL, before the connection carries any command: a node that restarted is therefore
// quarantined before its first vote after the restart, and no lock of this client lands
// on a node that does not know the bound that covers it (voting.go).
func (n *node) onConnect(ctx context.Context, cn *redis.Conn) error {
	var info *redis.StringCmd
	var ann *redis.Cmd
	_, err := cn.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx, "server")
		ann = n.announce(ctx, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redlock: INFO server and max_ttl announce on connect: %w", err)
	}
	n.observe(info.Val())
	n.noteBound(ann)
	return nil
}

// announce queues announceScript with this client's MaxTTL. EVAL, not EVALSHA: it runs
// on a new connection or once a health interval, and needs no NOSCRIPT fallback.
func (n *node) announce(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	b := n.c.opt.MaxTTL
	return p.Eval(ctx, announceScript, []string{n.c.boundKey()}, b.Milliseconds(), boundExpiry(b).Milliseconds(), maxBound.Milliseconds())
}

// noteBound records the bound a node answered to announceScript (one above maxBound is
// not believed: the script replaces such a value).
func (n *node) noteBound(cmd *redis.Cmd) {
	if ms, err := cmd.Int64(); err == nil && ms > 0 && ms <= maxBound.Milliseconds() {
		n.bound.Store(int64(time.Duration(ms) * time.Millisecond))
	}
}

func parseInfoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// observe applies the delayed-restart rule to an INFO server reply. A node whose run_id
// changed may have lost its keys, so it must not vote until every lock it could have
// held has expired. A node seen for the first time cannot be compared with anything, but
// its uptime tells when it started: if less than a quarantine ago, it may be a node that
// just restarted under other clients' locks (this client being new: a Caddy start or
// reload), and it is held back the same way until a quarantine after its start (young),
// unless it started together with a majority of the nodes (Client.freshStart).
func (n *node) observe(info string) {
	id := parseInfoField(info, "run_id")
	if id == "" {
		return
	}
	now := time.Now()
	n.mu.Lock()
	prev := n.runID
	n.runID = id
	var until time.Time
	if prev != "" && prev != id {
		n.restartSeen = now
		until = now.Add(n.c.quarantine())
	}
	if prev != id {
		// Redis reports floor(now) - floor(start) in whole seconds: the run is more than
		// uptime-1 seconds old, and may be barely that. Take the latest possible start.
		if up, err := strconv.ParseInt(parseInfoField(info, "uptime_in_seconds"), 10, 64); err == nil {
			n.startedAt.Store(now.Add(-time.Duration(max(up-1, 0)) * time.Second).UnixNano())
		}
	}
	n.mu.Unlock()
	if !until.IsZero() {
		n.c.opt.Logger.Warn("redis node restarted; it will not vote until its quarantine ends",
			slog.String("node", n.addr), slog.String("previous_run_id", prev), slog.String("run_id", id), slog.Time("quarantined_until", until))
		n.reportQuarantine(until, QuarantineRestart)
	}
}

// record notes the outcome of a command for health and metrics.
func (n *node) record(op string, rtt time.Duration, err error) {
	if obs := n.c.opt.Observer; obs != nil {
		obs.NodeCall(n.addr, op, rtt, err)
	}
	n.silent.Store(noAnswer(err))
	if err == nil {
		return
	}
	n.mu.Lock()
	n.errors++
	n.lastErr = err.Error()
	n.lastErrAt = time.Now()
	n.mu.Unlock()
}

func (n *node) status() NodeStatus {
	n.mu.Lock()
	s := NodeStatus{
		Address: n.addr, Up: n.up, Checked: n.checked, LastRTT: n.lastRTT, LastError: n.lastErr,
		LastErrorAt: n.lastErrAt, LastCheck: n.lastCheck, RunID: n.runID, Errors: n.errors,
	}
	n.mu.Unlock()
	s.QuarantinedUntil = n.quarantinedUntil(time.Now())
	return s
}

// check is one health probe: INFO server gives liveness, latency and the run_id; the
// announce renews this client's MaxTTL on the node and reads the bound it holds.
func (n *node) check(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var info *redis.StringCmd
	var ann *redis.Cmd
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx, "server")
		ann = n.announce(ctx, p)
		return nil
	})
	rtt := time.Since(start)
	n.record("health", rtt, err)
	if err == nil {
		n.observe(info.Val())
		n.noteBound(ann)
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
