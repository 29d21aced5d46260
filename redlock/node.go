package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/url"
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
	lastErr     error
	lastErrAt   time.Time
	lastCheck   time.Time
	runID       string
	lossSeen    time.Time       // when this client saw the node lose its keys (monotonic reading; voting.go)
	lossCause   QuarantineCause // QuarantineRestart or QuarantineDataLoss
	marker      string          // the node's data marker as last read (dataloss.go)
	evicted     int64           // INFO's evicted_keys as last read, -1 before
	youngWarned bool            // warnYoung logged
	errors      uint64
}

// NodeStatus is one node's health at one moment (Status.Nodes).
type NodeStatus struct {
	Address   string        // never with a password
	Up        bool          // its last command or health check succeeded
	Checked   bool          // it has been checked at least once
	LastRTT   time.Duration // of the last health check
	LastError string        // the last failure, if any
	// LastErr is that failure as an error: a *ConfigError (errors.As) when only the
	// operator can fix it (TLS, ACL, credentials), else a node that is down or slow.
	LastErr error
	// LastErrorAt and LastCheck are when the last failure and the last health check were.
	LastErrorAt, LastCheck time.Time
	RunID                  string    // the server's run_id: a change means a restart
	QuarantinedUntil       time.Time // a node that may have lost its keys does not vote before then (voting.go)
	// QuarantineCause says why: QuarantineRestart, QuarantineDataLoss or QuarantineYoung ("" when it votes).
	QuarantineCause QuarantineCause
	// Votes reports whether the node's grants count towards a quorum now: it is up and
	// not quarantined (the library's own rule; an operator view needs no other).
	Votes  bool
	Marker bool   // the node keeps this client's data marker (dataloss.go): losses without a restart are seen
	Errors uint64 // failed commands so far
}

// CheckNodeURL checks a node URL's form without connecting, by the rules New applies:
// redis:// or rediss:// with a host, unix:// with a socket path, or bare host:port; a
// URL's skip_verify is refused (it silently turns certificate checks off: set
// InsecureSkipVerify in Options.TLSConfig instead, for tests only). The error never
// shows a password.
func CheckNodeURL(raw string) error {
	_, _, err := parseNodeURL(raw)
	return err
}

// parseNodeURL is the one parser of node URLs (the Caddy plugin checks its config with
// CheckNodeURL): go-redis's ParseURL, after the checks above.
func parseNodeURL(raw string) (*redis.Options, string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, "", fmt.Errorf("redlock: empty node URL")
	}
	if !strings.Contains(raw, "://") {
		host, port, err := net.SplitHostPort(raw)
		if err != nil || host == "" || port == "" {
			return nil, "", fmt.Errorf("redlock: node %q: want redis://host:port, rediss://host:port, unix:///path or host:port", raw)
		}
		opt := &redis.Options{Addr: raw}
		return opt, nodeAddr(opt), nil
	}
	shown := redact.URL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("redlock: node URL %q: not a valid URL", shown)
	}
	switch {
	case u.Query().Has("skip_verify"):
		return nil, "", fmt.Errorf("redlock: node URL %q: skip_verify in the URL is not accepted: it silently turns certificate checks off; use insecure_skip_verify in the tls block (Options.TLSConfig in the library; tests only)", shown)
	case u.Scheme == "unix" && (u.Path == "" || u.Path == "/"):
		return nil, "", fmt.Errorf("redlock: node URL %q: no socket path (unix:///path/redis.sock)", shown)
	case u.Scheme != "unix" && u.Scheme != "redis" && u.Scheme != "rediss":
		return nil, "", fmt.Errorf("redlock: node URL %q: scheme must be redis, rediss or unix", shown)
	case u.Scheme != "unix" && u.Hostname() == "":
		return nil, "", fmt.Errorf("redlock: node URL %q: no host", shown)
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		// go-redis quotes the URL in its error: keep a password out of it.
		msg := strings.ReplaceAll(err.Error(), raw, shown)
		return nil, "", fmt.Errorf("redlock: node URL %q: %s", shown, msg)
	}
	return opt, nodeAddr(opt), nil
}

func newNode(c *Client, raw string) (*node, error) {
	opt, addr, err := parseNodeURL(raw)
	if err != nil {
		return nil, err
	}
	n := &node{addr: addr, c: c, evicted: -1}
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
		deliver(cmd.script.run(cctx, n.client, cmd.keys, cmd.argv...))
	}()
}

// onConnect learns the run_id on every new connection, and announces this client's
// MaxTTL, before the connection carries any command: a node that restarted is therefore
// quarantined before its first vote after the restart, and no lock of this client lands
// on a node that does not know the bound that covers it (voting.go). Until the scripts'
// digests are known, the same pipeline asks for them (digest.go).
func (n *node) onConnect(ctx context.Context, cn *redis.Conn) error {
	var info *redis.StringCmd
	var ann, dig *redis.Cmd
	_, err := cn.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx)
		ann = n.announce(ctx, p)
		dig = learnDigests(ctx, p) // last: Exec's error is then the first failed command's
		return nil
	})
	// A refused digest request alone costs nothing but EVALs (scripts go with their
	// text): the connection stays usable.
	if err != nil && (dig == nil || dig.Err() == nil || info.Err() != nil || ann.Err() != nil) {
		return fmt.Errorf("redlock: INFO and max_ttl announce on connect: %w", err)
	}
	n.observe(info.Val(), ann)
	noteDigests(dig)
	return nil
}

// announce queues announceScript with this client's MaxTTL and a new marker value (used
// only if the node has none). EVAL, not EVALSHA: it runs on a new connection or once a
// health interval, and needs no NOSCRIPT fallback.
func (n *node) announce(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	b := n.c.opt.MaxTTL
	return p.Eval(ctx, announceScript, []string{n.c.boundKey(), n.c.markerKey()}, b.Milliseconds(),
		boundExpiry(b).Milliseconds(), maxBound.Milliseconds(), rand.Text())
}

// noteBound records the bound a node answered to announceScript (one above maxBound is
// not believed: the script replaces such a value).
func (n *node) noteBound(ms int64) {
	if ms > 0 && ms <= maxBound.Milliseconds() {
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

// observe applies the delayed-restart and data-loss rules to an INFO reply and the
// node's answer to announceScript. A node whose run_id changed, or whose data marker is
// gone or changed, or that evicted keys, may have lost its keys, so it must not vote
// until every lock it could have held has expired (lossSeen, voting.go). A node seen for
// the first time cannot be compared with anything, but its uptime and its marker's age
// tell when its data began: if less than a quarantine ago, it may be a node that just
// lost its keys under other clients' locks (this client being new: a Caddy start or
// reload), and it is held back the same way until a quarantine after that (young),
// unless it began together with a majority of the nodes (freshStart).
func (n *node) observe(info string, ann *redis.Cmd) {
	now := time.Now()
	id := parseInfoField(info, "run_id")
	up, upErr := strconv.ParseInt(parseInfoField(info, "uptime_in_seconds"), 10, 64)
	evicted, evErr := strconv.ParseInt(parseInfoField(info, "evicted_keys"), 10, 64)
	m, mErr := parseMarker(ann)
	if mErr == nil {
		n.noteBound(m.bound)
	}
	n.mu.Lock()
	prevID, prevMarker, prevEvicted := n.runID, n.marker, n.evicted
	var cause QuarantineCause
	switch {
	case id != "" && prevID != "" && prevID != id:
		cause = QuarantineRestart
	case mErr == nil && prevMarker != "" && prevMarker != m.value:
		cause = QuarantineDataLoss // gone (re-created) or changed: FLUSHALL, a failover, a restart without run_id
	case evErr == nil && prevEvicted >= 0 && evicted > prevEvicted:
		cause = QuarantineDataLoss // evicted under memory pressure: any key may have been a lock
	}
	if id != "" {
		n.runID = id
	}
	if evErr == nil {
		n.evicted = evicted
	}
	if mErr == nil {
		n.marker = m.value
	}
	var until time.Time
	if cause != "" {
		n.lossSeen, n.lossCause = now, cause
		until = now.Add(n.c.quarantine())
	}
	// When the data began: the process start (Redis reports floor(now) - floor(start) in
	// whole seconds: the run is more than uptime-1 seconds old, and may be barely that;
	// take the latest possible start), or the marker's creation if later. Set on first
	// sight and on every change.
	if prevID != id || prevMarker != m.value || cause != "" {
		var started time.Time
		if upErr == nil {
			started = now.Add(-time.Duration(max(up-1, 0)) * time.Second)
		}
		if mErr == nil {
			if ms := now.Add(-m.age); ms.After(started) {
				started = ms
			}
		}
		if !started.IsZero() {
			n.startedAt.Store(started.UnixNano())
		}
	}
	n.mu.Unlock()
	if cause != "" {
		n.c.opt.Logger.Warn("redis node may have lost its keys; it will not vote until its quarantine ends",
			slog.String("node", n.addr), slog.String("cause", string(cause)), slog.String("previous_run_id", prevID),
			slog.String("run_id", id), slog.Time("quarantined_until", until))
		n.reportQuarantine(until, cause)
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
	n.lastErr = err
	n.lastErrAt = time.Now()
	n.mu.Unlock()
}

func (n *node) status() NodeStatus {
	n.mu.Lock()
	s := NodeStatus{
		Address: n.addr, Up: n.up, Checked: n.checked, LastRTT: n.lastRTT, LastErr: n.lastErr,
		LastErrorAt: n.lastErrAt, LastCheck: n.lastCheck, RunID: n.runID, Errors: n.errors, Marker: n.marker != "",
	}
	n.mu.Unlock()
	if s.LastErr != nil {
		s.LastError = s.LastErr.Error()
	}
	s.QuarantinedUntil, s.QuarantineCause = n.quarantine(time.Now())
	s.Votes = s.Up && s.QuarantinedUntil.IsZero()
	return s
}

// check is one health probe: INFO gives liveness, latency, the run_id and evictions; the
// announce renews this client's MaxTTL and the data marker on the node and reads both.
func (n *node) check(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var info *redis.StringCmd
	var ann *redis.Cmd
	_, err := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx)
		ann = n.announce(ctx, p)
		return nil
	})
	rtt := time.Since(start)
	n.record("health", rtt, err)
	if err == nil {
		n.observe(info.Val(), ann)
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
