package redlock

import (
	"time"

	"log/slog"
)

// The voting rule: whether a node's grant counts towards a quorum. It is the most
// safety-critical rule of the package, so it lives here and nowhere else.
//
// A node that may have lost its keys (it restarted without its data) could grant a key
// that another client still holds on it. It therefore must not vote until every lock it
// could have held has expired: for the quarantine, which is the longest ttl ANY client
// may use on these nodes (the bound) plus drift. Two ways a node comes under it:
//   - restarted: this client saw its run_id change (node.observe); quarantined from the
//     moment the client saw it;
//   - young: a node first seen by this client (a Caddy start or reload) whose INFO uptime
//     says it started less than a quarantine ago, unless it started together with a
//     majority of the nodes, all of them marked by one client's first hello (freshStartOf,
//     Fresh start below: a new deployment, which cannot be told apart from a majority
//     restart, which Redlock without persistence cannot survive anyway).
//
// Restart quarantine across clients
//
// Claim: a node x that lost its keys in a restart does not vote until every lock any
// client held on x before the restart has lapsed.
//
// The bound is not this client's own ttl: another client (another Caddy route or
// instance, a background job) may hold keys on the same nodes with a longer one. Every
// client has a MaxTTL (it refuses locks with a longer ttl) and announces it on every new
// connection, before that connection carries any lock command, and on every health
// check; each node keeps the largest announced (announceScript, under the prefix,
// expiring well after its announcer stops). So when x granted a lock of ttl T to client
// A, x knew a bound >= T, and so did every node of A's majority. A lock's holder trusts
// it for at most ttl - drift after the start of its last successful round, which ran
// before x's restart. Client B holds x back for bound + drift(bound) after it saw the
// restart (run_id changed), or after x's start by its uptime (a client that met x after
// the restart), where bound is the largest of its own MaxTTL and the values it read from
// the nodes (read again on every health check), recomputed whenever a vote is judged,
// never frozen when the restart was seen. B has read A's announcement from the nodes
// unless A began to use the nodes less than a health interval before B's last reading
// and B's own quarantine ran out before its next one: docs/safety.md tells operators to
// set max_ttl alike on every client for that reason. A node restarted without data
// forgets the bound too, but the other nodes of A's majority keep it; only a majority
// restarting at once loses it, and that Redlock without persistence cannot survive in
// any case (the fresh start above: freshStartOf).

// Fresh start
//
// Claim: a young node x that a client lets vote because it belongs to a fresh start
// (freshStartOf) lost no lock that is still held elsewhere, unless a majority of the
// nodes lost their data at once (which Redlock without persistence cannot survive).
//
// Start times alone cannot tell a new deployment from one node restarted a second or two
// after it: INFO's uptime comes in whole seconds, so nodes started at 0 and a node
// restarted at 1.9 s all look started "now" to a client meeting them at 2 s, and the
// restarted node may have lost a lock held on a bare majority that included it (the
// simulation found this: two holders). So a fresh start also needs the markers: a
// client's hellos to a node create the node's marker, if it has none, with the client's
// first mark (Client.firstMark) until the client has read the node's marker once, with
// a random one after; and a marker records the run_id of the process that made it. x
// votes as part of a fresh start only if a quorum Q of nodes, x among them, started
// together, are young, and carry markers made by their current processes with x's mark,
// made within markedTogether of each other.
//
// Suppose a lock L, still trusted by its holder B, was granted at g on a majority M with
// x in it, and x lost it at t > g. x's marker was made at c_x > t: a loss takes the
// marker, a process restored from disk or a replica brings one of another run_id, which
// is no mark (markOf), and an eviction that spares it is seen on first sight by the
// eviction count (observe). It carries client C's first mark, so C had not yet read any
// marker of x when it sent that hello. Every node o of Q had no marker at c_o, when C's
// hello made its marker, and has kept its data since. Now every connection's hello makes
// a marker before the connection carries a lock, and every health check keeps it alive:
//   - o in M with c_o > g held L, with a marker, at g and had none at c_o: o lost L;
//   - o in M with c_o < g may still hold L, but then c_o < g < t < c_x within
//     markedTogether: within a second of C's first contact, B took L, x lost its data and
//     a hello of C still unanswered marked x anew (the gap docs/safety.md states);
//   - o not in M had no marker at c_o although B's hellos mark every node B reaches: o
//     lost its data too, or B never reached it since it started (the other gap, narrowed
//     by the start times: o started together with x).
// Outside the gaps, L lives only on M minus Q, and every node of Q lost its data within
// a few seconds (started together, all young): a majority lost its data at once, the
// assumption above. Tests: TestFreshStartNeedsOneMark, TestQuarantineOf,
// TestNodeRestartedAfterAFreshStartIsHeldBack, TestRestoredMarkerIsNoFreshStart,
// TestSecondClientOfAFreshStartVotesAtOnce (a fresh start still votes at once); the
// simulation's late-client restart fault.

// startedTogether is how close the start times of nodes must be for them to count as
// one fresh start: INFO uptime is in whole seconds, so each start time is known to
// within a second or two.
const startedTogether = 3 * time.Second

// markedTogether is how close the makings of the markers of a fresh start must be (by
// the reading client's clock, from each marker's age: to within a round trip and drift):
// one client's first contact marks every node within about a round trip (a second leaves
// room for a loaded machine, where a client's first hellos go out hundreds of ms apart),
// and a hello held up by a partition that lands later is no first contact (Fresh start).
const markedTogether = time.Second

// maxBound caps Options.MaxTTL, and the bound a client takes from the nodes: a reading
// above it is not a ttl anyone uses but a foreign or corrupt value (announceScript
// replaces it), and believing it would freeze restarted nodes out for good, or overflow.
const maxBound = 24 * time.Hour

// bound is the longest ttl any client may use on these nodes, as far as this client
// knows: its own MaxTTL or a larger one announced by another client.
func (c *Client) bound() time.Duration {
	b := c.opt.MaxTTL
	for _, n := range c.nodes {
		b = max(b, time.Duration(n.bound.Load()))
	}
	return min(b, maxBound)
}

// quarantine is how long a node that may have lost its keys must not vote.
func (c *Client) quarantine() time.Duration {
	b := c.bound()
	return b + drift(b, c.opt.DriftFactor)
}

// The rule itself is one pure function of what the client knows of each node (nodeFacts)
// and the time: quarantineOf. The methods below only gather the facts.

// nodeFacts is what the voting rule knows of one node.
type nodeFacts struct {
	// lossSeen is when this client saw the node lose its keys (a restart or a data loss),
	// zero if never; lossCause says which.
	lossSeen  time.Time
	lossCause QuarantineCause
	// markerDue: a grant found the node's data marker gone or changed (a loss seen by an
	// acquire, dataloss.go), and the marker has not been read since. The node does not
	// vote until a health check (or a new connection's hello) has read it, whatever the
	// time: until then this client knows no marker to check the node's grants against.
	markerDue bool
	// startedAt is the latest instant the node's current data may have begun (its INFO
	// uptime, the age of its marker: dataloss.go), zero while unknown.
	startedAt time.Time
	// mark is the mark of the node's data marker (the first part of its value: a
	// client's first mark or a random one, node.hello), "" when no marker is known or it
	// was not made by the node's current process (its run_id is not INFO's: a marker
	// loaded from disk or a replica, or written by an older client). freshStartOf.
	mark string
	// markedAt is when the node's marker was made, by this client's clock, zero if unknown.
	markedAt time.Time
}

// quarantineOf is the voting rule: until when node f may not vote, and why (zero and ""
// when it votes). nodes are the client's nodes (f among them), q is the quarantine,
// quorum the nodes a lock needs.
//   - a loss this client saw: q after it saw it, whatever the other nodes do, and past
//     that while its marker is due to be read again (markerDue: the until is then now,
//     as the hold-back ends at a reading, not at a time known in advance);
//   - a young node (its data began less than q ago) is held back until q after that
//     begin, unless it began together with a quorum of young nodes (a fresh start).
func quarantineOf(f nodeFacts, nodes []nodeFacts, quorum int, q time.Duration, now time.Time) (time.Time, QuarantineCause) {
	if until := lossUntilOf(f, q, now); !until.IsZero() {
		return until, f.lossCause
	}
	if until := youngUntilOf(f, q, now); !until.IsZero() && !freshStartOf(f, nodes, quorum, q, now) {
		return until, QuarantineYoung
	}
	return time.Time{}, ""
}

// lossUntilOf is when the hold-back of a loss this client saw ends (quarantineOf), zero
// when there is none or it is over.
func lossUntilOf(f nodeFacts, q time.Duration, now time.Time) time.Time {
	if f.lossSeen.IsZero() {
		return time.Time{}
	}
	if until := f.lossSeen.Add(q); now.Before(until) {
		return until
	}
	if f.markerDue {
		return now
	}
	return time.Time{}
}

// youngUntilOf is when a quarantine after f's start ends, if that is still ahead.
func youngUntilOf(f nodeFacts, q time.Duration, now time.Time) time.Time {
	if f.startedAt.IsZero() {
		return time.Time{}
	}
	if until := f.startedAt.Add(q); now.Before(until) {
		return until
	}
	return time.Time{}
}

// freshStartOf reports whether node f started together with a quorum of nodes that are
// still young themselves (f included when among them, as far as this client has seen
// them), and their markers, made by their current processes, share f's mark: one client
// found all of them unmarked on its first hello (Fresh start, above).
func freshStartOf(f nodeFacts, nodes []nodeFacts, quorum int, q time.Duration, now time.Time) bool {
	s := f.startedAt
	if s.IsZero() || f.mark == "" || f.markedAt.IsZero() {
		return false
	}
	together := 0
	for _, o := range nodes {
		if !o.startedAt.IsZero() && within(o.startedAt, s, startedTogether) && !youngUntilOf(o, q, now).IsZero() &&
			o.mark == f.mark && !o.markedAt.IsZero() && within(o.markedAt, f.markedAt, markedTogether) {
			together++
		}
	}
	return together >= quorum
}

// within reports whether a and b are at most d apart.
func within(a, b time.Time, d time.Duration) bool {
	return time.Duration(abs(a.Sub(b).Nanoseconds())) <= d
}

// facts gathers what the voting rule needs of the node.
func (n *node) facts() nodeFacts {
	n.mu.Lock()
	f := n.factsLocked()
	f.mark, f.markedAt = markOf(n.marker, n.runID), n.markedAt
	n.mu.Unlock()
	if s := n.startedAt.Load(); s != 0 {
		f.startedAt = time.Unix(0, s)
	}
	return f
}

// factsLocked is what the loss rule reads under n.mu, on every round for every node
// (restarted, grantHolds): not the marks, which only a young node's vote needs (facts).
func (n *node) factsLocked() nodeFacts {
	return nodeFacts{lossSeen: n.lossSeen, lossCause: n.lossCause, markerDue: n.markerDue}
}

// allFacts gathers the facts of every node of the client.
func (c *Client) allFacts() []nodeFacts {
	out := make([]nodeFacts, len(c.nodes))
	for i, o := range c.nodes {
		out[i] = o.facts()
	}
	return out
}

// restarted reports whether the node is held back for a loss this client saw (a restart
// or a data loss, and until its marker is read again after a loss an acquire saw): such a
// node is not even asked.
func (n *node) restarted(now time.Time) bool {
	n.mu.Lock()
	f := n.factsLocked()
	n.mu.Unlock()
	return !f.lossSeen.IsZero() && !lossUntilOf(f, n.c.quarantine(), now).IsZero()
}

// youngUntil returns when a quarantine after the node's start ends, if that is still
// ahead, else zero.
func (n *node) youngUntil(now time.Time) time.Time {
	return youngUntilOf(n.facts(), n.c.quarantine(), now)
}

// quarantinedUntil returns a non-zero time while the node may not vote at all, and why.
func (n *node) quarantine(now time.Time) (time.Time, QuarantineCause) {
	return quarantineOf(n.facts(), n.c.allFacts(), n.c.quorum, n.c.quarantine(), now)
}

// quarantinedUntil returns a non-zero time while the node may not vote at all.
func (n *node) quarantinedUntil(now time.Time) time.Time {
	until, _ := n.quarantine(now)
	return until
}

// A voter judges the grants of one moment (a round's replies so far, or its tally):
// whether each is a vote, with one reading of the clock and, only when a young node's
// grant needs them, one gathering of every node's facts. A round asks after every reply
// for all the replies it has: gathering the facts per grant cost every round 20
// gatherings and 5 KB instead of at most 6 while a node is young (a quarantine, max_ttl,
// after it started: a restart, a new deployment).
type voter struct {
	c        *Client
	now      time.Time
	q        time.Duration // the quarantine, once read
	gathered bool          // every node's facts are in buf (or many)
	buf      [8]nodeFacts  // their room up to 8 nodes: the voter stays on the stack
	many     []nodeFacts   // more nodes than buf holds
}

func (c *Client) voter() voter { return voter{c: c, now: time.Now()} }

// votes reports whether an acquire reply is a vote: a grant, unless it came from a node
// that is young and did not start together with most nodes (freshStartOf: n included,
// as far as this client has seen them). (Restarted nodes get no acquire at all, and
// their late replies are turned into errors: acquireReply.)
func (v *voter) votes(rep nodeReply) bool {
	if !rep.ok {
		return false
	}
	c := v.c
	if v.q == 0 {
		v.q = c.quarantine()
	}
	// Most replies come from nodes long started: one atomic read decides.
	if s := c.nodes[rep.idx].startedAt.Load(); s == 0 || !v.now.Before(time.Unix(0, s).Add(v.q)) {
		return true
	}
	n := len(c.nodes)
	if !v.gathered {
		v.gathered = true
		if n > len(v.buf) {
			v.many = c.allFacts()
		} else {
			for i, o := range c.nodes {
				v.buf[i] = o.facts()
			}
		}
	}
	facts := v.many
	if facts == nil {
		facts = v.buf[:n]
	}
	return freshStartOf(facts[rep.idx], facts, c.quorum, v.q, v.now)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// youngWarnMargin is how much of a young node's quarantine must be left for its refused
// vote to be worth a warning. The node's start is dated as late as INFO's whole-second
// uptime allows (node.observe), up to two seconds later than it may really be: with less
// left, the node may already be past its real quarantine and votes again before the line
// is read; a warning then says nothing an operator can act on. A longer hold-back is
// worth a line even when the quorum was reached: the nodes run with one spare fewer until
// it ends. Not warning does not mark the node warned: a later, longer hold-back (a larger
// bound announced) is still told.
const youngWarnMargin = 2 * time.Second

// warnYoung logs, once, that a young node's vote was not counted, unless the quarantine
// is all but over (youngWarnMargin).
func (n *node) warnYoung(now time.Time) {
	until := n.youngUntil(now)
	if until.Sub(now) < youngWarnMargin { // a zero until is long past
		return
	}
	n.mu.Lock()
	warned, id := n.youngWarned, n.runID
	n.youngWarned = true
	n.mu.Unlock()
	if !warned {
		n.c.opt.Logger.Warn("redis node started less than a quarantine ago, not together with most nodes: it will not vote until then",
			slog.String("node", n.addr), slog.String("run_id", id), slog.Time("quarantined_until", until))
		n.reportQuarantine(until, QuarantineYoung)
	}
}
