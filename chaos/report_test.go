package main

import (
	"strings"
	"testing"
	"time"
)

func TestRecorderRecovery(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	r := &recorder{}
	r.add(result{start: ms(0), end: ms(5), key: "hot0", hot: true, status: 200})     // before the fault's end
	r.add(result{start: ms(100), end: ms(120), key: "hot0", hot: true, status: 503}) // failed
	r.add(result{start: ms(110), end: ms(300), key: "hot0", hot: true, status: 200})
	r.add(result{start: ms(105), end: ms(150), key: "hot1", hot: true, status: 200})
	r.add(result{start: ms(101), end: ms(130), key: "st0", stream: true, status: 200})
	if _, ok := r.recovered(ms(100), []string{"hot0", "hot1", "hot2"}); ok {
		t.Fatal("recovered without a success on hot2")
	}
	at, ok := r.recovered(ms(100), []string{"hot0", "hot1"})
	if !ok || !at.Equal(ms(300)) {
		t.Fatalf("recovered at %v, %v; want +300ms", at.Sub(t0), ok)
	}
	if n := len(r.between(ms(100), ms(111))); n != 4 {
		t.Fatalf("between: %d results", n)
	}
	st := statusCounts(r.between(ms(0), ms(1000)))
	if got := formatStatuses(st); got != "200:4 503:1" {
		t.Fatalf("statuses %q", got)
	}
	if got := formatStatuses(map[int]int{0: 2, 423: 1, 200: 3}); got != "200:3 423:1 err:2" {
		t.Fatalf("statuses %q", got)
	}
	ls := latencies(r.between(ms(0), ms(1000)), func(x result) bool { return x.status == 200 })
	if pct(ls, 0) != 5*time.Millisecond || pct(ls, 100) != 190*time.Millisecond || pct(nil, 50) != 0 {
		t.Fatalf("latencies %v", ls)
	}
}

func TestCaddyfile(t *testing.T) {
	s := site{inst: 2, port: 8080, adminPort: 2020, urls: []string{"redis://127.0.0.1:1", "redis://127.0.0.1:2"},
		upstream: "127.0.0.1:9", ttl: time.Second, wait: 3 * time.Second, nodeTimeout: 100 * time.Millisecond,
		logPath: "/tmp/x.log", storage: "/tmp/s", logLevel: "INFO"}
	cf := s.caddyfile()
	for _, want := range []string{
		"admin 127.0.0.1:2020", "http://127.0.0.1:8080 {", "bind 127.0.0.1",
		"redis redis://127.0.0.1:1 redis://127.0.0.1:2", "path /r/{id} res:{id}", "ttl 1s", "wait 3s",
		"node_timeout 100ms", "fencing", "reverse_proxy 127.0.0.1:9", "header_up X-Chaos-Inst 2",
		"header_up X-Lock-Key {http.redlock.key}", "flush_interval -1",
	} {
		if !strings.Contains(cf, want) {
			t.Errorf("Caddyfile lacks %q:\n%s", want, cf)
		}
	}
	// The redlock block comes before reverse_proxy (the directive order puts it first anyway).
	if strings.Index(cf, "redlock {") > strings.Index(cf, "reverse_proxy") {
		t.Error("redlock after reverse_proxy")
	}
}

func TestPresetsAndFaultList(t *testing.T) {
	for _, mode := range []string{"short", "full"} {
		cfg, err := preset(mode)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.faultHold <= cfg.ttl || cfg.clients < 24 || cfg.clients > 48 {
			t.Errorf("%s: hold %v ttl %v clients %d", mode, cfg.faultHold, cfg.ttl, cfg.clients)
		}
		seen := map[string]bool{}
		for r := range cfg.rounds {
			for _, f := range faultList(cfg, r) {
				num, _, _ := strings.Cut(f.name, " ")
				seen[num] = true
			}
		}
		for _, n := range []string{"1", "2", "3", "4", "5", "6", "7", "8"} {
			if !seen[n] {
				t.Errorf("%s: fault %s missing", mode, n)
			}
		}
	}
	if _, err := preset("medium"); err == nil {
		t.Error("unknown mode accepted")
	}
	if !selected("", "3 x") || !selected("1,3", "3 x") || selected("1,3", "2b x") || !selected("2b", "2b x") {
		t.Error("selected")
	}
}
