package caddyredlock

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// The end-of-request rule, case by case.
func TestEndOf(t *testing.T) {
	cases := []struct {
		name string
		end  requestEnd
		want endAction
	}{
		{"completed", requestEnd{}, endHandOver},
		{"completed, lock lost meanwhile (HandOver refuses it)", requestEnd{allGone: true}, endHandOver},
		{"client went away", requestEnd{cancelled: true}, endDrain},
		{"lost while running (context cancelled)", requestEnd{cancelled: true, allGone: true}, endRelease},
		{"max_hold reached (cancelled; the lock still stands on the nodes)", requestEnd{cancelled: true}, endDrain},
		{"reverse_proxy aborted the response", requestEnd{abortPanic: true}, endDrain},
		{"upstream error that may leave it working", requestEnd{mayWork: true}, endDrain},
		{"upstream error, lock lost", requestEnd{mayWork: true, allGone: true}, endRelease},
		{"tunnel closed cleanly on both sides", requestEnd{tunnel: tunnelClean}, endHandOver},
		{"tunnel cut (reset, stream_timeout)", requestEnd{tunnel: tunnelCut}, endDrain},
		{"tunnel cut, lock lost", requestEnd{tunnel: tunnelCut, allGone: true}, endRelease},
		{"upgrade answered without switching", requestEnd{tunnel: tunnelNone}, endHandOver},
		{"one attempt, not retried", requestEnd{unsent: 0}, endHandOver},
		{"retried after a dial error (written: the last attempt only)", requestEnd{retries: 1, unsent: 1}, endHandOver},
		{"retried twice after dial errors", requestEnd{retries: 2, unsent: 2}, endHandOver},
		{"retried after an attempt that was written (response_header_timeout)", requestEnd{retries: 1, unsent: 0}, endDrain},
		{"retried twice, one dial error and one written attempt", requestEnd{retries: 2, unsent: 1}, endDrain},
		{"retried, transport not traced (FastCGI, HTTP/3)", requestEnd{retries: 1, unsent: 0}, endDrain},
		{"retried after a written attempt, lock lost", requestEnd{retries: 1, allGone: true}, endRelease},
		{"a round trip ended unwritten without a retry (Go's own retry on a stale connection)", requestEnd{unsent: 1}, endHandOver},
		{"more unwritten round trips than retries (cannot be matched)", requestEnd{retries: 1, unsent: 2}, endDrain},
		{"a written request given up unanswered, retried by a nested proxy (its count unseen)", requestEnd{unanswered: 1}, endDrain},
		{"a written request given up unanswered, lock lost", requestEnd{unanswered: 1, allGone: true}, endRelease},
		{"Caddy may run error or intercept routes next: the wait is finish's, the rule the same", requestEnd{outerWork: true}, endHandOver},
		{"Caddy ran error or intercept routes after the handler (untraced work)", requestEnd{outerRan: true}, endDrain},
		{"Caddy ran routes after the handler, lock lost", requestEnd{outerRan: true, allGone: true}, endRelease},
	}
	for _, tc := range cases {
		if got := endOf(tc.end); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// An extended CONNECT tunnel (HTTP/2, HTTP/3 websockets) cannot be watched: it counts as
// cut short whatever next returned.
func TestTunnelEndOfExtendedConnect(t *testing.T) {
	if got := tunnelEndOf(extendedTunnel, nil); got != tunnelCut {
		t.Fatalf("extended CONNECT: %v, want cut", got)
	}
	if got := tunnelEndOf(noTunnel, nil); got != tunnelNone {
		t.Fatalf("no tunnel: %v", got)
	}
	if got := tunnelEndOf(upgradeTunnel, &exchange{}); got != tunnelNone {
		t.Fatalf("an upgrade never hijacked: %v, want none", got)
	}
}

// Which lost locks keep nobody out any more: all but one past max_hold, which still
// stands on the nodes until its validity ends.
func TestLockGone(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&redlock.LostError{Key: "k", Reason: redlock.LostMaxHold}, false},
		{&redlock.LostError{Key: "k", Reason: redlock.LostExpired}, true},
		{&redlock.LostError{Key: "k", Reason: redlock.LostTaken}, true},
		{&redlock.LostError{Key: "k", Reason: redlock.LostVanished}, true},
		{&redlock.LostError{Key: "k", Reason: redlock.LostForceReleased}, true},
		{redlock.ErrReleased, true},
	}
	for _, tc := range cases {
		if got := lockGone(tc.err); got != tc.want {
			t.Errorf("%v: gone %v, want %v", tc.err, got, tc.want)
		}
	}
}

// bufferedOutside finds a response held back by a handler outside (intercept's
// recorder) along the writer's Unwrap chain, and only while it holds it back.
func TestBufferedOutside(t *testing.T) {
	var buf bytes.Buffer
	hold := false
	rec := caddyhttp.NewResponseRecorder(httptest.NewRecorder(), &buf, func(int, http.Header) bool { return hold })
	inner := &caddyhttp.ResponseWriterWrapper{ResponseWriter: rec}
	if bufferedOutside(inner) {
		t.Fatal("nothing written yet: not buffered")
	}
	hold = true
	inner.WriteHeader(http.StatusInternalServerError)
	if !bufferedOutside(inner) {
		t.Fatal("a recorder outside buffers the response: want true")
	}
	if bufferedOutside(httptest.NewRecorder()) {
		t.Fatal("a plain writer: want false")
	}
}
