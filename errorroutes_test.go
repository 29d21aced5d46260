package caddyredlock

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Hole 6 of safety round 5: a JSON subroute's own errors routes are error routes too.
// The handler sits in a subroute whose errors routes proxy a fallback; its next fails
// with a bodiless 404. Those routes run once the handler has returned, so the lock must
// stay held until the request ends (errorroutes.go): released at once, two requests'
// fallbacks ran together.
func TestSubrouteErrorRoutesRunUnderTheLock(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	up := newUpstream(t, time.Second, nil)
	s := startCaddyPatched(t, "", fmt.Sprintf(`
	root * %s
	route /s/* {
		%s
		file_server
	}`, t.TempDir(), coverBlock(servers, "key res")), func(cfg map[string]any) {
		sr := findSubrouteWith(cfg, "redlock")
		if sr == nil {
			t.Fatal("no subroute with the redlock handler in the adapted config")
		}
		sr["errors"] = map[string]any{"routes": []any{map[string]any{"handle": []any{map[string]any{
			"handler": "reverse_proxy", "upstreams": []any{map[string]any{"dial": up.addr}},
		}}}}}
	})
	c := &http.Client{Timeout: 20 * time.Second}
	first, second := sendAsync(t, c, s.url+"/s/a", "first"), sendAsync(t, c, s.url+"/s/b", "second")
	for _, code := range []int{<-first, <-second} {
		if code != http.StatusOK {
			t.Errorf("status %d, want the fallback's 200", code)
		}
	}
	if _, overlaps, _ := up.snapshot(); overlaps != 0 {
		t.Errorf("%d overlaps of the subroute's fallbacks:\n%s", overlaps, strings.Join(up.overlapLog, "\n"))
	}
}

// findSubrouteWith returns the first subroute handler (as JSON) of cfg whose routes
// hold a handler named handler.
func findSubrouteWith(v any, handler string) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == "subroute" && strings.Contains(fmt.Sprint(v["routes"]), "handler:"+handler) {
			if inner := findSubrouteWith(v["routes"], handler); inner != nil {
				return inner
			}
			return v
		}
		for _, x := range v {
			if m := findSubrouteWith(x, handler); m != nil {
				return m
			}
		}
	case []any:
		for _, x := range v {
			if m := findSubrouteWith(x, handler); m != nil {
				return m
			}
		}
	}
	return nil
}
