package redlock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"
)

var (
	// ErrReleased is returned by operations on a lock that was released.
	ErrReleased = errors.New("redlock: lock already released")
	// ErrClosed is returned after Client.Close.
	ErrClosed = errors.New("redlock: client closed")
)

// BusyError says the key stayed held by someone else until the wait ran out.
type BusyError struct {
	Key      string
	Attempts int
	Waited   time.Duration
	// RetryAfter is a hint: the smallest remaining ttl seen on the holder's key, if known.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("redlock: key %q busy after %d attempt(s) in %v", e.Key, e.Attempts, e.Waited.Round(time.Millisecond))
}

// UnavailableError says fewer than a quorum of nodes answered.
type UnavailableError struct {
	Key    string
	Quorum int
	// Nodes holds one error per node that failed, each naming its node (never with a
	// password).
	Nodes []error
}

func (e *UnavailableError) Error() string {
	parts := make([]string, len(e.Nodes))
	for i, n := range e.Nodes {
		parts[i] = n.Error()
	}
	return fmt.Sprintf("redlock: key %q: fewer than %d nodes answered (%s)", e.Key, e.Quorum, strings.Join(parts, "; "))
}

// nodeError is one node's failure in an UnavailableError.
type nodeError struct {
	node string // address, never with a password
	err  error
}

func (e nodeError) Error() string { return e.node + ": " + e.err.Error() }
func (e nodeError) Unwrap() error { return e.err }

// LostError says why a held lock can no longer be trusted. It is the cause of the
// context Lock.Context returns once the lock is lost.
type LostError struct {
	Key    string
	Reason LostReason
}

func (e *LostError) Error() string {
	return fmt.Sprintf("redlock: lock on %q lost: %s", e.Key, e.Reason)
}

// LostReason says why a lock was lost.
type LostReason string

// The reasons a lock is lost.
const (
	LostExpired       LostReason = "expired"        // validity ended without a successful renewal
	LostTaken         LostReason = "taken"          // a majority no longer holds our value
	LostVanished      LostReason = "vanished"       // a majority no longer has the key at all (deleted, e.g. force released elsewhere)
	LostMaxHold       LostReason = "max_hold"       // the hold reached the maxHold of KeepAlive
	LostForceReleased LostReason = "force_released" // Client.ForceRelease (an operator) released the key
)

// isLost reports whether err says a lock is gone for good.
func isLost(err error) bool {
	_, ok := errors.AsType[*LostError](err)
	return ok
}

// silentErr stands for the reply of a node the round did not wait for: its last command
// got no answer at all (last says why).
type silentErr struct{ last string }

func (e silentErr) Error() string { return "not answering: " + e.last }

// quarantinedErr marks a node that may not vote yet after a restart.
type quarantinedErr struct{ until time.Time }

func (e quarantinedErr) Error() string {
	left := time.Until(e.until)
	if left <= 0 { // held back until its data marker is read again (voting.go, markerDue)
		return "quarantined after a data loss until its data marker is read again (its next health check)"
	}
	return fmt.Sprintf("quarantined after a (re)start for %v more", left.Round(time.Millisecond))
}

// ConfigError is a node error only the operator can fix: a TLS failure, an ACL refusal or
// refused credentials. Its fields are Kind (a ConfigErrorKind: which part is wrong), Hint
// (what to check) and Err (the error from Redis or the connection, also reachable with
// errors.Unwrap / errors.As). A node with one is unusable, not down: NodeStatus.LastErr
// holds it. Besides the errors of its commands, the client checks once a node answers,
// and at every health check until it passes, that the node lets it run every command and
// use the keys and channels under Options.Prefix that locks need; a refusal is a
// ConfigError naming the commands.
//
// It is an alias of the type the client's connections make, so errors.As with a
// *redlock.ConfigError matches every such error with no conversion.
type ConfigError = transport.ConfigError

// ConfigErrorKind says which part of a deployment is wrong: a string, "tls", "acl" or
// "auth".
type ConfigErrorKind = transport.ConfigErrorKind

// The kinds of ConfigError: ConfigTLS is "tls", ConfigACL "acl", ConfigAuth "auth".
const (
	ConfigTLS  = transport.ConfigTLS  // the handshake failed: CA, name, client certificate, plain port
	ConfigACL  = transport.ConfigACL  // the user may not run a command, or use a key or channel
	ConfigAuth = transport.ConfigAuth // the credentials were refused (WRONGPASS, NOAUTH)
)
