package caddyredlock

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// The lock modes across two Caddy processes on the same 5 nodes, judged by modeJudge.

// load sends n requests at once, request i as method(i) to url(i), and returns the
// statuses. Every request must end within the test's bound (no deadlock).
func load(t *testing.T, n int, method func(i int) string, url func(i int) string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := &http.Client{Timeout: 60 * time.Second}
			code, _, _ := get(t, c, method(i), url(i), nil)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

func modesSite(servers []*redistest.Server, j *modeJudge, options string) string {
	return fmt.Sprintf(`
	redlock {
		%s
		prefix modes:
		ttl 2s
		node_timeout 200ms
		wait 30s
		fencing
		%s
	}
%s`, redisLine(servers), options, j.proxy())
}

// Readers of one key run together on both instances; writers exclude everyone.
func TestSharedModeTwoInstances(t *testing.T) {
	servers := redistest.StartN(t, 5)
	j := newModeJudge(t, 40*time.Millisecond, 0)
	body := modesSite(servers, j, "shared GET HEAD\n\t\tpath /doc/{id} doc:{id}")
	a, b := startCaddyProc(t, body), startCaddyProc(t, body)
	codes := load(t, 60, func(i int) string {
		if i%6 == 5 {
			return "PUT"
		}
		return "GET"
	}, func(i int) string {
		if i%2 == 0 {
			return a.url + "/doc/1"
		}
		return b.url + "/doc/1"
	})
	violations, maxInside, hits := j.report("doc:1")
	if codes[200] != 60 {
		t.Errorf("statuses %v, want 60 x 200", codes)
	}
	if len(violations) > 0 {
		t.Errorf("%d violations over %d requests:\n%s", len(violations), hits, strings.Join(violations, "\n"))
	}
	if maxInside < 3 {
		t.Errorf("readers did not run together: at most %d inside", maxInside)
	}
	if j.modes[modeShared] != 50 || j.modes[modeExclusive] != 10 {
		t.Errorf("modes seen by the upstream: %v, want 50 shared and 10 exclusive", j.modes)
	}
	t.Logf("shared: up to %d inside one key", maxInside)
	noKeysLeft(t, servers, "modes:")
}

// limit 3: at most 3 requests inside one key at once over both instances, and 3 reached.
func TestLimitModeTwoInstances(t *testing.T) {
	servers := redistest.StartN(t, 5)
	j := newModeJudge(t, 100*time.Millisecond, 3)
	body := modesSite(servers, j, "limit 3\n\t\tpath /job/{id} job:{id}")
	a, b := startCaddyProc(t, body), startCaddyProc(t, body)
	codes := load(t, 30, func(int) string { return "POST" }, func(i int) string {
		if i%2 == 0 {
			return a.url + "/job/7"
		}
		return b.url + "/job/7"
	})
	violations, maxInside, hits := j.report("job:7")
	if codes[200] != 30 {
		t.Errorf("statuses %v, want 30 x 200", codes)
	}
	if len(violations) > 0 {
		t.Errorf("%d violations over %d requests:\n%s", len(violations), hits, strings.Join(violations, "\n"))
	}
	if maxInside != 3 {
		t.Errorf("at most %d inside, want exactly the limit 3", maxInside)
	}
	noKeysLeft(t, servers, "modes:")
}

// Transfers A->B and B->A (and others) at once on both instances: every request takes
// both accounts, none deadlocks, and one account is never in two transfers at once.
func TestSeveralKeysTransfers(t *testing.T) {
	servers := redistest.StartN(t, 5)
	j := newModeJudge(t, 15*time.Millisecond, 0)
	body := modesSite(servers, j, "path /transfer/{from}/{to} account:{from} account:{to}")
	a, b := startCaddyProc(t, body), startCaddyProc(t, body)
	pairs := [][2]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a"}, {"a", "c"}, {"c", "b"}}
	codes := load(t, 60, func(int) string { return "POST" }, func(i int) string {
		p := pairs[i%len(pairs)]
		u := a.url
		if i%2 == 1 {
			u = b.url
		}
		return fmt.Sprintf("%s/transfer/%s/%s", u, p[0], p[1])
	})
	violations, _, hits := j.report("account:a")
	if codes[200] != 60 {
		t.Errorf("statuses %v, want 60 x 200 (none stuck)", codes)
	}
	if len(violations) > 0 {
		t.Errorf("%d violations over %d requests:\n%s", len(violations), hits, strings.Join(violations, "\n"))
	}
	noKeysLeft(t, servers, "modes:")
}

// What later handlers see: the keys in lock order, the mode, the fencing header.
func TestModePlaceholders(t *testing.T) {
	servers := redistest.StartN(t, 3)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		fencing
		shared GET
		path /transfer/{from}/{to} account:{from} account:{to}
	}
	respond "{http.redlock.mode} [{http.redlock.key}] {http.request.header.Redlock-Fencing-Token}"`, redisLine(servers)))
	code, body, _ := get(t, http.DefaultClient, "POST", s.url+"/transfer/b/a", nil)
	if code != 200 || !strings.HasPrefix(body, "exclusive [account:a account:b] account:a=") || !strings.Contains(body, ",account:b=") {
		t.Fatalf("POST: %d %q", code, body)
	}
	code, body, _ = get(t, http.DefaultClient, "GET", s.url+"/transfer/b/a", nil)
	if code != 200 || !strings.HasPrefix(body, "shared [account:a account:b] account:a=") {
		t.Fatalf("GET: %d %q", code, body)
	}
}

// A path capture holding "," and "=" cannot forge a pair in the several-keys fencing
// header: the upstream, splitting the header at "," and "=" and percent-decoding each key
// (either standard decoder), reads exactly the keys the request locked, each with its own
// token, never a key it did not lock or a token the client chose.
func TestSeveralKeysFencingHeaderCannotBeForged(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Token", r.Header.Get("Redlock-Fencing-Token"))
		w.Header().Set("X-Seen-Key", r.Header.Get("X-Lock-Key"))
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix forge:
		fencing
		path /transfer/{from}/{to} account:{from} account:{to}
	}
%s`, redisLine(servers), proxyTo(up)))
	for _, tc := range []struct {
		path string
		keys []string // in lock order
	}{
		{"/transfer/a/b=99999999999999999,account:c", []string{"account:a", "account:b=99999999999999999,account:c"}},
		{"/transfer/a=1,b/b%2C%3D", []string{"account:a=1,b", "account:b,="}},
		{"/transfer/x+1/y%25z%20w", []string{"account:x+1", "account:y%z w"}},
	} {
		code, body, hdr := get(t, http.DefaultClient, "PUT", s.url+tc.path, nil)
		if code != http.StatusOK {
			t.Errorf("PUT %s: %d %s", tc.path, code, body)
			continue
		}
		if got := hdr.Get("X-Seen-Key"); got != strings.Join(tc.keys, " ") {
			t.Errorf("PUT %s: locked %q, want %q", tc.path, got, tc.keys)
		}
		h := hdr.Get("X-Seen-Token")
		for _, decode := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
			keys, tokens := parseFencingPairs(t, h, decode)
			if !slices.Equal(keys, tc.keys) {
				t.Errorf("PUT %s: the upstream reads the header %q as keys %q, want exactly %q", tc.path, h, keys, tc.keys)
			}
			for _, tok := range tokens {
				if tok == 99999999999999999 || tok <= 0 {
					t.Errorf("PUT %s: the upstream reads a token %d from %q", tc.path, tok, h)
				}
			}
		}
	}
	noKeysLeft(t, servers, "forge:")
}

// A transfer whose one account is force-released while the upstream works is aborted;
// the other account, still held, drains one ttl like any cut-short request (the upstream
// may still be working on it), and is then released.
func TestSeveralKeysOneLostOthersDrain(t *testing.T) {
	servers := redistest.StartN(t, 3)
	j := newModeJudge(t, 3*time.Second, 0)
	s := startCaddy(t, "", strings.Replace(modesSite(servers, j, "path /transfer/{from}/{to} account:{from} account:{to}"), "ttl 2s", "ttl 1s", 1))
	adm := newAdmClient(s)
	done := make(chan int, 1)
	go func() {
		code, _, _ := get(t, &http.Client{Timeout: 10 * time.Second}, "POST", s.url+"/transfer/a/b", nil)
		done <- code
	}()
	if !eventually(5*time.Second, func() bool { return len(adm.locks(t).Locks) == 1 && adm.locks(t).Held == 1 }) {
		t.Fatalf("transfer never held: %s", adm.all())
	}
	if code, body, _ := adm.do(t, "DELETE", "/redlock/keys?key=account:a"); code != 200 {
		t.Fatalf("force release: %d %s", code, body)
	}
	<-done
	held := func(key string) bool {
		for _, k := range lockKeysOn(t, servers, "modes:") {
			if strings.HasSuffix(k, " modes:"+key) {
				return true
			}
		}
		return false
	}
	if !eventually(2*time.Second, func() bool { l := adm.locks(t); return l.Draining == 1 }) {
		t.Fatalf("the request is not draining: %s", adm.all())
	}
	if !held("account:b") || held("account:a") {
		t.Fatalf("while draining: account:b held %v (want true), account:a held %v (want false)", held("account:b"), held("account:a"))
	}
	if !eventually(5*time.Second, func() bool { return !held("account:b") && len(adm.locks(t).Locks) == 0 }) {
		t.Fatalf("account:b not released after the drain: %s", adm.all())
	}
}
