package redlock

import "time"

// Fencing tokens in one round trip. The client proposes its clock in µs as the token;
// each granting node takes it when it is above the node's counter and within tokenLead
// of the node's clock, either side (the round's delay, a queue, clock skew), else gives
// max(counter+1, its clock). When every vote carries the same token, the voting majority
// already keeps it and no commit round is needed: the usual case for a key reused by one
// client and for brand-new keys, as long as clocks and delays stay within the lead.

// Safety argument for fencing tokens
//
// Claim: if holder A used token a and a later holder B of the same key got token b, then
// b > a.
//
// Each node keeps a counter per key. When a node grants a lock with fencing on, it takes
// the client's proposal p when p >= counter+1 and |p - now_µs| <= lead, else
// t = max(counter+1, now_µs); it sets counter to t (plus the handoff reserve, below) and
// returns t. The token is the maximum over the quorum G that granted (the votes
// counted). Before Acquire returns, a quorum C must keep counter >= token, and only while
// the key held A's value there:
//   - if every node of G returned the same t, C = G already (one round trip: the fast path above);
//   - else a commit script raises counter to at least the token on a quorum C, only on
//     nodes where the key still holds A's value.
//
// C and B's granting quorum G_B are both majorities, so they share a node x. On x,
// counter_x reached a while x held A's value; B's grant on x needed the key to be absent,
// so it ran later, when counter_x >= a already. B's grant set counter_x to at least a+1,
// and b = max over G_B >= counter_x > a. Pauses and expiry don't matter: the order on x is
// fixed by x itself (one script runs at a time). Every grant is above the node's counter,
// whichever way it was chosen.
//
// Local handoffs (handoff.go) hand the lock to the next waiter of the same Client with
// token+1, without a round trip. That stays inside the claim when every node of C keeps
// counter >= a+K, not a, where K (the reserve, HandoffLimit <= 64) bounds the handoffs in
// a row: the handed tokens a+1 .. a+K are above every earlier token, strictly increase,
// and stay below any later grant, which by the argument above is at least a+K+1. A lock
// is handed on only when every vote of its round kept the reserve (one round trip, the
// same token everywhere); after a commit it is not handed on.
//
// Restarts: if x restarted without its data between A's token reaching C and B's grant,
// counter_x is gone. Two guards: (1) x does not vote until every lock it may have held
// has lapsed (the voting rule, voting.go: a quarantine of the longest ttl any client
// announced to the nodes, plus drift, after the client saw the restart or after x's
// start), and (2) a missing counter starts from the node's clock in microseconds, which
// is larger than every token issued before the restart as long as (a) node clocks differ
// by less than the quarantine and (b) tokens never run ahead of the clocks. Counters also
// expire when unused, for the same reason (below): re-created, they start from the
// clock. Use AOF with appendfsync always where you can; the clock rule is the fallback,
// and the assumption (bounded clock skew between nodes) is stated in docs/safety.md.
//
// Why tokens stay close to the clocks (b): a node takes a proposal only within lead µs
// of its clock (lead <= 100ms and <= a quarter of the quarantine: maxTokenLead,
// tokenLead), and keeps the reserve K only when its token is within lead of its clock.
// So every counter is at most lead + K above the clock of the node that wrote it, plus
// one per grant made while it was further ahead; and a restarted (or expired) counter
// starts at least at now_µs - lead, which the quarantine puts above every earlier token
// (it is at least 4 x lead: a restarted node's clock has moved on by more than
// 2 x lead + K); a counter ahead of the clocks moves by those single steps only, which
// the clocks overtake (each grant of a key follows the previous holder's release, at
// least a round trip later). Commits raise counters to a token, never above it, and keep
// no reserve. Without these bounds a hot key granted faster than one grant per K µs would
// push its counters ahead by a reserve per grant, without end, and a client with a wrong
// clock could push them anywhere; a restarted node's clock would then start below tokens
// already issued. The condition docs/safety.md states: node clocks differ by less than
// the quarantine minus 2 x lead + K.
//
// Counter expiry: every script that writes a counter gives it an expiry E, the longer of
// 2 x the writing client's quarantine (counterTTL: about 2 x max_ttl) and 2 x the bound
// the node keeps (the longest max_ttl announced to it, read in the same script:
// counterTTLLua), so a node keeps counters only for keys used in the last E, never an
// hour of unique keys. Why E is long enough: let x be the shared node of the argument
// above, s the time (x's clock) of the last write of counter_x, which came at or after
// counter_x reached a. Redis expires the counter when x's clock reads s + E (it stores
// the expiry as a time of its own clock, so a step of x's clock moves both alike), and
// B's grant after that draws b >= now_x - lead >= s + E - lead. The token a was drawn no
// later than s, by a node whose clock then read at most skew more than x's read at s
// (skew: how far one node's clock may read ahead of another's, or of its own a little
// later, i.e. differences and backward steps alike), so a <= s + skew + lead + K (tokens
// stay within lead + K of the clocks, above; the single steps beyond are overtaken by
// the clocks well within E, during which the key saw no grant). So b > a whenever
// skew < E - 2 x lead - K, which the condition in docs/safety.md
// (skew < quarantine - 2 x lead - K) already implies, with a whole quarantine to spare:
// the expiry never is the weaker guard. A lock held longer than E (renewals do not touch
// the counter) changes nothing: B's grant still follows A's release, and s still follows
// a. Restarts and clock steps of x are covered as for the restart case.
//
// Clients with different max_ttl: the condition's quarantine and lead are those of the
// longest max_ttl in use, and a client with a short one writes a shorter E of its own.
// Had x taken E from the writer alone, a client that met the nodes before a longer bound
// was announced (it reads it at its next health check) would let counter_x lapse too
// soon: the tokens of the client with the long max_ttl may run a lead of 100ms ahead of
// the clocks, and the condition allows skew up to that client's quarantine. But every
// client announces its max_ttl on a connection before the first lock command it carries
// there, so x held a bound of at least the max_ttl of whoever drew a (or, if it lost it,
// x lost counter_x too: the restart case), and every later write of counter_x on x gets
// E >= 2 x that bound, which is at least that client's quarantine (2b >= b + drift(b)
// whenever the ttl outlasts its drift, which New requires). So b > a holds under the
// condition of the longest max_ttl whatever the writers' own (the announced bound
// lapses an hour after its last announcer stops, long after its locks and tokens;
// TestCounterExpiryFollowsTheLargestBoundOnTheNode). What still needs max_ttl alike is
// the restart quarantine of a client that has not read the bound yet (voting.go).

// maxTokenLead bounds how far from a node's clock a proposal may be, and so how far
// tokens run ahead of (or behind) the clocks. The restart argument needs twice that far
// below the quarantine: tokenLead takes at most a quarter of it.
const maxTokenLead = 100 * time.Millisecond

// tokenLead is how far from its clock a node accepts a proposed token.
func (c *Client) tokenLead() time.Duration { return min(maxTokenLead, c.bound()/4) }

// proposeToken is this client's proposal for a round sent at start: its clock in µs.
func (c *Client) proposeToken(start time.Time) int64 {
	return start.Add(c.clockSkew).UnixMicro()
}

// counterTTL is how long an unused fencing counter lives on a node: twice the restart
// quarantine. A counter created again starts at the node's clock minus at most the lead,
// which after that long is above every token the old counter ever covered, under the
// same bound on clock skew as the restart argument ("Counter expiry", above). So a
// node keeps a counter per key used within the last two quarantines (20s at the default
// ttl), not per key ever used. The scripts lengthen it to twice the bound the node keeps
// when that is longer (counterTTLLua): a client that has not read another's longer
// max_ttl yet still keeps that client's counters long enough.
func (c *Client) counterTTL() time.Duration { return 2 * c.quarantine() }
