package main

// The world a case runs in: five redis-server nodes (started once, reused: between cases
// the lock keys a case left, if any, are reported and deleted; the nodes are not
// FLUSHALLed, which would wipe their data markers and, rightly, make the lock hold them
// back for a quarantine), the upstream, the clients, and one Caddy in this process,
// loaded per batch of cases through caddy.Load and asked through its admin API.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/standard"
	_ "github.com/caddyserver/caddy/v2/modules/filestorage"
	_ "github.com/caddyserver/caddy/v2/modules/logging"
	"github.com/redis/go-redis/v9"

	_ "github.com/caddy-redlock/caddy-redlock"
	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// lockPrefix is every block's prefix.
const lockPrefix = "e:"

type world struct {
	env     env
	nodes   []*redistest.Server
	rdb     []*redis.Client
	up      *ledger
	clients *clients
	ports   []int       // the sites' ports, one per case of a batch
	running atomic.Bool // Caddy runs a config (the endings of one batch's cases run at once)
	dead    net.Listener
}

// maxBatch is the most cases a batch runs at once.
const maxBatch = 3

func newWorld() (*world, error) {
	w := &world{}
	tmp, err := os.MkdirTemp("", "explore-")
	if err != nil {
		return nil, err
	}
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(tmp, "config"))
	os.Setenv("XDG_DATA_HOME", filepath.Join(tmp, "data"))
	if err := os.WriteFile(filepath.Join(tmp, "page.html"), []byte(templatePage), 0o644); err != nil {
		return nil, err
	}
	w.nodes, err = redistest.New(5, redistest.Options{})
	if err != nil {
		return nil, fmt.Errorf("starting redis-server nodes: %w", err)
	}
	for _, n := range w.nodes {
		w.rdb = append(w.rdb, redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second}))
	}
	if w.up, err = newLedger(); err != nil {
		w.close()
		return nil, err
	}
	w.clients = newClients()
	// A port where nothing answers: a listener that is closed, its port kept in mind.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	for range maxBatch {
		w.ports = append(w.ports, freePort())
	}
	w.env = env{
		redis:     "redis " + strings.Join(redistest.URLs(w.nodes), " "),
		up:        w.up.httpAddr,
		up2:       w.up.http2Addr,
		fcgi:      w.up.fcgiAddr,
		deadPort:  deadAddr,
		adminAddr: fmt.Sprintf("127.0.0.1:%d", freePort()),
		logFile:   filepath.Join(tmp, "caddy.log"),
		storage:   filepath.Join(tmp, "storage"),
		tmp:       tmp,
	}
	return w, nil
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (w *world) close() {
	if w.running.Swap(false) {
		_ = caddy.Stop()
	}
	if w.up != nil {
		w.up.close()
	}
	if w.clients != nil {
		w.clients.close()
	}
	for _, c := range w.rdb {
		c.Close()
	}
	for _, n := range w.nodes {
		_ = n.Resume()
		_ = n.Stop()
	}
	os.RemoveAll(w.env.tmp)
}

// adapt turns a Caddyfile into JSON.
func adapt(cf string) ([]byte, error) {
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	if err != nil {
		return nil, fmt.Errorf("adapting the Caddyfile: %w", err)
	}
	return out, nil
}

// load runs cfg (a new config, or a reload of the running one).
func (w *world) load(cfg []byte) error {
	if err := caddy.Load(cfg, true); err != nil {
		return fmt.Errorf("loading the config: %w", err)
	}
	w.running.Store(true)
	return nil
}

// stop stops Caddy (the stop ending).
func (w *world) stop() error {
	w.running.Store(false)
	return caddy.Stop()
}

// forceRelease is an operator's DELETE /redlock/keys?key=K.
func (w *world) forceRelease(key string) error {
	req, _ := http.NewRequest("DELETE", "http://"+w.env.adminAddr+"/redlock/keys?key="+url.QueryEscape(key), nil)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("force release of %q: %w", key, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force release of %q: %s: %s", key, resp.Status, b)
	}
	return nil
}

// heldLock is an entry of GET /redlock/locks.
type heldLock struct {
	Key    string `json:"key"`
	State  string `json:"state"`
	URI    string `json:"uri"`
	Method string `json:"method"`
}

// locks lists this Caddy's requests that wait for or hold a lock.
func (w *world) locks() ([]heldLock, error) {
	if !w.running.Load() {
		return nil, nil
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + w.env.adminAddr + "/redlock/locks")
	if err != nil {
		return nil, fmt.Errorf("GET /redlock/locks: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Locks []heldLock `json:"locks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET /redlock/locks: %w", err)
	}
	return out.Locks, nil
}

// redisKeys lists the lock keys (not markers, counters or channels: those hold a NUL)
// on every node, as "node key".
func (w *world) redisKeys() []string {
	var out []string
	for i, c := range w.rdb {
		if w.nodes[i].Paused() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		keys, _ := c.Keys(ctx, lockPrefix+"*").Result()
		cancel()
		for _, k := range keys {
			if !strings.ContainsRune(k, 0) {
				out = append(out, w.nodes[i].Addr()+" "+k)
			}
		}
	}
	return out
}

// clearKeys deletes the lock keys a case left (after they were reported).
func (w *world) clearKeys() {
	for _, c := range w.rdb {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		keys, _ := c.Keys(ctx, lockPrefix+"*").Result()
		for _, k := range keys {
			if !strings.ContainsRune(k, 0) {
				c.Del(ctx, k)
			}
		}
		cancel()
	}
}

// pause stops n nodes (SIGSTOP) for d: bounded, they resume whatever happens.
func (w *world) pause(n int, d time.Duration) {
	for _, s := range w.nodes[:n] {
		_ = s.Pause()
	}
	time.AfterFunc(d, func() {
		for _, s := range w.nodes[:n] {
			_ = s.Resume()
		}
	})
}

func (w *world) resumeAll() {
	for _, s := range w.nodes {
		_ = s.Resume()
	}
}
