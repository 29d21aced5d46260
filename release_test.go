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
