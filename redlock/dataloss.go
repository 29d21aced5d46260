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
// (FLUSHALL or FLUSHDB, eviction under memory pressure, a proxy that hides INFO) or
// report no run_id at all (Dragonfly):
// the restart rule alone would let it vote with locks it forgot. So every node keeps a
// data marker under the prefix (markerName): a mark (random, or a client's first mark:
// voting.go, "Fresh start"), the run_id of the process that made it and the node's clock
// when it was created, written by the first client to find it absent and kept alive (PEXPIRE) by
// every client's announce, on every new connection and every health check
// (announceScript). A client that finds the marker gone (re-created) or changed since
// its last reading, or INFO's evicted_keys moved, saw the node lose keys: it quarantines
// it exactly like a restarted node (voting.go, QuarantineDataLoss). A client meeting a node
// for the first time reads the marker's age as it reads INFO's uptime: data that began
// less than a quarantine ago is young.
//
// Data loss without a restart: the safety argument
//
// Claim: a node x that lost keys without a visible restart (FLUSHALL or FLUSHDB,
// eviction, a server whose INFO has no run_id) is held back like a restarted one, from
// the first health check of B that follows the loss.
//
// Not this file's: a node that goes back in time WITH its marker. Replication is
// asynchronous, so a replica promoted behind one address has the marker (replicated long
// ago) without the last locks; a restart from an RDB snapshot or an AOF fsynced every
// second likewise keeps the marker and loses the last writes. The marker check cannot see
// that (a marker present says nothing of the writes after it); the write sequence does,
// with the limits argued in rollback.go.
//
// Each node keeps a data marker under the prefix (above): a random value with x's clock
// when it was written, created by the first announce that finds none and kept alive by
// every announce of every client. A loss that takes the marker with it shows as a marker
// gone (re-created with another value) or changed at B's next reading; an eviction may
// spare the marker, but INFO's evicted_keys then moves. Either is a loss seen
// (QuarantineDataLoss): x does not vote for the quarantine after B saw it, exactly as
// after a restart, and is not even asked meanwhile. A client meeting x for the first
// time takes the marker's age as it takes the uptime: data begun less than a quarantine
// ago is young. The rule itself is one pure function of these facts and the time
// (quarantineOf, voting.go; TestQuarantineOf, TestObserveSeesDataLoss,
// TestFlushedNodeDoesNotVote). Between two health checks the acquires see it themselves:
// each grant carries x's marker as the acquire script read it, in the same atomic call
// (markerLua), and a grant with the marker gone or changed since B's last reading is no
// vote and quarantines x at once (grantHolds; TestFlushWindowTwoHolders). A grant by x
// after the loss is therefore never counted by a client that read x's marker before it:
// a node flushed a moment ago cannot lend its vote to a new holder of a key it forgot.
//
// The first try of a writer that may wait, without fencing, to a node that cannot evict
// is not the script but a plain SET NX PX with the marker's GET behind it, on the same
// connection and in the same pipeline; one GET serves every such SET of the pipeline
// (sendRound, transport's Command.Then). Claim: such a grant proves what a script's
// grant proves, that x had lost nothing since B's last reading of its marker when it
// granted the SET. A node is one server (proxies that spread one connection's commands
// over several servers are no node, as a Cluster is none), and a server runs the
// commands of one connection one at a time, in the order they were sent: the GET ran
// after the SET (TestThenRunsBehindItsCallsOncePerPipeline). A loss before the SET took
// the marker (a loss that spares it is an eviction, and a node that may evict gets the
// script, with its eviction count), so the later GET reads it gone or re-created: no
// vote, as with the script. A loss between the SET and the GET is seen the same way (no
// vote for a grant that was good: liveness lost, once). A health check of B between the
// two that reads the re-created marker has B see the loss itself, and grantHolds judges
// the grant against the hold-back of a loss seen and the marker in one step, in either
// order the replies come: no vote. A restart closes the connection, so the GET cannot
// run on the restarted server: the call fails, no vote. A loss after the GET is a loss
// after the grant, as with the script. TestFlushWindowTwoHolders runs both ways.
//
// Having seen the loss in a grant, B forgets x's marker (the next reading is a first
// sight, dated by its age) and has none to check x's grants against until it reads the
// marker again. So x does not vote until then, even past the quarantine (markerDue,
// voting.go): with max_ttl + drift shorter than the health interval the quarantine would
// end first, and a second loss of x in that window would go unseen
// (TestSecondFlushBeforeTheMarkerIsReadAgain). The reading then dates x's data by the
// marker's age: it was re-created after the loss, so x is young until a quarantine after
// that, and everything x lost had lapsed by then (a lock lost at t was granted before t
// with a ttl within the bound).
//
// Evictions between two health checks. Under memory pressure a node with an evicting
// maxmemory-policy (volatile-ttl, -lru, -lfu, allkeys-*) takes lock keys before the
// marker (lock keys expire sooner, and every health check touches the marker), so the
// marker check alone would let x, having evicted A's lock, grant the key to B until B's
// next health check. So a grant from a node that may evict (a maxmemory limit and a
// policy other than noeviction, as the last INFO read them: node.canEvict) also carries
// x's eviction count, read in the same atomic call (evictionsLua: Redis evicts before a
// command runs, never inside a script, so the count covers every eviction before the
// grant), and a count other than B's last reading of it is a loss seen: no vote, and x
// quarantined from now (grantHolds; TestEvictionSparingTheMarkerDoesNotLendAVote).
// Claim: a grant by x after an eviction counts for B only once every lock the eviction
// took has lapsed. The count only grows while x runs, and a reset (a restart, CONFIG
// RESETSTAT) is a change too, so two readings that agree saw no eviction between them.
// If the grant's count agrees with B's last reading (grants and health checks, in the
// order B took them in), that reading was taken after the eviction. Go back through B's
// readings to the first one taken after it: either the reading before that one disagreed
// with it, and B quarantined x when it took it in, after the eviction; or it is B's
// first reading, which cannot date the evictions it counts, and a node that may evict
// and has evicted is held back a quarantine from the first sight (observe). Either way x
// is held back from a moment after the eviction for a quarantine, by whose end every
// lock the eviction took has lapsed. The count costs the node INFO's stats section per
// grant (docs/performance.md), which is why nodes that cannot evict are not asked. Not
// covered: a node switched at runtime (CONFIG SET) to a policy that may evict is judged
// by its old one until the next health check reads the new one, so an eviction within
// that health interval is seen only then; and a node whose scripts cannot read the count
// (INFO refused inside scripts, no evicted_keys) is judged by its health checks alone
// (logged once: warnNoEvictions).
//
// A grant is judged in one step under the node's lock (grantHolds): the hold-back of a
// loss already seen and the marker check. In two steps, a health check seeing the loss
// between them would adopt the new marker after the first step had passed, and the
// second would then pass too. That grant would still have been safe (the same health
// check dates x's data by the new marker: young, and Client.votes refuses the grant, or
// older than a quarantine, and everything x lost has lapsed), but only by the young rule,
// which a fresh start lifts; one step needs no such argument.
//
// What it does not cover: a majority losing data at once (a fresh start; Redlock without
// persistence cannot survive it), and a client that never read the node's marker (its
// first sighting judges the node by the marker's age, as by the uptime). Run nodes with
// maxmemory-policy noeviction, and with AOF where you can.

// markerName follows the prefix directly, like boundName: no lock key is empty.
const markerName = "\x00data_marker"

func (c *Client) markerKey() string { return c.marker }

// marker is a node's answer to announceScript.
type marker struct {
	bound int64         // the bound stored, ms
	value string        // the marker's value (mark/run_id:created_ms)
	age   time.Duration // how long ago the node created it, by its own clock
	aged  bool          // age was read (the marker holds the node's clock: a user granted TIME)
	seq   int64         // the node's write sequence (rollback.go): 0 none yet, -1 not read
	// seqBefore is what this client had read of the sequence when it sent the announce
	// (echoed by the script).
	seqBefore seqReading
}

// markOf is the mark of a marker value (mark/run_id:created_ms, announceScript) when
// the process that made it is runID, the node's current one; else "" (no marker, one
// loaded from disk or a replica, one of an older client without a run_id).
func markOf(value, runID string) string {
	head, _, ok := strings.Cut(value, ":")
	if !ok || runID == "" {
		return ""
	}
	mark, rid, ok := strings.Cut(head, "/")
	if !ok || rid != runID || mark == "" {
		return ""
	}
	return mark
}

// parseMarker reads announceScript's reply {bound_ms, marker, now_ms, write sequence,
// the client's reading when it sent it, that reading's epoch}.
func parseMarker(reply transport.Reply) (marker, error) {
	vals, err := reply.Slice()
	if err != nil {
		return marker{}, err
	}
	if len(vals) != 6 {
		return marker{}, fmt.Errorf("announce reply of %d items, want 6", len(vals))
	}
	seq, ok := vals[3].(int64)
	before, okb := vals[4].(int64)
	epoch, oke := vals[5].(int64)
	if !ok || !okb || !oke {
		return marker{}, errors.New("announce reply of the wrong types")
	}
	bound, ok1 := vals[0].(int64)
	value, ok2 := vals[1].(string)
	now, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return marker{}, errors.New("announce reply of the wrong types")
	}
	m := marker{bound: bound, value: value, seq: seq, seqBefore: seqReading{epoch: epoch, seq: before}}
	if _, created, ok := strings.Cut(value, ":"); ok {
		if ms, err := strconv.ParseInt(created, 10, 64); err == nil && ms > 0 && now >= ms {
			m.age, m.aged = time.Duration(now-ms)*time.Millisecond, true
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
	current := n.seqCurrentLocked(rep.seqBefore) // rollback.go
	wentBack := current && seqWentBack(rep.seq, rep.seqBefore, true)
	if rep.evicted >= 0 {
		n.evicted = rep.evicted
	}
	switch {
	case (lostMarker || evicted || wentBack) && current:
		n.resetSeqLocked(rep.seq) // a loss seen: the new history's reading
	case lostMarker || evicted:
		n.resetSeqLocked(0) // sent before the last reset: its reading may be of either history
	case current:
		n.noteSeqLocked(rep.seq)
	}
	if !lostMarker && !evicted && !wentBack {
		n.mu.Unlock()
		return time.Time{}
	}
	if lostMarker || wentBack {
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
	switch {
	case wentBack:
		seen = seqLossLog
		n.forgetMarker() // tell the other clients (rollback.go)
	case !lostMarker:
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
