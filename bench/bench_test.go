package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

// These tests check the harness's own logic. They make no timing assertions.

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	l := summarize(s)
	if l.N != 100 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 {
		t.Fatalf("summarize = %+v", l)
	}
	if (summarize(nil) != latency{}) {
		t.Fatal("empty input must give zero")
	}
}

func TestOvertakeCounts(t *testing.T) {
	ms := time.Millisecond
	fifo := []entry{{0, 1 * ms}, {1, 2 * ms}, {0, 5 * ms}, {1, 6 * ms}, {0, 9 * ms}}
	for _, c := range overtakeCounts(fifo, 2) {
		if c != 0 {
			t.Fatalf("FIFO entries overtaken: %v", overtakeCounts(fifo, 2))
		}
	}
	// Instance 0: the request sent at 1ms enters after two later-sent ones.
	swapped := []entry{{0, 5 * ms}, {0, 9 * ms}, {0, 1 * ms}}
	got := summarizeOvertakes(overtakeCounts(swapped, 1))
	if got.Max != 2 || got.Fraction < 0.33 || got.Fraction > 0.34 {
		t.Fatalf("overtakes = %+v", got)
	}
	// Within the 1ms slack, order is not judged.
	if c := overtakeCounts([]entry{{0, 1500 * time.Microsecond}, {0, 1 * ms}}, 1); c[1] != 0 {
		t.Fatalf("slack not applied: %v", c)
	}
}

func TestCmdCount(t *testing.T) {
	// 2 requests with fencing on 5 nodes: the acquire script (SET, and GET of the data
	// marker, inside) and the release script (GET, DEL, PUBLISH inside); reads: the
	// pipelining depth.
	c := newCmdCount(map[string]int64{"evalsha": 20, "get": 20, "set": 10, "del": 10, "publish": 10, readsKey: 4}, 2, redlockFencingInner)
	if c.TopLevel != 10 || c.Calls != 35 || c.Reads != 2 || c.depth() != "5.0" {
		t.Fatalf("redlock: %+v", c)
	}
	if !strings.HasPrefix(c.short(), "evalsha 10.0, get 10.0, del 5.0") {
		t.Fatalf("short = %q", c.short())
	}
	// Without fencing: a plain SET NX PX per node (a first try), the marker's GET behind
	// the SETs of each pipeline (here 2 per node), the release script (GET, DEL, PUBLISH).
	c = newCmdCount(map[string]int64{"evalsha": 10, "get": 14, "set": 10, "del": 10, "publish": 10, readsKey: 4}, 2, redlockInner)
	if c.TopLevel != 10 {
		t.Fatalf("redlock without fencing: %+v", c)
	}
	c = newCmdCount(map[string]int64{"evalsha": 5, "get": 5, "set": 5, "del": 5}, 1, redsyncInner)
	if c.TopLevel != 10 {
		t.Fatalf("redsync: %+v", c)
	}
}

func TestAlternate(t *testing.T) {
	var order []int
	alternate(3, 3, func(i, _ int) { order = append(order, i) })
	want := []int{0, 1, 2, 2, 1, 0, 0, 1, 2}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order = %v, want %v", order, want)
		}
	}
}

func TestCaddyfile(t *testing.T) {
	cf := caddyfile(2999, "127.0.0.1:8000", []caddySite{{name: "plain"},
		{name: "n3", redis: []string{"redis://a:1", "redis://b:2", "redis://c:3"}, wait: 30 * time.Second}}, []int{9001, 9002})
	for _, want := range []string{"admin localhost:2999", ":9001 {\n\tbind 127.0.0.1\n\treverse_proxy 127.0.0.1:8000\n}",
		"redis redis://a:1 redis://b:2 redis://c:3", "path /r/{id} res:{id}", "wait 30s"} {
		if !strings.Contains(cf, want) {
			t.Fatalf("Caddyfile lacks %q:\n%s", want, cf)
		}
	}
}

func TestTable(t *testing.T) {
	tb := &table{title: "T", head: []string{"a", "bb"}}
	tb.add("x", "1")
	var txt, md bytes.Buffer
	tb.text(&txt)
	tb.markdown(&md)
	if !strings.Contains(txt.String(), "x   1") || !strings.Contains(md.String(), "| x | 1 |") {
		t.Fatalf("text:\n%s\nmarkdown:\n%s", txt.String(), md.String())
	}
}

// The upstream must report two requests for one key inside at once, and only then.
func TestUpstreamViolation(t *testing.T) {
	u, err := startUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	get := func(path string) {
		resp, err := http.Get("http://" + u.addr + path)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	get("/r/a")
	get("/r/a")
	if n, _ := u.violationCount(); n != 0 {
		t.Fatalf("sequential requests counted as violations: %d", n)
	}
	done := make(chan struct{})
	go func() { get("/r/b?hold=gate"); close(done) }()
	if err := waitFor(5*time.Second, func() bool { return u.inFlight.Load() == 1 }); err != nil {
		t.Fatal(err)
	}
	get("/r/c") // another key: fine
	get("/r/b") // same key while the first is inside: a violation
	u.openGate()
	<-done
	n, log := u.violationCount()
	if n != 1 || len(log) != 1 || !strings.Contains(log[0], `key "b"`) {
		t.Fatalf("violations = %d %v", n, log)
	}
}

// Each fault of a front end points at that front end's all-up variant, and the targets
// check only the first build's Caddy rows.
func TestFaultyVariantsAndTargets(t *testing.T) {
	var vs []faultyVariant
	vs = faultyVariants(vs, httpVariant{name: nameCaddyRedlock + ", N=5"}, true)
	vs = faultyVariants(vs, httpVariant{name: nameCompare + nameCaddyRedlock + ", N=5"}, true)
	vs = faultyVariants(vs, httpVariant{name: nameRedsync + ", N=5"}, false)
	if len(vs) != 8 {
		t.Fatalf("%d variants", len(vs))
	}
	for i, v := range vs {
		if vs[v.base].fault != faultNone || !strings.HasPrefix(v.name, strings.TrimSuffix(vs[v.base].name, faultNone)) {
			t.Fatalf("variant %d (%s) has base %d (%s)", i, v.name, v.base, vs[v.base].name)
		}
	}
	r := &results{}
	for _, v := range vs {
		row := faultyRow{hotRow: hotRow{Name: v.name}, Fault: v.fault, Ratio: 0.5}
		if strings.HasPrefix(v.name, nameCaddyRedlock) {
			row.Ratio = 0.9
		}
		r.FaultyHot = append(r.FaultyHot, row)
	}
	r.checkTargets()
	if len(r.Targets) != 2 {
		t.Fatalf("targets %+v", r.Targets)
	}
	for _, c := range r.Targets {
		if c.Met == nil || !*c.Met || !strings.Contains(c.Value, nameCompare) {
			t.Fatalf("target %+v", c)
		}
	}
}

// The budget of a target ratio: at 50% a request may use twice plain's box CPU, so the
// lock may add as much as plain uses; at 55%, plain's × (1/0.55 - 1).
func TestLockBudget(t *testing.T) {
	plain := &httpRow{BoxCPU: 100}
	row := &httpRow{BoxCPU: 250}
	if b, a := lockBudget(row, plain, 0.5); b != 100 || a != 150 {
		t.Fatalf("50%%: budget %v adds %v, want 100 and 150", b, a)
	}
	if b, _ := lockBudget(row, plain, 0.55); b < 81.8 || b > 81.9 {
		t.Fatalf("55%%: budget %v, want 81.8", b)
	}
}

// Table 3b and issue 32's targets: Caddy's CPU against plain Caddy's of the same run,
// the nodes' summed and per node, and what one set of nodes serves; the -compare build's
// rows are shown but not checked.
func TestCPUCosts(t *testing.T) {
	r := &results{Overhead: []httpRow{
		{Name: nameCaddyPlain, FrontCPU: 60},
		{Name: nameCaddyRedlock + ", N=3", FrontCPU: 80, RedisCPU: 30},
		{Name: nameCaddyRedlock + ", N=5", FrontCPU: 90, RedisCPU: 50},
		{Name: nameCaddyRedlock + ", N=5, fencing", FrontCPU: 120, RedisCPU: 100},
		{Name: nameCompare + nameCaddyRedlock + ", N=5", FrontCPU: 150, RedisCPU: 200},
	}}
	cs := r.cpuCosts()
	if len(cs) != 4 {
		t.Fatalf("%d rows: %+v", len(cs), cs)
	}
	if c := cs[1]; c.Nodes != 5 || c.Ratio != 1.5 || c.PerNode != 10 || c.NodesLimit != 100_000 {
		t.Fatalf("N=5: %+v", c)
	}
	if c := cs[0]; c.Nodes != 3 || c.PerNode != 10 {
		t.Fatalf("N=3: %+v", c)
	}
	r.checkTargets()
	met := map[string]bool{}
	for _, c := range r.Targets {
		if strings.Contains(c.Target, "CPU") {
			met[c.Target] = c.Met != nil && *c.Met
		}
	}
	want := map[string]bool{
		"N=5: Caddy CPU per locked request ≤ 1.5× plain Caddy's":          true,
		"N=5: Redis CPU per lock ≤ 60 µs over 5 nodes":                    true,
		"N=5, fencing: Caddy CPU per locked request ≤ 1.5× plain Caddy's": false,
		"N=5, fencing: Redis CPU per lock ≤ 60 µs over 5 nodes":           false,
	}
	if len(met) != len(want) {
		t.Fatalf("CPU targets %v, want %v", met, want)
	}
	for k, v := range want {
		if m, ok := met[k]; !ok || m != v {
			t.Fatalf("%q: met %v (present %v), want %v; all: %v", k, m, ok, v, met)
		}
	}
	if tb := r.cpuCostTable(); len(tb.rows) != 4 {
		t.Fatalf("table 3b has %d rows", len(tb.rows))
	}
}
