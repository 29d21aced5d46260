package main

// What the Caddyfile cannot say, patched into the adapted JSON: a subroute's own error
// routes (the subrouteerrors shape is the handleerrors shape with the server's
// handle_errors routes moved into the site's subroute, "errors": {"routes": [...]}).

import (
	"encoding/json"
	"fmt"
	"slices"
)

// patchJSON applies the cases' JSON-only shapes to the adapted config.
func patchJSON(cfg []byte, cases []*caseSpec, ports []int) ([]byte, error) {
	var want []string
	for i, c := range cases {
		if c.shape == shapeSubrouteErrors {
			want = append(want, fmt.Sprintf("127.0.0.1:%d", ports[i]))
		}
	}
	if len(want) == 0 {
		return cfg, nil
	}
	var m map[string]any
	if err := json.Unmarshal(cfg, &m); err != nil {
		return nil, fmt.Errorf("patching the JSON: %w", err)
	}
	apps, _ := m["apps"].(map[string]any)
	httpApp, _ := apps["http"].(map[string]any)
	servers, _ := httpApp["servers"].(map[string]any)
	for _, sv := range servers {
		srv, _ := sv.(map[string]any)
		listen, _ := srv["listen"].([]any)
		match := false
		for _, l := range listen {
			if s, ok := l.(string); ok && slices.Contains(want, s) {
				match = true
			}
		}
		if !match {
			continue
		}
		errs, ok := srv["errors"]
		routes, _ := srv["routes"].([]any)
		if !ok || len(routes) == 0 {
			return nil, fmt.Errorf("patching the JSON: server %v has no error routes or routes", listen)
		}
		route, _ := routes[0].(map[string]any)
		handle, _ := route["handle"].([]any)
		if len(handle) == 0 {
			return nil, fmt.Errorf("patching the JSON: server %v: no subroute", listen)
		}
		sub, _ := handle[0].(map[string]any)
		if sub["handler"] != "subroute" {
			return nil, fmt.Errorf("patching the JSON: server %v: the site's handler is %v, not a subroute", listen, sub["handler"])
		}
		sub["errors"] = errs
		delete(srv, "errors")
	}
	return json.Marshal(m)
}
