package caddyredlock

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestReleaseOnErrorAndPanic: the lock is released when the next handler fails or
// panics (the panic still reaches Caddy, which recovers it), and the held lock really was
// held while next ran.
func TestReleaseOnErrorAndPanic(t *testing.T) {
	servers := redistest.StartN(t, 5)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &Handler{Redis: redistest.URLs(servers), Prefix: "rel:", TTL: caddy.Duration(2 * time.Second),
		NodeTimeout: caddy.Duration(200 * time.Millisecond)}
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()

	serve := func(next caddyhttp.HandlerFunc) (err error, recovered any) {
		r := httptest.NewRequest("POST", "/item/1", nil)
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		defer func() { recovered = recover() }()
		return h.ServeHTTP(httptest.NewRecorder(), r, next), nil
	}
	heldInside := func() {
		if keys := lockKeysOn(t, servers, "rel:"); len(keys) < 3 {
			t.Errorf("inside next, the lock is on %d nodes: %q", len(keys), keys)
		}
	}

	boom := errors.New("upstream failed")
	err, _ := serve(func(w http.ResponseWriter, r *http.Request) error { heldInside(); return boom })
	if !errors.Is(err, boom) {
		t.Errorf("next's error not returned: %v", err)
	}
	noKeysLeft(t, servers, "rel:")

	_, rec := serve(func(w http.ResponseWriter, r *http.Request) error { heldInside(); panic("handler bug") })
	if rec != "handler bug" {
		t.Errorf("panic not passed on: %v", rec)
	}
	noKeysLeft(t, servers, "rel:")
	if n := len(inflightRequests()); n != 0 {
		t.Errorf("%d requests left in the in-flight table", n)
	}
}

// The handler registers its metrics in the config's registry itself, so they reach a
// `metrics` handler also with the admin API (and the admin module) off.
func TestHandlerRegistersMetrics(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &Handler{Redis: redistest.URLs(servers), Prefix: "metrics-reg:"}
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	families, err := ctx.GetMetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "caddy_redlock_") {
			return
		}
	}
	t.Fatal("no caddy_redlock_ metric in the config's registry after provisioning a handler")
}

// TestQueuedRequestGetsTheLockBeforeTheResponseEnds: when a request of this instance
// waits for the key, the finishing request hands its lock over before its ServeHTTP
// returns (no background release, no Redis round trip), so the next request can reach
// the upstream while the first response is still being written to its client.
func TestQueuedRequestGetsTheLockBeforeTheResponseEnds(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	wait := caddy.Duration(10 * time.Second)
	h := &Handler{Redis: redistest.URLs(servers), Prefix: "ho:", TTL: caddy.Duration(5 * time.Second),
		Wait: &wait, NodeTimeout: caddy.Duration(300 * time.Millisecond)}
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Cleanup()
	serve := func(next caddyhttp.HandlerFunc) error {
		r := httptest.NewRequest("POST", "/item/1", nil)
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		return h.ServeHTTP(httptest.NewRecorder(), r, next)
	}
	client := h.locker.pooled.client
	gate := make(chan struct{})
	firstIn := make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- serve(func(http.ResponseWriter, *http.Request) error { close(firstIn); <-gate; return nil })
	}()
	<-firstIn
	secondIn, gate2 := make(chan struct{}), make(chan struct{})
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- serve(func(http.ResponseWriter, *http.Request) error { close(secondIn); <-gate2; return nil })
	}()
	if !eventually(5*time.Second, func() bool { return client.Status().Waiting["/item/1"] == 1 }) {
		t.Fatal("second request never queued")
	}
	close(gate)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	// Checked the moment the first ServeHTTP returned.
	if n := countRequests(h, isReleasing); n != 0 {
		t.Errorf("%d background releases after the first request: the lock should have been handed over inline", n)
	}
	if held := client.Status().Held; len(held) != 1 || held[0].Info().Key != "/item/1" || !held[0].Info().Handed {
		t.Errorf("when the first request returned, the key was not yet the second's (held: %d)", len(held))
	}
	<-secondIn
	close(gate2)
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	noKeysLeft(t, servers, "ho:")
}
