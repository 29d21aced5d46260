package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Diagnostics for a violation: what every node holds for the key at that moment, and
// (with -monitor) every command each node ran, to rebuild the timeline afterwards.

// keyProbe reads a lock key on every node right after a violation was seen.
type keyProbe struct {
	cl      *cluster
	prefix  string
	logf    func(string, ...any)
	clients []*redis.Client
	wg      sync.WaitGroup
}

func newKeyProbe(cl *cluster, prefix string, logf func(string, ...any)) *keyProbe {
	p := &keyProbe{cl: cl, prefix: prefix, logf: logf}
	for _, s := range cl.servers {
		p.clients = append(p.clients, redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true,
			MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond}))
	}
	return p
}

// probe logs, for each node, the key's holder (the value's owner part only: the random
// prefix before the ":attempt" suffix, shortened) and its remaining ttl.
func (p *keyProbe) probe(key string) {
	p.wg.Go(func() {
		at := time.Now()
		parts := make([]string, len(p.clients))
		var wg sync.WaitGroup
		for i, c := range p.clients {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				v, err := c.Get(ctx, p.prefix+key).Result()
				d, _ := c.PTTL(ctx, p.prefix+key).Result()
				switch {
				case err == redis.Nil:
					parts[i] = fmt.Sprintf("node%d: -", i)
				case err != nil:
					parts[i] = fmt.Sprintf("node%d: %v", i, err)
				default:
					parts[i] = fmt.Sprintf("node%d: %s (pttl %v)", i, shortValue(v), d)
				}
			})
		}
		wg.Wait()
		p.logf("key %s on the nodes %v after the violation: %s", key, time.Since(at).Round(time.Millisecond), strings.Join(parts, "; "))
	})
}

func shortValue(v string) string {
	owner, attempt, _ := strings.Cut(v, ":")
	if len(owner) > 6 {
		owner = owner[:6]
	}
	return owner + ":" + attempt
}

func (p *keyProbe) close() {
	p.wg.Wait()
	for _, c := range p.clients {
		c.Close()
	}
}

// monitor writes every node's MONITOR stream to dir/monitor-nodeN.log, reconnecting after
// kills and restarts, until ctx ends.
func monitor(ctx context.Context, cl *cluster, dir string) (wait func()) {
	var wg sync.WaitGroup
	for i, s := range cl.servers {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("monitor-node%d.log", i)))
		if err != nil {
			continue
		}
		wg.Go(func() {
			defer f.Close()
			w := bufio.NewWriter(f)
			defer w.Flush()
			for ctx.Err() == nil {
				monitorOnce(ctx, s.Addr(), w)
				sleep(ctx, 20*time.Millisecond)
			}
		})
	}
	return wg.Wait
}

func monitorOnce(ctx context.Context, addr string, w *bufio.Writer) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		return
	}
	fmt.Fprintf(w, "# connected %s\n", time.Now().Format("15:04:05.000000"))
	r := bufio.NewReaderSize(c, 1<<16)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			fmt.Fprintf(w, "# disconnected %s: %v\n", time.Now().Format("15:04:05.000000"), err)
			return
		}
		w.WriteString(line)
	}
}
