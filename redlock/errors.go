package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

var (
	// ErrBusy is matched (errors.Is) by every *BusyError.
	ErrBusy = errors.New("redlock: lock is held by someone else")
	// ErrUnavailable is matched by every *UnavailableError.
	ErrUnavailable = errors.New("redlock: no quorum of nodes reachable")
	// ErrLost is matched by every error that says a held lock can no longer be trusted.
	ErrLost = errors.New("redlock: lock lost")
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

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// NodeError is one node's failure.
type NodeError struct {
	Node string // address, never with a password
	Err  error
}

func (e NodeError) String() string { return e.Node + ": " + e.Err.Error() }

// UnavailableError says fewer than a quorum of nodes answered.
type UnavailableError struct {
	Key    string
	Quorum int
	Nodes  []NodeError
}

func (e *UnavailableError) Error() string {
	parts := make([]string, len(e.Nodes))
	for i, n := range e.Nodes {
		parts[i] = n.String()
	}
	return fmt.Sprintf("redlock: key %q: fewer than %d nodes answered (%s)", e.Key, e.Quorum, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// LostError says why a held lock can no longer be trusted.
type LostError struct {
	Key    string
	Reason string // LostExpired, LostTaken, LostVanished, LostMaxHold or LostForceReleased
}

func (e *LostError) Error() string {
	return fmt.Sprintf("redlock: lock on %q lost: %s", e.Key, e.Reason)
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Lost reasons.
const (
	LostExpired       = "expired"        // validity ended without a successful renewal
	LostTaken         = "taken"          // a majority no longer holds our value
	LostVanished      = "vanished"       // a majority no longer has the key at all (deleted, e.g. force released elsewhere)
	LostMaxHold       = "max_hold"       // the hold reached max_hold
	LostForceReleased = "force_released" // an operator force-released the key
)

// silentErr stands for the reply of a node the round did not wait for: its last command
// got no answer at all (last says why).
type silentErr struct{ last string }

func (e silentErr) Error() string { return "not answering: " + e.last }

// noAnswer reports whether err means the node did not answer at all: a timeout, a
// refused, reset or closed connection. A Redis error reply, garbage, or a TLS or
// authentication failure is an answer of sorts: rounds wait for those as for any reply.
func noAnswer(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET)
}

// quarantinedErr marks a node that may not vote yet after a restart.
type quarantinedErr struct{ until time.Time }

func (e quarantinedErr) Error() string {
	return fmt.Sprintf("quarantined after a (re)start for %v more", time.Until(e.until).Round(time.Millisecond))
}
