package main

import (
	"fmt"
	"time"
)

const (
	nameCaddyPlain   = "Caddy reverse_proxy (plain)"
	nameCaddyRedlock = "Caddy + redlock"
	nameGoPlain      = "Go proxy (plain)"
	nameRedsync      = "Go proxy + redsync"
	nameRedsyncTuned = "Go proxy + redsync tuned 1-5ms"
	// nameCompare prefixes the rows of the -compare build (not checked against targets).
	nameCompare = "B: "
)

// runHTTP starts the front ends and measures items 3 (and 5, uncontended) and 4 (and 5, hot).
func runHTTP(res *results, f flags, cfg config, dir, caddyBin string, up *upstream, nodes []*redisNode,
	want func(string) bool, fail func(string, error)) {
	var started []*frontend
	defer func() {
		for _, fe := range started {
			fe.stop()
			res.noteLogs(fe)
		}
	}()
	start := func(fe *frontend, err error) *frontend {
		if err != nil {
			fail("start front end", err)
			return nil
		}
		started = append(started, fe)
		return fe
	}
	conns := cfg.Clients + cfg.HotClients
	target := func(fe *frontend, site string) *httpTarget {
		t := newTarget(fe.name+"/"+site, fe.sites[site], conns)
		frontendOfTarget[t] = fe
		return t
	}
	wait := 30 * time.Second
	// The faulty-node hot key (faultyhot): the last node is paused or slowed; the Caddy
	// sites "n5f" reach it through a toxiproxy proxy (for the slow windows), the others
	// directly.
	var fx *faultEnv
	if want("faultyhot") {
		fx = &faultEnv{node: nodes[len(nodes)-1]}
		p, err := startSlowProxy("slow-node", fx.node.addr())
		if err != nil {
			fail("faulty-node proxy", err)
		} else {
			fx.proxy = p
			defer p.stop()
		}
	}
	progress("starting front ends...\n")
	var overhead, hot []httpVariant
	var faulty []faultyVariant
	if caddyBin != "" {
		sites := []caddySite{{name: "plain"}, {name: "n1", redis: urls(nodes[:1]), wait: wait},
			{name: "n3", redis: urls(nodes[:3]), wait: wait}, {name: "n5", redis: urls(nodes), wait: wait},
			{name: "n5fence", redis: urls(nodes), wait: wait, opts: "\t\tfencing\n"},
			{name: "n5unix", redis: unixURLs(nodes), wait: wait}}
		if fx != nil && fx.proxy != nil {
			sites = append(sites, caddySite{name: "n5f", redis: append(urls(nodes[:len(nodes)-1]), fx.proxy.url()), wait: wait})
		}
		faultyCaddy := func(name string, a, b *frontend) {
			if fx != nil && fx.proxy != nil {
				faulty = faultyVariants(faulty, httpVariant{name: name, kind: "caddy", locked: true, n: 5, inner: redlockInner,
					targets: []*httpTarget{target(a, "n5f"), target(b, "n5f")}}, true)
			}
		}
		a := start(startCaddy(caddyBin, dir, "caddy-a", up.addr, sites))
		b := start(startCaddy(caddyBin, dir, "caddy-b", up.addr, sites))
		if a != nil && b != nil {
			base := len(overhead)
			overhead = append(overhead, httpVariant{name: nameCaddyPlain, kind: "caddy", baseline: base,
				targets: []*httpTarget{target(a, "plain")}})
			for _, n := range []int{1, 3, 5} {
				overhead = append(overhead, httpVariant{name: fmt.Sprintf("%s, N=%d", nameCaddyRedlock, n), kind: "caddy",
					locked: true, n: n, inner: redlockInner, baseline: base, targets: []*httpTarget{target(a, fmt.Sprintf("n%d", n))}})
			}
			overhead = append(overhead, httpVariant{name: nameCaddyRedlock + ", N=5, fencing", kind: "caddy",
				locked: true, n: 5, inner: redlockFencingInner, baseline: base, targets: []*httpTarget{target(a, "n5fence")}},
				// The same nodes over unix sockets: how much of the lock's cost is loopback TCP.
				httpVariant{name: nameCaddyRedlock + ", N=5, unix sockets", kind: "caddy",
					locked: true, n: 5, inner: redlockInner, baseline: base, targets: []*httpTarget{target(a, "n5unix")}})
			hot = append(hot, httpVariant{name: nameCaddyRedlock + ", N=5", kind: "caddy", locked: true, n: 5, inner: redlockInner,
				targets: []*httpTarget{target(a, "n5"), target(b, "n5")}},
				// One instance: the local queue's handoff alone, without cross-instance contention.
				httpVariant{name: nameCaddyRedlock + ", N=5, 1 instance", kind: "caddy", locked: true, n: 5, inner: redlockInner,
					targets: []*httpTarget{target(a, "n5")}},
				// No lock, one client: requests in series through plain Caddy. What the box
				// gives serialized traffic without any lock (the proxy path and the
				// upstream's timing; here the client's own round trip is in the gap too).
				httpVariant{name: nameCaddyPlain + ", 1 client in series", kind: "caddy", clients: 1,
					targets: []*httpTarget{target(a, "plain")}})
			faultyCaddy(nameCaddyRedlock+", N=5", a, b)
			if f.compare != "" {
				ca := start(startCaddy(f.compare, dir, "caddy-cmp-a", up.addr, sites))
				cb := start(startCaddy(f.compare, dir, "caddy-cmp-b", up.addr, sites))
				if ca != nil && cb != nil {
					overhead = append(overhead, httpVariant{name: nameCompare + nameCaddyRedlock + ", N=5", kind: "caddy",
						locked: true, n: 5, inner: redlockInner, baseline: base, targets: []*httpTarget{target(ca, "n5")}},
						httpVariant{name: nameCompare + nameCaddyRedlock + ", N=5, fencing", kind: "caddy",
							locked: true, n: 5, inner: redlockFencingInner, baseline: base, targets: []*httpTarget{target(ca, "n5fence")}})
					hot = append(hot, httpVariant{name: nameCompare + nameCaddyRedlock + ", N=5", kind: "caddy", locked: true, n: 5,
						inner: redlockInner, targets: []*httpTarget{target(ca, "n5"), target(cb, "n5")}},
						httpVariant{name: nameCompare + nameCaddyRedlock + ", N=5, 1 instance", kind: "caddy", locked: true, n: 5,
							inner: redlockInner, targets: []*httpTarget{target(ca, "n5")}})
					faultyCaddy(nameCompare+nameCaddyRedlock+", N=5", ca, cb)
				}
			}
		}
	}
	if f.noRS {
		runProxyPhases(res, f, cfg, up, nodes, want, fail, overhead, hot, faulty, fx)
		return
	}
	goPlain := start(startProxy(dir, up.addr, proxyOpts{name: "go-plain", wait: wait}))
	rs := map[int]*frontend{}
	for _, n := range []int{1, 3, 5} {
		rs[n] = start(startProxy(dir, up.addr, proxyOpts{name: fmt.Sprintf("redsync-n%d", n), redis: urls(nodes[:n]), wait: wait}))
	}
	rsB := start(startProxy(dir, up.addr, proxyOpts{name: "redsync-n5-b", redis: urls(nodes), wait: wait}))
	tuned := proxyOpts{redis: urls(nodes), wait: wait, retryMin: time.Millisecond, retryMax: 5 * time.Millisecond}
	tuned.name = "redsync-tuned-a"
	tA := start(startProxy(dir, up.addr, tuned))
	tuned.name = "redsync-tuned-b"
	tB := start(startProxy(dir, up.addr, tuned))
	if goPlain != nil && rs[1] != nil && rs[3] != nil && rs[5] != nil {
		base := len(overhead)
		overhead = append(overhead, httpVariant{name: nameGoPlain, kind: "go", baseline: base,
			targets: []*httpTarget{target(goPlain, "main")}})
		for _, n := range []int{1, 3, 5} {
			overhead = append(overhead, httpVariant{name: fmt.Sprintf("%s, N=%d", nameRedsync, n), kind: "go", locked: true,
				n: n, inner: redsyncInner, baseline: base, targets: []*httpTarget{target(rs[n], "main")}})
		}
	}
	if rs[5] != nil && rsB != nil {
		hot = append(hot, httpVariant{name: nameRedsync + ", N=5", kind: "go", locked: true, n: 5, inner: redsyncInner,
			targets: []*httpTarget{target(rs[5], "main"), target(rsB, "main")}})
		if fx != nil { // its nodes are direct: paused only (the 734 -> 16/s)
			faulty = faultyVariants(faulty, httpVariant{name: nameRedsync + ", N=5", kind: "go", locked: true, n: 5,
				inner: redsyncInner, targets: []*httpTarget{target(rs[5], "main"), target(rsB, "main")}}, false)
		}
	}
	if tA != nil && tB != nil {
		hot = append(hot, httpVariant{name: nameRedsyncTuned + ", N=5", kind: "go", locked: true, n: 5, inner: redsyncInner,
			targets: []*httpTarget{target(tA, "main"), target(tB, "main")}})
	}
	runProxyPhases(res, f, cfg, up, nodes, want, fail, overhead, hot, faulty, fx)
}

// runProxyPhases measures the variants (items 3, 4, 4c, 5) and profiles Caddy if asked.
func runProxyPhases(res *results, f flags, cfg config, up *upstream, nodes []*redisNode,
	want func(string) bool, fail func(string, error), overhead, hot []httpVariant, faulty []faultyVariant, fx *faultEnv) {
	defer func() {
		for _, v := range append(overhead, hot...) {
			for _, t := range v.targets {
				t.close()
			}
		}
		for _, v := range faulty {
			for _, t := range v.targets {
				t.close()
			}
		}
	}()

	var err error
	if want("http") && len(overhead) > 0 {
		progress("3. through the proxy, unique keys (%d variants × %d rounds × %v)...\n", len(overhead), cfg.Rounds, cfg.HTTPDur)
		bg := newBGMeter()
		if res.Overhead, err = measureOverhead(overhead, up, nodes, cfg); err != nil {
			fail("overhead", err)
		}
		noteBackground(res, "3. unique keys", bg)
	}
	if want("hot") && len(hot) > 0 {
		progress("4. hot key (%d variants × %d rounds × %v)...\n", len(hot), cfg.HotRounds, cfg.HotDur)
		bg := newBGMeter()
		if res.Hot, err = measureHot(hot, up, nodes, cfg); err != nil {
			fail("hot key", err)
		}
		noteBackground(res, "4. hot key", bg)
	}
	if want("faultyhot") && len(faulty) > 0 && fx != nil {
		progress("4c. hot key with a faulty node (%d variants × %d rounds × %v)...\n", len(faulty), cfg.HotRounds, cfg.FaultyDur)
		bg := newBGMeter()
		if res.FaultyHot, err = measureFaultyHot(faulty, up, fx, cfg); err != nil {
			fail("hot key, faulty node", err)
		}
		noteBackground(res, "4c. hot key, faulty node", bg)
	}
	if f.profile != "" && len(overhead) > 0 && len(hot) > 0 && overhead[0].kind == "caddy" {
		progress("profiling Caddy...\n")
		ps, err := profileCaddy(f.profile, overhead[0], overhead[3], overhead[4], hot[0], cfg)
		if err != nil {
			fail("profile", err)
		}
		res.Profiles = ps
	}
}

// runWaiters measures item 6 on a fresh Caddy (and a fresh redsync proxy).
func runWaiters(res *results, cfg config, dir, caddyBin string, up *upstream, nodes []*redisNode, fail func(string, error)) {
	wait := 10 * time.Minute
	if caddyBin != "" {
		progress("6. %d waiters on %d keys, Caddy + redlock...\n", cfg.Waiters, cfg.WaitKeys)
		fe, err := startCaddy(caddyBin, dir, "caddy-waiters", up.addr, []caddySite{{name: "n5", redis: urls(nodes), wait: wait}})
		if err != nil {
			fail("start caddy for waiters", err)
		} else {
			bg := newBGMeter()
			row, err := measureWaiters(nameCaddyRedlock+", N=5", fe, "n5", redlockInner, up, nodes, cfg)
			noteBackground(res, "6. waiters", bg)
			fe.stop()
			res.noteLogs(fe)
			if err != nil {
				fail("waiters", err)
			}
			res.Waiters = append(res.Waiters, row)
		}
	}
	if cfg.RedsyncWaiters {
		progress("6. %d waiters on %d keys, Go proxy + redsync (defaults)...\n", cfg.Waiters, cfg.WaitKeys)
		fe, err := startProxy(dir, up.addr, proxyOpts{name: "redsync-waiters", redis: urls(nodes), wait: wait})
		if err != nil {
			fail("start redsync proxy for waiters", err)
			return
		}
		c := cfg
		c.Drain = min(cfg.Drain, 10*time.Second) // its waiters poll: keep the storm short
		row, err := measureWaiters(nameRedsync+", N=5", fe, "main", redsyncInner, up, nodes, c)
		fe.stop()
		res.noteLogs(fe)
		if err != nil {
			fail("waiters (redsync)", err)
		}
		res.Waiters = append(res.Waiters, row)
	}
}
