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
