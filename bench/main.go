// Command bench measures caddy-redlock side by side with a redsync-based proxy, in one
// run on one machine: the Redis floor, the lock's cost, throughput and latency through
// Caddy, a hot key across two instances (also with a paused or slow minority node), Redis
// commands per request, and the cost of many waiting requests. See docs/performance.md.
//
//	cd bench && go run .          # full run (~6 min), writes results.json and results.md
//	cd bench && go run . -quick   # under 2 minutes
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "proxy" { // child process: the Go/redsync proxy
		if err := runProxy(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			os.Exit(1)
		}
		return
	}
	f, cfg := parseFlags(os.Args[1:])
	os.Exit(run(f, cfg))
}

func progress(format string, a ...any) { fmt.Fprintf(os.Stderr, format, a...) }

// notes collects remarks for the report (warm-up failures and the like).
var notes []string

func notef(format string, a ...any) {
	n := fmt.Sprintf(format, a...)
	notes = append(notes, n)
	progress("bench: %s\n", n)
}

func run(f flags, cfg config) int {
	res := &results{Command: "go run . " + strings.Join(os.Args[1:], " "), Quick: f.quick,
		Started: time.Now(), Settings: cfg, Host: host()}
	res.Command = strings.TrimSpace(res.Command)
	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		progress("bench: %v\n", err)
		return 1
	}
	cleanup := func() {
		childproc.StopAll(stopGrace)
		if f.keep {
			progress("bench: logs and configs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}
	cleanupOnSignal(cleanup)
	defer cleanup()
	want := func(part string) bool { return f.only == "" || strings.Contains(","+f.only+",", ","+part+",") }
	fail := func(what string, err error) {
		res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", what, err))
		progress("bench: %s: %v\n", what, err)
	}

	caddyBin := f.caddy
	if caddyBin == "" && (want("http") || want("hot") || want("faultyhot") || want("waiters") || want("modes") || want("modemix")) {
		progress("building Caddy (cmd/caddy)...\n")
		repo := f.repo
		if repo == "" {
			repo, err = findRepo()
		}
		if err == nil {
			caddyBin, err = buildCaddy(repo, dir)
		}
		if err != nil {
			res.Pending = append(res.Pending, "Caddy rows not measured: "+err.Error())
			progress("bench: Caddy rows skipped: %v\n", err)
		}
	}

	up, err := startUpstream()
	if err != nil {
		fail("upstream", err)
		return 1
	}
	defer up.close()
	nodes, err := startRedis(5, dir)
	if err != nil {
		fail("redis", err)
		return 1
	}

	if want("floor") {
		progress("1. PING floor...\n")
		bg := newBGMeter()
		res.Floor = measureFloor(nodes, cfg.LibRounds, cfg.LibDur)
		noteBackground(res, "1. floor", bg)
	}
	if want("lock") {
		progress("2. lock cost (library)...\n")
		bg := newBGMeter()
		if res.Lock, err = measureLocks(nodes, cfg.LibRounds, cfg.LibDur); err != nil {
			fail("lock cost", err)
		}
		noteBackground(res, "2. lock cost", bg)
	}
	if want("hotlib") {
		progress("4b. hot key, library level...\n")
		bg := newBGMeter()
		if res.HotLib, err = measureHotLib(nodes, cfg); err != nil {
			fail("hot key (library)", err)
		}
		noteBackground(res, "4b. hot key (library)", bg)
	}
	if want("http") || want("hot") || want("faultyhot") {
		runHTTP(res, f, cfg, dir, caddyBin, up, nodes, want, fail)
	}
	if want("waiters") {
		runWaiters(res, cfg, dir, caddyBin, up, nodes, fail)
	}
	if want("modes") {
		runModes(res, cfg, dir, caddyBin, nodes, fail)
	}
	if want("modemix") {
		runModeMix(res, cfg, dir, caddyBin, f.compare, nodes, fail)
	}
	if want("fencemem") {
		runFenceMem(res, cfg, dir, fail)
	}
	if want("seqcost") {
		repo := f.repo
		if repo == "" {
			repo, err = findRepo()
		}
		if err != nil {
			fail("seqcost", err)
		} else {
			runSeqCost(res, cfg, repo, fail)
		}
	}

	res.Violations, res.ViolLog = up.violationCount()
	for _, h := range res.HotLib {
		res.Violations += h.Violations
	}
	res.Notes = notes
	res.CPUCost = res.cpuCosts()
	res.checkTargets()
	res.Seconds = time.Since(res.Started).Seconds()
	res.printText(os.Stdout)
	if err := res.write(f.out); err != nil {
		fail("write JSON", err)
	} else {
		progress("\nwrote %s\n", f.out)
	}
	if f.md != "" {
		var b bytes.Buffer
		res.writeMarkdown(&b)
		if err := os.WriteFile(f.md, b.Bytes(), 0o644); err != nil {
			fail("write Markdown", err)
		} else {
			progress("wrote %s\n", f.md)
		}
	}
	if res.Violations > 0 || len(res.Errors) > 0 {
		return 1
	}
	return 0
}

// findRepo walks up from the working directory to the caddy-redlock module root.
func findRepo() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/caddy-redlock/caddy-redlock\n")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("repository root (go.mod of github.com/caddy-redlock/caddy-redlock) not found above the working directory; use -repo")
		}
		d = parent
	}
}

func host() hostInfo {
	h := hostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 3 {
			h.Redis = "redis " + strings.TrimPrefix(f[2], "v=")
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	return h
}
