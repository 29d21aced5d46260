package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profileCaddy takes CPU profiles of the first Caddy instance through its admin endpoint
// while it serves unique keys (plain and with redlock, for a side-by-side diff:
// go tool pprof -diff_base caddy-unique-plain.pprof caddy-unique-n5.pprof; an allocation
// profile of the same; redlock with fencing), then while it serves the hot key, plus an
// execution trace of the hot key (go tool trace), where the gap between two holders is
// made of wake-ups rather than CPU. It runs after the
// measurements, so profiling never slows a measured run.
func profileCaddy(outDir string, plain, unique, fence, hot httpVariant, cfg config) ([]string, error) {
	if err := mkdir(outDir); err != nil {
		return nil, err
	}
	const secs = 8
	var files []string
	for _, p := range []struct {
		name string
		v    httpVariant
		spec loadSpec
		url  string // under the debug base
	}{
		{"caddy-unique-plain.pprof", plain, loadSpec{Clients: cfg.Clients, Duration: (secs + 1) * time.Second, Targets: plain.targets,
			Path: func(c, seq int) string { return fmt.Sprintf("/r/prof-%d-%d", c, seq) }}, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)},
		{"caddy-unique-n5.pprof", unique, loadSpec{Clients: cfg.Clients, Duration: (secs + 1) * time.Second, Targets: unique.targets,
			Path: func(c, seq int) string { return fmt.Sprintf("/r/prof-%d-%d", c, seq) }}, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)},
		// Allocations over the same kind of window (a delta profile: go tool pprof -sample_index=alloc_space).
		{"caddy-unique-n5.allocs.pprof", unique, loadSpec{Clients: cfg.Clients, Duration: (secs + 1) * time.Second, Targets: unique.targets,
			Path: func(c, seq int) string { return fmt.Sprintf("/r/prof-a-%d-%d", c, seq) }}, fmt.Sprintf("/debug/pprof/allocs?seconds=%d", secs)},
		{"caddy-unique-n5fence.pprof", fence, loadSpec{Clients: cfg.Clients, Duration: (secs + 1) * time.Second, Targets: fence.targets,
			Path: func(c, seq int) string { return fmt.Sprintf("/r/prof-f-%d-%d", c, seq) }}, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)},
		{"caddy-hot-n5.pprof", hot, loadSpec{Clients: cfg.HotClients, Stamp: true, Duration: (secs + 1) * time.Second, Targets: hot.targets,
			Path: func(int, int) string { return "/r/prof-hot?hold=" + cfg.Hold.String() }}, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)},
		{"caddy-hot-n5.trace", hot, loadSpec{Clients: cfg.HotClients, Stamp: true, Duration: 3 * time.Second, Targets: hot.targets,
			Path: func(int, int) string { return "/r/prof-hot2?hold=" + cfg.Hold.String() }}, "/debug/pprof/trace?seconds=2"},
	} {
		admin := adminOf(p.v)
		if admin == "" {
			return files, fmt.Errorf("no admin endpoint for %s", p.v.name)
		}
		var wg sync.WaitGroup
		wg.Go(func() { runLoad(p.spec) })
		time.Sleep(500 * time.Millisecond)
		path := filepath.Join(outDir, p.name)
		err := fetchTo(admin+p.url, path)
		wg.Wait()
		if err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// adminOf finds the debug base of the process serving a variant's first target.
var frontendOfTarget = map[*httpTarget]*frontend{}

func adminOf(v httpVariant) string {
	if fe := frontendOfTarget[v.targets[0]]; fe != nil {
		return fe.debug
	}
	return ""
}

func fetchTo(url, path string) error {
	c := *debugClient
	c.Timeout = time.Minute
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
