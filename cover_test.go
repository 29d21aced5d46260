package caddyredlock

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The rule of cover.go, against real Caddy and real Redis: a held lock serves a block
// only when it gives the block everything the block asks for. Each test is one hole of
// safety round 5 and fails with that part of coverOf taken out. Every block of a test
// has the same options but its keys and modes, so each test has one locker (see
// TestNestedBlocksOnOneKey).

// coverBlock is a redlock block of these tests: the nodes, one prefix, and lines.
func coverBlock(servers []*redistest.Server, lines ...string) string {
	return fmt.Sprintf("redlock {\n\t\t%s\n\t\tprefix cover:\n\t\tttl 2s\n\t\twait 4s\n\t\t%s\n\t}",
		redisLine(servers), strings.Join(lines, "\n\t\t"))
}

// Hole 1: a block of two keys under a block that holds one of them. Serving it under the
// held key alone left the other unlocked: /transfer/a/b and /account/b worked on account
// b together. It is refused at once, naming the key it lacks.
func TestCoverEveryKeyHeld(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, time.Second, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	route /transfer/* {
		%s
		%s
		reverse_proxy %s {
			header_up X-Lock-Key account:{http.request.uri.path.2}
		}
	}
	route /account/* {
		%s
		%s
	}`, coverBlock(servers, "path /transfer/{a}/{b} account:{a}"),
		coverBlock(servers, "path /transfer/{a}/{b} account:{a} account:{b}"), up.addr,
		coverBlock(servers, "path /account/{a} account:{a}"), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	transfer := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, "GET", s.url+"/transfer/a/b", nil)
		transfer <- code
	}()
	time.Sleep(200 * time.Millisecond) // the transfer is at its upstream, if it got there
	if code, body, _ := get(t, c, "GET", s.url+"/account/b", nil); code != http.StatusOK {
		t.Errorf("/account/b: %d %q", code, body)
	}
	if code := <-transfer; code != http.StatusInternalServerError {
		t.Errorf("/transfer/a/b: %d, want 500 (its block asks for account:b, which the block around does not hold)", code)
	}
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d overlaps on one account in the upstream:\n%s", overlaps, strings.Join(up.overlapLog, "\n"))
	}
	if !eventually(2*time.Second, func() bool { return s.logContains(`does not hold \"account:b\"`) }) {
		t.Error("the log does not name the key the held lock lacks")
	}
}

// Hole 2: a site-wide dry_run block and a route's enforcing block of the same key. The
// dry-run lock cuts nothing when lost: serving the enforcing block under it let a force
// release go unheeded while the next request worked on the key. It is refused at once.
func TestCoverNotByDryRun(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 1500*time.Millisecond, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	%s
	route /r/* {
		%s
		%s
	}`, coverBlock(servers, "key res", "dry_run"), coverBlock(servers, "key res"), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	first := sendAsync(t, c, s.url+"/r/1", "first")
	eventually(time.Second, func() bool { hits, _, _ := up.snapshot(); return hits > 0 })
	forceRelease(t, s, "res")
	second := sendAsync(t, c, s.url+"/r/2", "second")
	for _, code := range []int{<-first, <-second} {
		if code != http.StatusInternalServerError {
			t.Errorf("status %d, want 500: an enforcing block is not served under a dry-run lock", code)
		}
	}
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d overlaps in the upstream:\n%s", overlaps, strings.Join(up.overlapLog, "\n"))
	}
	if !eventually(2*time.Second, func() bool { return s.logContains("in dry run") }) {
		t.Error("the log does not say the held lock is a dry run")
	}
	if !s.logContains("two redlock blocks can render the same key") {
		t.Error("provision did not warn of a dry-run and an enforcing block of one key template")
	}
}

// Hole 4: a fencing block served under a held fencing lock sends the held token; before,
// its first step deleted the header the block around had just set. Both shapes: nested
// blocks, and a block in handle_errors.
func TestCoverSendsTheHeldToken(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	root * %s
	route /nested/* {
		%s
		%s
		%s
	}
	route /files/* {
		%s
		file_server
	}
	handle_errors 404 {
		%s
		%s
	}`, t.TempDir(), coverBlock(servers, "key nested", "fencing"), coverBlock(servers, "key nested", "fencing"), proxyTo(up),
		coverBlock(servers, "key files", "fencing"), coverBlock(servers, "key files", "fencing"), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	for _, path := range []string{"/nested/a", "/files/a"} {
		code, body, hdr := get(t, c, "GET", s.url+path, nil)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %q", path, code, body)
		}
		if tok := hdr.Get("X-Seen-Token"); tok == "" || tok == "0" {
			t.Errorf("%s: the upstream got token %q, want the held lock's", path, tok)
		}
	}
}

// Hole 5: `limit n` lives under other Redis names than an exclusive lock, and `limit 4`
// lets in more than `limit 2`: neither held lock serves a `limit 2` block (3 and 4 worked
// at once). Taking a place of its own would wait for the request's own hold (one local
// line per key), so both are refused at once, and at most 2 work at once.
func TestCoverLimitOnlyByAStricterLimit(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 1500*time.Millisecond, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	route /outer/* {
		%s
		%s
		%s
	}
	route /tenant/* {
		%s
		%s
		%s
	}
	route /lim/* {
		%s
		%s
	}`, coverBlock(servers, "key job"), coverBlock(servers, "key job", "limit 2"), proxyTo(up),
		coverBlock(servers, "key job", "limit 4"), coverBlock(servers, "key job", "limit 2"), proxyTo(up),
		coverBlock(servers, "key job", "limit 2"), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	var codes []<-chan int
	for i, path := range []string{"/outer/1", "/tenant/1", "/tenant/2", "/lim/1", "/lim/2", "/lim/3"} {
		codes = append(codes, sendAsync(t, c, s.url+path, fmt.Sprint("r", i)))
	}
	var got []int
	for _, ch := range codes {
		got = append(got, <-ch)
	}
	if got[0] != http.StatusInternalServerError {
		t.Errorf("/outer (limit 2 under an exclusive lock): %d, want 500", got[0])
	}
	if got[1] != http.StatusInternalServerError || got[2] != http.StatusInternalServerError {
		t.Errorf("/tenant (limit 2 under limit 4): %v, want 500s", got[1:3])
	}
	if !s.logContains("two redlock blocks can render the same key") {
		t.Error("provision did not warn of blocks of one key template in modes that live under other names")
	}
	if _, _, most := up.snapshot(); most > 2 {
		t.Errorf("%d requests worked on the key at once under limit 2 (statuses %v)", most, got)
	}
}
