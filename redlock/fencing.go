package redlock

import "time"

// Fencing tokens in one round trip (doc.go has the argument). The client proposes a
// token a little ahead of its clock; each granting node takes it when it is not below
// what the node would give anyway (counter+1, its clock) and not more than tokenLead
// ahead of its clock. When every vote carries the same token, the voting majority
// already keeps it and no commit round is needed: the usual case for a key reused by
// one client and for brand-new keys, as long as clocks agree to within the lead.

// maxTokenLead bounds how far a proposal may be ahead of a node's clock, and so how far
// tokens run ahead of the clocks. The restart argument needs that far below the
// quarantine: tokenLead takes at most a quarter of it.
const maxTokenLead = 100 * time.Millisecond

// tokenLead is how far ahead of its clock a node accepts a proposed token.
func (c *Client) tokenLead() time.Duration { return min(maxTokenLead, c.bound()/4) }

// proposeToken is this client's proposal for a round sent at start: its clock in µs plus
// half the lead, so that it is still ahead of the node's clock when the script runs
// (a round trip, a queue) yet within the lead of it.
func (c *Client) proposeToken(start time.Time) int64 {
	return start.Add(c.clockSkew).UnixMicro() + c.tokenLead().Microseconds()/2
}
