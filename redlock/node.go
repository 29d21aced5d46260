package redlock

import (
	"crypto/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// node is one independent Redis master: its transport (connection, batcher, health
// facts: internal/transport) and what this client's voting rule knows of it.
type node struct {
	addr string // host:port[/db], never a password (tr.Addr())
	tr   *transport.Node
	c    *Client
	// startedAt is when the node's current run started (UnixNano, the latest instant its
	// INFO uptime allows), 0 until seen; read without mu (voter.votes).
	startedAt atomic.Int64
	// bound is the largest MaxTTL any client announced to this node (ns), as it last
	// said; read without mu (Client.bound, voting.go).
	bound atomic.Int64
	// canEvict: the node's maxmemory-policy may evict keys (INFO's maxmemory and
	// maxmemory_policy, as its last health check or hello read them; true until read).
	// Its grants then carry its eviction count (evictionsLua); read without mu (sendRound).
	canEvict          atomic.Bool
	noEvictionsWarned atomic.Bool // warnNoEvictions logged
	// markerRead: this client has read the node's data marker once. Its hellos carry the
	// client's first mark (Client.firstMark) until then, a random mark after (voting.go).
	markerRead atomic.Bool
	// seq is the highest write sequence this client took in from the node (rollback.go),
	// 0 before any; written under mu, read without it (sendRound).
	seq atomic.Int64
	// seqEpoch moves whenever the reading is dropped on a loss seen (resetSeqLocked).
	seqEpoch atomic.Int64
	health   healthReport // what the HealthObserver was told; health loop only

	mu          sync.Mutex
	runID       string
	lossSeen    time.Time       // when this client saw the node lose its keys (monotonic reading; voting.go)
	lossCause   QuarantineCause // QuarantineRestart or QuarantineDataLoss
	marker      string          // the node's data marker as last read (dataloss.go)
	markedAt    time.Time       // when that marker was made, by this client's clock (its age as read; zero if unknown)
	markerDue   bool            // a grant saw the marker gone or changed; not read since (voting.go)
	evicted     int64           // INFO's evicted_keys as last read, -1 before
	youngWarned bool            // warnYoung logged
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
	QuarantinedUntil       time.Time // a node that may have lost its keys does not vote before then
	// QuarantineCause says why: QuarantineRestart, QuarantineDataLoss or QuarantineYoung ("" when it votes).
	QuarantineCause QuarantineCause
	// Votes reports whether the node's grants count towards a quorum now: it is up and
	// not quarantined (the library's own rule; an operator view needs no other).
	Votes  bool
	Marker bool   // the node keeps the data marker this client read: losses without a restart are seen
	Errors uint64 // failed commands so far
}

// CheckNodeURL checks a node URL's form without connecting, by the rules New applies:
// redis:// or rediss:// with a host, unix:// with a socket path, or bare host:port; a
// URL's skip_verify is refused (it silently turns certificate checks off: set
// InsecureSkipVerify in Options.TLSConfig instead, for tests only). The error never
// shows a password.
func CheckNodeURL(raw string) error {
	_, err := transport.ParseURL(raw)
	return err
}

func newNode(c *Client, raw string) (*node, error) {
	n := &node{c: c, evicted: -1}
	n.canEvict.Store(true)
	cfg := transport.Config{
		NodeTimeout: c.opt.NodeTimeout,
		Pipelining:  !c.opt.DisablePipelining,
		TLS:         c.opt.TLSConfig,
		Build:       c.opt.ClientBuilder,
		Scripts:     scripts,
		Hello:       n.hello,
		Heard:       n.heard,
		ProbeName:   c.probeName(),
		Closed:      ErrClosed,
		Logger:      c.opt.Logger,
	}
	if obs := c.opt.Observer; obs != nil {
		cfg.Observe = obs.NodeCall
	}
	tr, err := transport.New(raw, cfg)
	if err != nil {
		return nil, err
	}
	n.tr, n.addr = tr, tr.Addr()
	return n, nil
}

// record notes the outcome of a command for health and metrics (the Observer).
func (n *node) record(op string, rtt time.Duration, err error) { n.tr.Record(op, rtt, err) }

// silent reports whether the node's last command got no answer at all (a timeout, a
// refused or broken connection), as opposed to a reply, a Redis error or garbage. An
// acquire round does not wait for a silent node to decide (round.decisiveLocked).
func (n *node) silent() bool { return n.tr.Silent() }

// hello is what every new connection sends before it carries any command, and every
// health check sends: INFO (the run_id, uptime, evictions) and the announce of this
// client's MaxTTL with the data marker. On a new connection, a node that restarted is
// therefore quarantined before its first vote after the restart, and no lock of this
// client lands on a node that does not know the bound that covers it (voting.go).
// announceScript goes as EVAL, not EVALSHA: it runs on a new connection or once a
// health interval, and needs no NOSCRIPT fallback. Its replies go to heard.
// A marker the announce creates carries the client's first mark while this client has
// not yet read the node's marker (its first contact: the hellos of the connections and
// health check New starts, and their retries), else a random one: the nodes a client
// found unmarked on its first contact share one mark, which is how a fresh start is told
// from a node that lost its data alone (freshStartOf, voting.go).
func (n *node) hello() [][]any {
	b := n.c.opt.MaxTTL
	mark := n.c.firstMark
	if n.markerRead.Load() {
		mark = rand.Text()
	}
	sr := n.seqReading()
	return [][]any{
		{"info"},
		{"eval", announceScript, 3, n.c.boundKey(), n.c.markerKey(), n.c.seqKey(), b.Milliseconds(),
			boundExpiry(b).Milliseconds(), maxBound.Milliseconds(), mark, sr.seq, sr.epoch},
	}
}

// heard reads hello's replies (observe).
func (n *node) heard(replies []transport.Reply) {
	if len(replies) != 2 {
		return
	}
	info, _ := replies[0].Text()
	n.observe(info, replies[1])
}

// noteBound records the bound a node answered to announceScript (one above maxBound is
// not believed: the script replaces such a value).
func (n *node) noteBound(ms int64) {
	if ms > 0 && ms <= maxBound.Milliseconds() {
		n.bound.Store(int64(time.Duration(ms) * time.Millisecond))
	}
}

// mayEvict reports whether an INFO reply says the node may evict keys: a maxmemory
// limit with a maxmemory-policy other than noeviction. A reply without the fields (a
// proxy, another server) may: its grants then carry the eviction count when the script
// can read it (evictionsLua).
func mayEvict(info string) bool {
	return parseInfoField(info, "maxmemory") != "0" && parseInfoField(info, "maxmemory_policy") != "noeviction"
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
// unless it began together with a majority of the nodes (freshStartOf).
func (n *node) observe(info string, ann transport.Reply) {
	now := time.Now()
	id := parseInfoField(info, "run_id")
	up, upErr := strconv.ParseInt(parseInfoField(info, "uptime_in_seconds"), 10, 64)
	evicted, evErr := strconv.ParseInt(parseInfoField(info, "evicted_keys"), 10, 64)
	canEvict := mayEvict(info)
	n.canEvict.Store(canEvict)
	m, mErr := parseMarker(ann)
	if mErr == nil {
		n.noteBound(m.bound)
	}
	n.mu.Lock()
	prevID, prevMarker, prevEvicted := n.runID, n.marker, n.evicted
	var cause QuarantineCause
	wentBack := false
	switch {
	case id != "" && prevID != "" && prevID != id:
		cause = QuarantineRestart
	case mErr == nil && prevMarker != "" && prevMarker != m.value:
		cause = QuarantineDataLoss // gone (re-created) or changed: FLUSHALL, a failover, a restart without run_id
	case mErr == nil && n.seqCurrentLocked(m.seqBefore) && seqWentBack(m.seq, m.seqBefore, false):
		// Gone back in time with its marker (rollback.go): a failover to a lagging replica,
		// a restart from an older snapshot, where INFO shows no run_id or it is unchanged.
		cause, wentBack = QuarantineDataLoss, true
	case evErr == nil && prevEvicted >= 0 && evicted != prevEvicted:
		// Evicted under memory pressure: any key may have been a lock. (A count gone down
		// was reset, CONFIG RESETSTAT: the evictions since the last reading are unknown.)
		cause = QuarantineDataLoss
	case evErr == nil && prevEvicted < 0 && evicted > 0 && canEvict:
		// A first sight of a node that may evict and has evicted: INFO gives a count, not
		// when, and the last eviction may have taken another client's lock just now.
		cause = QuarantineDataLoss
	}
	if id != "" {
		n.runID = id
	}
	if evErr == nil {
		n.evicted = evicted
	}
	if mErr == nil {
		if m.value != prevMarker {
			n.markedAt = time.Time{}
			if m.aged {
				n.markedAt = now.Add(-m.age)
			}
		}
		n.marker, n.markerDue = m.value, false
		n.markerRead.Store(true)
		switch current := n.seqCurrentLocked(m.seqBefore); {
		case cause != "" && current:
			n.resetSeqLocked(m.seq) // a loss seen: the new history's reading (rollback.go)
		case cause != "":
			n.resetSeqLocked(0) // sent before the last reset: its reading may be of either history
		case current:
			n.noteSeqLocked(m.seq)
		}
	}
	// A marker that outlived its process came with data from a snapshot or a replica,
	// which may be older than what other clients saw there: tell them (rollback.go).
	survived := (cause == QuarantineRestart || wentBack) && mErr == nil && prevMarker != "" && m.value == prevMarker
	if survived {
		n.marker, n.markerDue = "", true // deleted below: read anew at the next health check
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
	if survived {
		n.forgetMarker()
	}
	if cause != "" {
		n.c.opt.Logger.Warn("redis node may have lost its keys; it will not vote until its quarantine ends",
			slog.String("node", n.addr), slog.String("cause", string(cause)), slog.String("previous_run_id", prevID),
			slog.String("run_id", id), slog.Time("quarantined_until", until))
		n.reportQuarantine(until, cause)
	}
}

func (n *node) status() NodeStatus {
	f := n.tr.Facts()
	s := NodeStatus{
		Address: n.addr, Up: f.Up, Checked: f.Checked, LastRTT: f.LastRTT, LastErr: f.LastErr,
		LastErrorAt: f.LastErrAt, LastCheck: f.LastCheck, Errors: f.Errors,
	}
	n.mu.Lock()
	s.RunID, s.Marker = n.runID, n.marker != ""
	n.mu.Unlock()
	if s.LastErr != nil {
		s.LastError = s.LastErr.Error()
	}
	s.QuarantinedUntil, s.QuarantineCause = n.quarantine(time.Now())
	s.Votes = s.Up && s.QuarantinedUntil.IsZero()
	return s
}
