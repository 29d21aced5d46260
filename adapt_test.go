package caddyredlock

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestAdaptGolden adapts every testdata/*.caddyfile and compares the JSON with the golden
// .json beside it (go test -run TestAdaptGolden -update rewrites them).
func TestAdaptGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, adapt(t, string(in)), "", "\t"); err != nil {
				t.Fatal(err)
			}
			out.WriteByte('\n')
			golden := strings.TrimSuffix(f, ".caddyfile") + ".json"
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("adapted %s differs from %s:\n%s", f, golden, out.String())
			}
		})
	}
}

// routeHandlers lists the handler names of a server's routes in order, descending into
// subroutes (the Caddyfile puts a site's directives in one).
func routeHandlers(t *testing.T, cfg []byte) []string {
	t.Helper()
	var c struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []json.RawMessage `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	var names []string
	var walk func(routes []json.RawMessage)
	walk = func(routes []json.RawMessage) {
		for _, raw := range routes {
			var r struct {
				Handle []struct {
					Handler string            `json:"handler"`
					Routes  []json.RawMessage `json:"routes"`
				} `json:"handle"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			for _, h := range r.Handle {
				if h.Handler == "subroute" && names == nil {
					walk(h.Routes) // the site's own subroute
					continue
				}
				names = append(names, h.Handler)
			}
		}
	}
	for _, srv := range c.Apps.HTTP.Servers {
		walk(srv.Routes)
	}
	return names
}

// TestDirectiveOrder: redlock wraps handle, route, respond and reverse_proxy wherever it
// is written in the site block, and an explicit `order redlock before reverse_proxy`
// still adapts with redlock ahead of the proxy.
func TestDirectiveOrder(t *testing.T) {
	const body = `
	respond /r "hi"
	reverse_proxy /p 127.0.0.1:9
	handle /h {
		respond "h"
	}
	route /x {
		respond "x"
	}
	redlock {
		redis 127.0.0.1:6379
	}
`
	got := routeHandlers(t, adapt(t, ":8080 {"+body+"}"))
	if len(got) == 0 || got[0] != "redlock" {
		t.Errorf("default order: handlers %v, want redlock first", got)
	}
	got = routeHandlers(t, adapt(t, "{\n\torder redlock before reverse_proxy\n}\n:8080 {\n\tredlock {\n\t\tredis 127.0.0.1:6379\n\t}\n\treverse_proxy 127.0.0.1:9\n}"))
	if strings.Join(got, ",") != "redlock,reverse_proxy" {
		t.Errorf("order redlock before reverse_proxy: handlers %v", got)
	}
}

// TestJSONRoundTrip: the handler JSON the Caddyfile produces decodes into Handler and
// encodes back to the same JSON, and provisions.
func TestJSONRoundTrip(t *testing.T) {
	in, err := os.ReadFile("testdata/every_option.caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	raw := findHandler(t, adapt(t, string(in)), "redlock")
	var h Handler
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	back, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	_ = json.Unmarshal(raw, &a)
	_ = json.Unmarshal(back, &b)
	delete(a, "handler")
	if !reflect.DeepEqual(a, b) {
		t.Errorf("round trip:\n in %s\nout %s", raw, back)
	}
	if _, err := h.resolve(); err != nil {
		t.Errorf("adapted config does not validate: %v", err)
	}
}

// findHandler returns the first handler object with the given name anywhere in cfg.
func findHandler(t *testing.T, cfg []byte, name string) json.RawMessage {
	t.Helper()
	var found json.RawMessage
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["handler"] == name && found == nil {
				found, _ = json.Marshal(v)
				return
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var v any
	if err := json.Unmarshal(cfg, &v); err != nil {
		t.Fatal(err)
	}
	walk(v)
	if found == nil {
		t.Fatalf("no %s handler in %s", name, cfg)
	}
	return found
}
