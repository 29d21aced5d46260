package caddyredlock

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// Two routes of one Caddy take one key in two modes (an exclusive admin route, limit 2
// exports). An export queued behind the admin request is never handed its exclusive
// lock: it holds one of the 2 places, so another client gets one more place, not two.
func TestLimitRequestQueuedBehindExclusiveHoldsAPlace(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		time.Sleep(d) // the request's work: how long it holds its place
	})
	block := func(extra string) string {
		return fmt.Sprintf(`redlock {
			%s
			prefix modes:
			path /{route}/{tenant} tenant:{tenant}
			wait 10s
			%s
		}`, redisLine(servers), extra)
	}
	s := startCaddy(t, "", fmt.Sprintf(`
	handle /admin/* {
		%s
		%s
	}
	handle /export/* {
		%s
		%s
	}`, block(""), proxyTo(up), block("limit 2"), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { get(t, c, "GET", s.url+"/admin/t1?d=500ms", nil) })
	if !eventually(5*time.Second, func() bool { h, _, _ := up.snapshot(); return h == 1 }) {
		t.Fatal("the admin request did not reach the upstream")
	}
	wg.Go(func() { get(t, c, "GET", s.url+"/export/t1?d=3s", nil) }) // queues behind the admin request
	if !eventually(5*time.Second, func() bool { h, _, _ := up.snapshot(); return h == 2 }) {
		t.Fatal("the export did not reach the upstream")
	}
	other, err := redlock.New(redistest.URLs(servers), redlock.Options{Prefix: "modes:"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	first, err := other.Acquire(ctx, "tenant:t1", redlock.AcquireOptions{Limit: 2})
	if err != nil {
		t.Fatalf("the second place: %v", err)
	}
	defer first.Release(ctx)
	if second, err := other.Acquire(ctx, "tenant:t1", redlock.AcquireOptions{Limit: 2}); err == nil {
		second.Release(ctx)
		t.Fatal("3 holders of a limit-2 key: the export held no place")
	} else if !isBusy(err) {
		t.Fatalf("third holder: %v, want busy", err)
	}
	wg.Wait()
}

// A transfer whose second account is busy for longer than the ttl gets it within its wait
// (200), holding the first account all along, instead of a 503 "lock lost before the
// request started".
func TestSeveralKeysOutwaitAHolderLongerThanTheTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 3 s (-short)")
	}
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, 0, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix transfer:
		path /transfer/{from}/{to} account:{from} account:{to}
		ttl 1s
		wait 10s
	}
	%s`, redisLine(servers), proxyTo(up)))
	release := holdKey(t, servers, "transfer:", "account:b", time.Second)
	time.AfterFunc(3*time.Second, release)
	c := &http.Client{Timeout: 20 * time.Second}
	if code, body, _ := get(t, c, "POST", s.url+"/transfer/a/b", nil); code != 200 {
		t.Fatalf("transfer: %d %s, want 200 once account:b is free", code, body)
	}
	noKeysLeft(t, servers, "transfer:")
}

// GET /redlock/keys shows a limited key's places, so an operator sees who holds it
// (before, "present on 0 nodes, not held" while requests held places).
func TestAdminKeysShowsPlaces(t *testing.T) {
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, time.Second, nil)
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix places:
		key lim
		limit 2
	}
	%s`, redisLine(servers), proxyTo(up)))
	c := &http.Client{Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { get(t, c, "GET", s.url+"/x", nil) })
	defer wg.Wait()
	if !eventually(5*time.Second, func() bool { h, _, _ := up.snapshot(); return h == 1 }) {
		t.Fatal("the request did not reach the upstream")
	}
	var k keyJSON
	newAdmClient(s).json(t, "GET", "/redlock/keys?key=lim", &k)
	if k.Status != keyHeld || len(k.Lockers) != 1 || len(k.Lockers[0].Places) != 1 || !k.Lockers[0].Places[0].HeldHere {
		t.Fatalf("/redlock/keys for a held limited key: %+v", k)
	}
}
