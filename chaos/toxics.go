package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// toxics runs Shopify's toxiproxy in this process (as a library, no API server): one TCP
// proxy on 127.0.0.1 per proxied Redis node, with toxics (latency, timeouts, resets)
// added and removed while the load runs.
type toxics struct {
	server *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies []*faultProxy
}

// faultProxy is one proxy and the toxics on it now.
type faultProxy struct {
	p      *toxiproxy.Proxy
	mu     sync.Mutex
	active map[string]bool
}

// toxic is one toxic as toxiproxy's JSON API takes it.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`   // latency, timeout, reset_peer, ...
	Stream     string         `json:"stream"` // upstream (to Redis) or downstream (to Caddy)
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

func (t toxic) String() string {
	var attrs []string
	for k, v := range t.Attributes {
		attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
	}
	return fmt.Sprintf("%s %s %s", t.Type, t.Stream, strings.Join(attrs, " "))
}

func newToxics() *toxics {
	metrics := toxiproxy.NewMetricsContainer(prometheus.NewRegistry())
	return &toxics{server: toxiproxy.NewServer(metrics, zerolog.Nop())}
}

// proxy starts a proxy on a free loopback port in front of upstream.
func (x *toxics) proxy(name, upstream string) (*faultProxy, error) {
	p := toxiproxy.NewProxy(x.server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	fp := &faultProxy{p: p, active: map[string]bool{}}
	x.mu.Lock()
	x.proxies = append(x.proxies, fp)
	x.mu.Unlock()
	return fp, nil
}

func (f *faultProxy) addr() string { return f.p.Listen }

// add puts a toxic on the proxy.
func (f *faultProxy) add(t toxic) error {
	if t.Toxicity == 0 {
		t.Toxicity = 1
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if _, err := f.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("toxic %s on %s: %w", t, f.p.Name, err)
	}
	f.mu.Lock()
	f.active[t.Name] = true
	f.mu.Unlock()
	return nil
}

// clear removes every toxic from the proxy.
func (f *faultProxy) clear() {
	f.mu.Lock()
	names := make([]string, 0, len(f.active))
	for n := range f.active {
		names = append(names, n)
	}
	f.active = map[string]bool{}
	f.mu.Unlock()
	for _, n := range names {
		_ = f.p.Toxics.RemoveToxic(context.Background(), n)
	}
}

func (x *toxics) clearAll() {
	x.mu.Lock()
	ps := append([]*faultProxy(nil), x.proxies...)
	x.mu.Unlock()
	for _, p := range ps {
		p.clear()
	}
}

func (x *toxics) stop() {
	x.clearAll()
	x.mu.Lock()
	ps := x.proxies
	x.proxies = nil
	x.mu.Unlock()
	for _, p := range ps {
		p.p.Stop()
	}
}
