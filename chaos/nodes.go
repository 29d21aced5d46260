package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// cluster is the Redis side: N redis-server processes (internal/redistest: own process
// group, parent-death signal, same port across kill and restart) and, for some of them,
// an in-process toxiproxy in front that the Caddy instances go through.
type cluster struct {
	servers []*redistest.Server
	tox     *toxics
	proxyOf map[int]*faultProxy // node index -> its fault proxy
}

func startCluster(n int, proxied []int) (*cluster, error) {
	servers, err := redistest.New(n, redistest.Options{Args: []string{"--maxclients", "2000"}})
	if err != nil {
		return nil, err
	}
	c := &cluster{servers: servers, tox: newToxics(), proxyOf: map[int]*faultProxy{}}
	for _, i := range proxied {
		if i < 0 || i >= n {
			continue
		}
		p, err := c.tox.proxy(fmt.Sprintf("node%d", i), servers[i].Addr())
		if err != nil {
			c.stop()
			return nil, err
		}
		c.proxyOf[i] = p
	}
	return c, nil
}

// urls are the node URLs Caddy uses: through the fault proxy where there is one.
func (c *cluster) urls() []string {
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		if p, ok := c.proxyOf[i]; ok {
			out[i] = "redis://" + p.addr()
		} else {
			out[i] = s.URL()
		}
	}
	return out
}

func (c *cluster) name(i int) string {
	if p, ok := c.proxyOf[i]; ok {
		return fmt.Sprintf("node%d (%s via toxiproxy %s)", i, c.servers[i].Addr(), p.addr())
	}
	return fmt.Sprintf("node%d (%s)", i, c.servers[i].Addr())
}

// addrSeenByCaddy is the address Caddy logs for node i.
func (c *cluster) addrSeenByCaddy(i int) string {
	if p, ok := c.proxyOf[i]; ok {
		return p.addr()
	}
	return c.servers[i].Addr()
}

// restoreAll brings every node back: resumed, started if killed, no toxics.
func (c *cluster) restoreAll() error {
	var errs []string
	for i, s := range c.servers {
		if s.Paused() {
			if err := s.Resume(); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if !s.Running() {
			if err := s.Start(); err != nil {
				errs = append(errs, fmt.Sprintf("node%d: %v", i, err))
			}
		}
	}
	c.tox.clearAll()
	if len(errs) > 0 {
		return fmt.Errorf("restoring nodes: %s", strings.Join(errs, "; "))
	}
	return nil
}

// lockKeys counts lock keys under prefix on every reachable node (not the fencing
// counters nor the max_ttl bound) and those without an expiry.
func (c *cluster) lockKeys(prefix string) (total, noExpiry int, err error) {
	for _, s := range c.servers {
		if !s.Running() || s.Paused() {
			continue
		}
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		keys, kerr := rc.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			// Fencing counters, the max_ttl bound, the data marker and the write sequence outlive the locks on purpose; the lock
			// modes' names (a limited key's places, readers' sets, a writer's waiting
			// mark) must be gone like the locks.
			if strings.HasSuffix(k, "\x00fence") || strings.HasSuffix(k, "\x00max_ttl") || strings.HasSuffix(k, "\x00data_marker") || strings.HasSuffix(k, "\x00write_seq") {
				continue
			}
			total++
			if d, perr := rc.PTTL(ctx, k).Result(); perr == nil && d == -1 { // go-redis: -1 = no expiry
				noExpiry++
			}
		}
		cancel()
		rc.Close()
		if kerr != nil {
			return total, noExpiry, fmt.Errorf("KEYS on %s: %w", s.Addr(), kerr)
		}
	}
	return total, noExpiry, nil
}

func (c *cluster) stop() {
	c.tox.stop()
	for _, s := range c.servers {
		_ = s.Stop()
	}
}
