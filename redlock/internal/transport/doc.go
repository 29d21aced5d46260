// Package transport is redlock's Redis side: one go-redis client per node, and what is
// sent through it. redlock/ keeps the lock semantics (the scripts' Lua text, acquire,
// release and extend, the voting and data-loss rules, the waiters of release notices);
// this package holds no lock rule (the one thing it is told about a script is whether it
// is a cleanup the batcher must keep behind what it cleans up: Script.AsCleanup), and no
// pointer back to redlock's Client: each Node gets a Config of plain values and callbacks.
// Its comments speak of rounds and releases where those explain why it behaves as it does.
//
// The API, file by file:
//
//	node.go      Node: New (URL -> client), its facts (Facts: up, last RTT, errors, last
//	             error, checked; Silent), Record (one call's outcome, told to Config.Observe),
//	             Check (the health check: Config.Hello's commands, replies to Config.Heard),
//	             Do and Pipeline (one command, a few in one round trip), Close
//	config.go    Config: what a Node needs from its owner, plain values and callbacks
//	             (timeout, pipelining, TLS and Build, Scripts, Observe, Hello and Heard,
//	             the probe's name, the Closed error, Logger)
//	url.go       ParseURL: the one parser of node URLs, and the address shown for a node
//	connect.go   the go-redis options and client (timeouts, TLS, Config.Build), TLSWarning
//	reply.go     Reply: a command's value and error, with the conversions redlock reads
//	digest.go    Script and Scripts: scripts run by digest (EVALSHA), digests computed by
//	             Redis (FIPS-safe), NOSCRIPT fallback to EVAL; Script.Run
//	batcher.go   Command and Node.Call: the per-node pipeline that answers every call
//	             exactly once by its deadline
//	fanout.go    OnAll: a function on every node at once, returning at a quorum rule
//	pubsub.go    Subscription: release-notice channels on one connection per node
//	errhint.go   ConfigError: TLS, ACL and credential failures with what to fix
//	probe.go     the permission probe and the logging of a node's configuration problems
//
// Goroutines: Node.Flush (the batcher) and a Subscription's Apply and Listen run on
// goroutines their owner starts and ends (redlock's Client, through its ctx and Close);
// Call and Send without pipelining, and OnAll, start one goroutine per call, each ended
// by its deadline.
//
// Lock order: every mutex here is a leaf (Node.mu, probeState.mu, batcher.mu,
// Subscription.mu): nothing is taken under it, and callbacks (Observe, Heard, a Sink's
// Deliver, Listen's f) are called with none held.
package transport
