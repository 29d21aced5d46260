package caddyredlock

import (
	"fmt"
	"strings"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds the lock modes (exclusive, shared, limit): which one a request takes,
// from its method and the `shared` and `limit` options, and the acquire options each mode
// means for the redlock package.

// Lock modes of a request (docs/configuration.md, "Lock modes"), as {http.redlock.mode},
// in the admin API, logs and the metrics' mode label.
const (
	modeExclusive = "exclusive"
	modeShared    = "shared"
	modeLimit     = "limit"
)

// sharedMethods are the methods `shared` accepts: the standard ones and WebDAV's reads. A
// typo would otherwise take its requests exclusive without a word.
var sharedMethods = map[string]bool{
	"GET": true, "HEAD": true, "OPTIONS": true, "POST": true, "PUT": true, "PATCH": true,
	"DELETE": true, "TRACE": true, "CONNECT": true, "PROPFIND": true, "REPORT": true, "SEARCH": true,
}

// resolveModes checks shared and limit and sets them on s.
func (s *settings) resolveModes(shared []string, limit int) error {
	for _, m := range shared {
		up := strings.ToUpper(m)
		if !sharedMethods[up] {
			return fmt.Errorf("shared: unknown method %q (want methods such as GET HEAD)", m)
		}
		if s.shared == nil {
			s.shared = map[string]bool{}
		}
		s.shared[up] = true
	}
	switch {
	case limit < 0 || limit > redlock.MaxLimit:
		return fmt.Errorf("limit: must be 1 to %d, got %d", redlock.MaxLimit, limit)
	case limit == 0:
		limit = 1
	}
	if limit > 1 && len(s.shared) > 0 {
		return fmt.Errorf("shared and limit cannot be combined")
	}
	s.limit = limit
	return nil
}

// sharedFor reports whether requests with method take their keys shared.
func (s *settings) sharedFor(method string) bool { return s.shared[method] }

// modeFor is the mode a request with method takes its keys in.
func (s *settings) modeFor(method string) string {
	switch {
	case s.sharedFor(method):
		return modeShared
	case s.limit > 1:
		return modeLimit
	}
	return modeExclusive
}

// acquireOptions are the redlock options of a request in mode; readers says whether
// some live handler takes keys shared where this one's live (a writer's release then
// gives waiting readers their turn: namespace.go, readersOn).
func (s *settings) acquireOptions(mode string, readers bool) redlock.AcquireOptions {
	o := redlock.AcquireOptions{Wait: s.waitFor(), TTL: s.lock.TTL, Fencing: s.fencing, Shared: mode == modeShared,
		NoReaders: !readers}
	if mode == modeLimit {
		o.Limit = s.limit
	}
	return o
}
