package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	// Shopify's toxiproxy as a library (no API server), as the chaos module uses it
	// (chaos/toxics.go): the same version, already a dependency of chaos/go.mod.
	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// slowProxy is one toxiproxy TCP proxy on 127.0.0.1 in front of one Redis node, run in
// the bench process; the faulty-node hot-key phase puts a latency toxic on it for the
// "slow" windows. The owner stops it (stop ends its goroutines).
type slowProxy struct {
	p *toxiproxy.Proxy
}

// slowToxic names the one toxic the bench adds.
const slowToxic = "bench-slow"

// startSlowProxy starts a proxy on a free loopback port in front of upstream (host:port).
func startSlowProxy(name, upstream string) (*slowProxy, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	return &slowProxy{p: p}, nil
}

// url is the redis:// URL of the proxy's listening address.
func (s *slowProxy) url() string { return "redis://" + s.p.Listen }

// slow delays every reply (Redis to client) by d.
func (s *slowProxy) slow(d time.Duration) error {
	b, err := json.Marshal(map[string]any{"name": slowToxic, "type": "latency", "stream": "downstream",
		"toxicity": 1, "attributes": map[string]any{"latency": d.Milliseconds()}})
	if err != nil {
		return err
	}
	if _, err := s.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("latency toxic on %s: %w", s.p.Name, err)
	}
	return nil
}

// clear removes the toxic (no error if there is none).
func (s *slowProxy) clear() { _ = s.p.Toxics.RemoveToxic(context.Background(), slowToxic) }

func (s *slowProxy) stop() {
	s.clear()
	s.p.Stop()
}
