package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// redisNode is one redis-server process the bench started, and a client to it for the
// bench's own calls (PING floor, CONFIG RESETSTAT, INFO commandstats).
type redisNode struct {
	port   int
	sock   string // the node's unix socket (it listens on both)
	proc   *childproc.Child
	client *redis.Client
}

func (n *redisNode) url() string     { return "redis://" + n.addr() }
func (n *redisNode) unixURL() string { return "unix://" + n.sock }
func (n *redisNode) addr() string    { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts n redis-server processes without persistence on free ports.
func startRedis(n int, dir string) ([]*redisNode, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (apt-get install -y redis-server): %w", err)
	}
	var nodes []*redisNode
	for i := range n {
		var node *redisNode
		for attempt := 0; attempt < 5 && node == nil; attempt++ {
			node, err = startOneRedis(bin, dir, i)
		}
		if err != nil {
			for _, nd := range nodes {
				nd.close()
			}
			return nil, err
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

func startOneRedis(bin, dir string, i int) (*redisNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	ndir := filepath.Join(dir, fmt.Sprintf("redis-%d", port))
	if err := mkdir(ndir); err != nil {
		return nil, err
	}
	sock := filepath.Join(ndir, "redis.sock")
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--dir", ndir, "--unixsocket", sock, "--unixsocketperm", "700"}
	proc, err := childproc.Start(fmt.Sprintf("redis-%d", i), bin, args, nil, "", filepath.Join(ndir, "log"))
	if err != nil {
		return nil, err
	}
	node := &redisNode{port: port, sock: sock, proc: proc}
	node.client = redis.NewClient(&redis.Options{Addr: node.addr(), Protocol: 2, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if proc.Exited() {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err = node.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return node, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	node.close()
	return nil, fmt.Errorf("redis-server on port %d did not answer (see %s/log): %v", port, ndir, err)
}

func (n *redisNode) close() {
	if n.client != nil {
		n.client.Close()
	}
	n.proc.Stop(stopGrace)
}

func urls(nodes []*redisNode) []string {
	var u []string
	for _, n := range nodes {
		u = append(u, n.url())
	}
	return u
}

// unixURLs are the nodes' unix sockets: the same nodes without loopback TCP, whose
// sender also runs the receiver's TCP path (on separate machines the nodes' kernels do).
func unixURLs(nodes []*redisNode) []string {
	var u []string
	for _, n := range nodes {
		u = append(u, n.unixURL())
	}
	return u
}

// resetStats runs CONFIG RESETSTAT on every node.
func resetStats(nodes []*redisNode) error {
	for _, n := range nodes {
		if err := n.client.ConfigResetStat(context.Background()).Err(); err != nil {
			return err
		}
	}
	return nil
}

// benchOwnCommands are issued by the bench itself (and the lock clients' 1/s health checks);
// they are left out of commands-per-request.
var benchOwnCommands = map[string]bool{"config": true, "info": true}

// readsKey carries INFO stats total_reads_processed (socket reads that brought commands)
// in the map commandStats returns: network commands per read is the pipelining depth
// Redis saw.
const readsKey = "(reads)"

// commandStats sums INFO commandstats calls per command over all nodes, plus readsKey.
func commandStats(nodes []*redisNode) (map[string]int64, error) {
	total := map[string]int64{}
	for _, n := range nodes {
		s, err := n.client.Info(context.Background(), "commandstats", "stats").Result()
		if err != nil {
			return nil, err
		}
		for line := range strings.SplitSeq(s, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				total[readsKey] += c
				continue
			}
			name, rest, ok := strings.Cut(line, ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			name = strings.TrimPrefix(name, "cmdstat_")
			if base, _, _ := strings.Cut(name, "|"); benchOwnCommands[base] { // "config|resetstat"
				continue
			}
			for kv := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					c, _ := strconv.ParseInt(v, 10, 64)
					total[name] += c
				}
			}
		}
	}
	return total, nil
}
