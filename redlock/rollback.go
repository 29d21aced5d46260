package redlock

import (
	"context"
	"log/slog"
)

// A node gone back in time: the write sequence.
//
// One node address may come to serve an OLDER state of its own data: a replica promoted
// while its replication lagged (replication is asynchronous), behind a proxy or a DNS name
// that keeps the address; a restart from an RDB snapshot, or from an AOF fsynced once a
// second, that misses the last writes. The data marker (dataloss.go) does not see it: the
// marker was written long ago, so the older state has it, and the eviction count is the
// new server's own. The run_id changes, but it is read only by health checks and new
// connections (voting.go), so behind a proxy that keeps the client connections the node
// votes with the forgotten locks until the next health check, and indefinitely where INFO
// shows no run_id. So every node keeps a write sequence (writeSeqName under the prefix: a
// plain integer, no expiry) that every grant advances and returns, in the same atomic call
// as its lock write (writeSeqLua).
//
// The argument
//
// Facts. (F1) A replica's data, and data loaded from an RDB snapshot or an AOF, is the
// result of a PREFIX of the node's writes, applied in order: Redis replicates and persists
// a script's writes as one unit (Redis 7: its effects in one MULTI/EXEC), so a prefix holds
// a grant's lock write and its advance of the sequence together or neither. The plain first
// try (sendRound) is a SET NX PX followed on the same connection by a small EVAL that
// advances the sequence and reads the marker (seqMarkerLua): the SET is earlier in the
// node's writes, so a prefix that holds that advance holds the SET. (F2) On one unbroken
// history the sequence only grows, by one per advance (a GET and a SET in one script: atomic): nothing else writes it, it has no
// expiry; a flush or an eviction that takes it restarts it at 1 (a loss, seen as one).
//
// Hence: if this client read the sequence as v on a node (a grant's reply or a health
// check's announce: noteSeq), and a grant that ran AFTER that reading returns u <= v, the
// server that granted does not hold the writes up to the reading: the node went back in
// time (or lost the sequence). On an unbroken history such a grant returns u > v, so the
// rule raises no false alarm provided "after" is true: the grant is compared with the
// highest reading this client had taken in BEFORE it sent the round (round.seqs; replies
// of several connections, a health check's among them, may be taken in out of order).
// When the client drops its reading on a loss it saw (below), the reading's epoch moves,
// and a reply to a call sent in an earlier epoch is neither judged nor taken in: it may
// have read the history before the loss, and judged against the new reading, or taken in
// as one, it would raise a false alarm (the node is quarantined for that loss anyway, far
// longer than such a call can take).
//
// The rule (seqWentBack, judged in grantHolds in the same step as the marker): such a
// grant is no vote, and the node is quarantined from now as for a data loss
// (QuarantineDataLoss): whatever the rollback lost was written before now, so every lock
// it lost has lapsed when the quarantine (max_ttl + drift) ends. The client then takes the
// new history's value as its reading; so it does on any loss it sees otherwise (a run_id
// changed, a marker gone, an eviction: the node is quarantined for it anyway), else a node
// restarted empty, its sequence begun again at 1, would be refused a second time once its
// quarantine ended. It also deletes the node's marker (forgetMarker): every other client
// whose grants carry the marker it read sees it gone at its next grant from that node,
// refuses it and quarantines the node too (dataloss.go). One client that sees the
// rollback thus tells all of them, including those that never read the sequence after
// the point the node went back to. A health check or a new connection's hello that sees
// the sequence gone back (below), or the run_id change while the marker stayed the same,
// does the same (node.observe): a
// marker that outlived its process came with data from a snapshot or a replica, which may
// be older than what others saw; every client quarantines a restarted node at its next
// health check anyway, so telling them now costs no vote they would have counted.
//
// Claim (what is guaranteed). Let A hold k with node x among its votes, and let x go back
// to a point f of its history before A's write of k there (the grant, or a renewal A
// counts on). A client B does not count x's grant of k while A trusts its lock if, before
// B sends that round, either (a) B read x's sequence at a point at or after A's write
// (any grant of B on x, or a health check of B: one every health interval, so a write
// older than a health interval before the rollback is covered whenever B's health checks
// of x succeed), and x's new server has not run more of our scripts since the rollback
// than B's reading exceeds the sequence at f; or (b) some client that satisfies (a), or
// that saw the new server's run_id with the old marker, was refused by x first and its
// marker delete landed (the marker then fails B's grant, if B had read the marker).
// By (F1) and (F2) the sequence at f is below the value A's write left, which is at most
// B's reading: the first grant the new server gives returns at most B's reading, and B
// refuses it (seqWentBack), as long as the new server's own advances have not carried it
// past B's reading. A itself: its next renewal finds k missing on x (a renewal never
// re-creates a missing key: extendScript), so a lock left without a majority is lost at
// that renewal, at most a renewal interval after the rollback.
//
// Not guaranteed: (1) a client B that took in no reading of x after f (it did not touch x
// since before A's write, and no health check of B read x since) and to which x's new
// server grants before any client that did has been refused and deleted the marker: to B
// that grant looks like any other. B may then hold k while A trusts it until A's next
// renewal, or B's next health check seeing the run_id change (where INFO shows one). This
// is inherent to failing a Redlock node over to an asynchronously replicated replica
// without waiting: run the nodes without failover, or delay a failed-over or restarted
// node's vote as docs/safety.md says. (2) Overtaking: if the new server has run more of
// our scripts than B's reading is ahead of f before B's grant (other clients' grants each
// advance it), B's grant passes: the clients whose grants advanced it and that read x
// after f were refused themselves and deleted the marker, so B is then protected by (b)
// once such a delete landed; clients that did not read x after f advance it silently. (3)
// Releases and force releases do not advance the sequence: a rollback that loses one
// leaves a key held, never a second holder. A bound raised by an announce and lost is
// read again at the next announce.
//
// Health checks and new connections' hellos read the sequence too (announceScript, which
// never advances it) and judge it the same way, against the reading the client had when
// it sent them (the announce echoes it: a GET on an unbroken history returns at least
// every value taken in before): a sequence below it is a node gone back, quarantined as
// a data loss, its marker deleted. So a client that read x after f sees the rollback at
// its next health check even where INFO shows no run_id and it takes no lock there, and
// tells the others (TestHealthCheckSeesASequenceGoneBack).
//
// Cost: one advance (GET, SET) per grant, renewal call, re-take call and fencing commit, in the calls
// that already run; the plain first try's marker GET becomes a small EVAL. Measured in
// docs/performance.md ("Write sequence").

// writeSeqName follows the prefix directly, like markerName: no lock key is empty.
const writeSeqName = "\x00write_seq"

// seqMarkerLua runs behind the plain SETs of a first try, on the same connection (a plain
// EVAL: transport's Then takes no digest): it advances the write sequence and reads the
// data marker. KEYS[1] the sequence, KEYS[2] the marker. Returns {sequence, marker or ""}.
const seqMarkerLua = `local sq = (tonumber(redis.call('GET', KEYS[1])) or 0) + 1
redis.call('SET', KEYS[1], sq)
local m = redis.pcall('GET', KEYS[2])
if type(m) ~= 'string' then m = '' end
return {sq, m}`

// seqKey is the write sequence's name for the scripts: "" when the check is off (a
// benchmark's client, seqCheckOff), which the scripts take as "do not advance".
func (c *Client) seqKey() string {
	if c.seqCheckOff.Load() {
		return ""
	}
	return c.seqK
}

// seqReading is what this client had read of a node's write sequence when it sent a
// call: the highest value (0 before any) and the epoch of that reading, which moves
// whenever the client drops its reading on a loss it saw (resetSeqLocked). A reply to a
// call sent in another epoch is neither judged nor taken in: its reading may be of the
// history before the loss (the node is quarantined for that loss meanwhile).
type seqReading struct{ epoch, seq int64 }

// seqReading snapshots the node's reading without n.mu: the epoch first, then the value
// (resetSeqLocked stores the value first, then moves the epoch), so a snapshot that has
// the new epoch has the new value too.
func (n *node) seqReading() seqReading {
	e := n.seqEpoch.Load()
	return seqReading{epoch: e, seq: n.seq.Load()}
}

// seqSeen is the highest write sequence this client has taken in from the node, 0 before
// any.
func (n *node) seqSeen() int64 { return n.seq.Load() }

// seqCurrentLocked reports whether a reply to a call sent with reading r belongs to the
// client's current reading (under n.mu).
func (n *node) seqCurrentLocked(r seqReading) bool { return r.epoch == n.seqEpoch.Load() }

// noteSeqLocked takes in a reading of the node's write sequence (under n.mu): the highest
// wins.
func (n *node) noteSeqLocked(v int64) {
	if v > n.seq.Load() {
		n.seq.Store(v)
	}
}

// resetSeqLocked drops the reading on a loss seen (under n.mu): v is the new history's
// reading (0: none known), and the epoch moves, so replies to calls sent before count
// for nothing.
func (n *node) resetSeqLocked(v int64) {
	n.seq.Store(max(v, 0))
	n.seqEpoch.Add(1)
}

// seqWentBack reports whether a sequence read at the node shows it gone back in time:
// not above (a grant, which advanced it: strict) or below (a health check's read, which
// did not) the highest this client had read before it sent the call (the argument is at
// the top of this file). No sequence (-1: the check off) or no reading before (0) shows
// nothing.
func seqWentBack(seq int64, before seqReading, advanced bool) bool {
	if seq < 0 || before.seq <= 0 {
		return false
	}
	if advanced {
		return seq <= before.seq
	}
	return seq < before.seq
}

// forgetMarker deletes the node's data marker after this client saw the node go back in
// time, so that every other client's next grant from it carries a marker other than the
// one it read and is refused (dataloss.go): one client's sighting tells all. Best effort,
// in the background, bounded by node_timeout; the marker is re-created by the next
// announce.
func (n *node) forgetMarker() {
	c := n.c
	if n.tr == nil {
		return // a node a unit test made, not connected
	}
	c.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opt.NodeTimeout)
		defer cancel()
		if err := n.tr.Do(ctx, "del", c.markerKey()).Err(); err != nil {
			c.opt.Logger.Debug("redis node went back in time; deleting its data marker failed", slog.String("node", n.addr), slog.String("error", err.Error()))
		}
	})
}

// seqLossLog is what grantHolds logs for a node seen gone back in time.
const seqLossLog = "acquire: write sequence not above this client's last reading (a failover to a lagging replica, or a restart from an older snapshot)"
