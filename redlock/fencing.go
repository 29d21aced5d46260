package redlock

import "time"

// Fencing tokens in one round trip (doc.go has the argument). The client proposes its
// clock in µs as the token; each granting node takes it when it is above the node's
// counter and within tokenLead of the node's clock, either side (the round's delay, a
// queue, clock skew), else gives max(counter+1, its clock). When every vote carries the
// same token, the voting majority already keeps it and no commit round is needed: the
// usual case for a key reused by one client and for brand-new keys, as long as clocks
// and delays stay within the lead.

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
// same bound on clock skew as the restart argument (doc.go, "Counter expiry"). So a
// node keeps a counter per key used within the last two quarantines (20s at the default
// ttl), not per key ever used. The scripts lengthen it to twice the bound the node keeps
// when that is longer (counterTTLLua): a client that has not read another's longer
// max_ttl yet still keeps that client's counters long enough.
func (c *Client) counterTTL() time.Duration { return 2 * c.quarantine() }
