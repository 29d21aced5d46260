package redlock

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

// Data loss without a restart. A node can lose keys while its run_id stays the same
// (FLUSHALL or FLUSHDB, eviction under memory pressure, a failover behind one address
// that keeps the run_id, a proxy that hides INFO) or report no run_id at all (Dragonfly):
// the restart rule alone would let it vote with locks it forgot. So every node keeps a
// data marker under the prefix (markerName): a random value and the node's clock when it
// was created, written by the first client to find it absent and kept alive (PEXPIRE) by
// every client's announce, on every new connection and every health check
// (announceScript). A client that finds the marker gone (re-created) or changed since
// its last reading, or INFO's evicted_keys moved, saw the node lose keys: it quarantines
// it exactly like a restarted node (voting.go, QuarantineDataLoss). A client meeting a node
// for the first time reads the marker's age as it reads INFO's uptime: data that began
// less than a quarantine ago is young.
//
// Between two health checks a loss is seen by the acquires themselves: every grant
// carries the node's marker as the acquire script read it, in the same atomic call
// (markerLua), and a grant whose marker is gone or changed since this client's last
// reading is no vote and quarantines the node at once (grantHolds). A grant from a node
// that may evict (node.canEvict) also carries its eviction count (evictionsLua), since an
// eviction usually spares the marker: a count other than the last reading is a loss
// too. So a node flushed a moment ago cannot lend its vote to a new holder of a key it
// forgot. The node then votes again only once its marker was read anew (markerDue,
// voting.go), by a health check: a quarantine shorter than the health interval would
// otherwise end while no marker is known to check its grants against, and a second loss
// would pass unseen. What it does not cover: a majority losing data at once (a fresh
// start; Redlock without persistence cannot survive it), and a client that never read
// the node's marker (its first sighting judges the node by the marker's age, as by the
// uptime).

// markerName follows the prefix directly, like boundName: no lock key is empty.
const markerName = "\x00data_marker"

func (c *Client) markerKey() string { return c.marker }

// marker is a node's answer to announceScript.
type marker struct {
	bound int64         // the bound stored, ms
	value string        // the marker's value (random:created_ms)
	age   time.Duration // how long ago the node created it, by its own clock
}

// parseMarker reads announceScript's reply {bound_ms, marker, now_ms}.
func parseMarker(reply transport.Reply) (marker, error) {
	vals, err := reply.Slice()
	if err != nil {
		return marker{}, err
	}
	if len(vals) != 3 {
		return marker{}, fmt.Errorf("announce reply of %d items, want 3", len(vals))
	}
	bound, ok1 := vals[0].(int64)
	value, ok2 := vals[1].(string)
	now, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return marker{}, errors.New("announce reply of the wrong types")
	}
	m := marker{bound: bound, value: value}
	if _, created, ok := strings.Cut(value, ":"); ok {
		if ms, err := strconv.ParseInt(created, 10, 64); err == nil && now >= ms {
			m.age = time.Duration(now-ms) * time.Millisecond
		}
	}
	return m, nil
}

// grantHolds judges one reply to an acquire against what this client knows of the node,
// in one step under n.mu: a reply from a node held back for a loss (a restart, a data
// loss, or a marker due to be read again: lossUntilOf) is no answer at all, and a grant
// shows a loss seen now when its reading of the marker ("" when absent) is not the
// marker this client last read there (a flush, an eviction that took the marker with it,
// a failover), or when it carries an eviction count (a node that may evict: evictionsLua)
// other than the last this client read (an eviction that spared the marker may have
// taken any lock). It reports the time the node is held back until, zero when the reply
// stands. One step, so that a health check landing between two checks cannot let a
// grant through that either would refuse. A node whose marker or count this client has
// not read yet is judged by its health checks (a first sight: its age, youngness; the
// count of a node that may evict: observe).
func (n *node) grantHolds(rep nodeReply, now time.Time) (heldBack time.Time) {
	n.mu.Lock()
	if !n.lossSeen.IsZero() { // quarantine reads atomics only: no lock under n.mu
		if until := lossUntilOf(n.factsLocked(), n.c.quarantine(), now); !until.IsZero() {
			n.mu.Unlock()
			return until
		}
	}
	if !rep.ok {
		n.mu.Unlock()
		return time.Time{}
	}
	lostMarker := n.marker != "" && rep.marker != n.marker
	evicted := rep.evicted >= 0 && n.evicted >= 0 && rep.evicted != n.evicted
	if rep.evicted >= 0 {
		n.evicted = rep.evicted
	}
	if !lostMarker && !evicted {
		n.mu.Unlock()
		return time.Time{}
	}
	if lostMarker {
		// Forget the old reading, and hold the node back until the marker is read again
		// (markerDue): the next health check reads it anew (re-created by then, or by it)
		// as a first sight, dated by its age (youngness), without seeing this loss a
		// second time. Until then no grant of the node can be checked: a second loss
		// would pass.
		n.marker, n.markerDue = "", true
	}
	n.lossSeen, n.lossCause = now, QuarantineDataLoss
	n.mu.Unlock()
	until := now.Add(n.c.quarantine())
	seen := "acquire: data marker gone or changed (votes again once the marker is read anew)"
	if !lostMarker {
		seen = "acquire: keys evicted"
	}
	n.c.opt.Logger.Warn("redis node may have lost its keys; it will not vote until its quarantine ends",
		slog.String("node", n.addr), slog.String("cause", string(QuarantineDataLoss)),
		slog.String("seen", seen), slog.Time("quarantined_until", until))
	n.reportQuarantine(until, QuarantineDataLoss)
	return until
}

// warnNoEvictions logs, once, that a node that may evict granted without its eviction
// count (INFO refused inside scripts, or without evicted_keys): its evictions are then
// seen by the health checks only, up to a health interval late.
func (n *node) warnNoEvictions() {
	if n.noEvictionsWarned.Swap(true) {
		return
	}
	n.c.opt.Logger.Warn("redis node may evict keys (maxmemory-policy) but its grants cannot read its eviction count (INFO inside scripts): an eviction is seen only by the next health check; use maxmemory-policy noeviction",
		slog.String("node", n.addr))
}
