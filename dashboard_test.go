package caddyredlock

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestGrafanaDashboard keeps contrib/grafana/redlock.json from rotting: a real Prometheus
// scrapes a real Caddy under load (contention, waits, busy answers, renewals, a lost
// lock, a node error, dry run), then every query of every panel, and every template
// variable's query, must return at least one series. A metric renamed or a label
// dropped makes a panel empty, and this test fail.
func TestGrafanaDashboard(t *testing.T) {
	skipShort(t)
	promBin := prometheusBinary(t)
	dash := loadDashboard(t, "contrib/grafana/redlock.json")

	servers := redistest.StartN(t, 3)
	st := &streamer{cancelled: map[string]time.Time{}}
	up := newUpstream(t, 0, st.serve)
	block := func(prefix, extra string) string {
		return fmt.Sprintf("redlock {\n\t\t\t%s\n\t\t\tprefix %s\n\t\t\tttl 1500ms\n\t\t\tnode_timeout 100ms\n\t\t\t%s\n\t\t}", redisLine(servers), prefix, extra)
	}
	s := startCaddy(t, "", fmt.Sprintf(`
	handle /dry/* {
		%s
%s
	}
	handle /busy/* {
		%s
%s
	}
	handle {
		%s
%s
	}`, block("dashd:", "dry_run"), proxyStreaming(up), block("dash:", "wait 0"), proxyStreaming(up),
		block("dash:", "wait 30s"), proxyStreaming(up)))
	adm := newAdmClient(s)
	prom := startPrometheus(t, promBin, s.adminAdr)

	// Load until the queries are done: contended keys (waits, hand-overs), streams long
	// enough to be renewed, busy and dry-run answers for a key held elsewhere.
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c := &http.Client{Timeout: 30 * time.Second}
	hit := func(path string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				hit(fmt.Sprintf("/k/%d?d=50ms", (i+n)%3))
				if i == 0 {
					hit("/busy/x?d=0s")
					hit("/dry/x?d=0s")
				}
			}
		}()
	}
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	holdKey(t, servers, "dash:", "/busy/x", 30*time.Second)
	holdKey(t, servers, "dashd:", "/dry/x", 30*time.Second)
	renewed := startStream(t, s.url+"/stream?d=3s")
	lost := startStream(t, s.url+"/lost?d=20s")
	if !eventually(10*time.Second, func() bool {
		for _, l := range adm.locks(t).Locks {
			if l.Key == "/lost" && l.State == stateHeld {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the stream to lose never held its lock")
	}
	if code, body, _ := adm.do(t, "DELETE", "/redlock/keys?key=/lost"); code != 200 {
		t.Fatalf("force release: %d %s", code, body)
	}
	lost.wait(t, 10*time.Second)
	// A node error: one node paused for longer than node_timeout (two still make a quorum),
	// until its errors are counted.
	paused := map[string]string{"node": servers[2].Addr()}
	errorsBefore := metricTotal(t, metrics.nodeErrors, paused)
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return metricTotal(t, metrics.nodeErrors, paused) > errorsBefore }) {
		t.Error("no error counted for the paused node")
	}
	if err := servers[2].Resume(); err != nil {
		t.Fatal(err)
	}
	renewed.wait(t, 20*time.Second)

	// A few scrapes after the last event, so every rate has two samples to work with.
	if !eventually(20*time.Second, func() bool {
		return len(prom.query(t, `caddy_redlock_locks_lost_total`)) > 0 &&
			len(prom.query(t, `count_over_time(caddy_redlock_held_locks[1m]) > 5`)) > 0
	}) {
		t.Fatal("Prometheus never scraped the loss, or fewer than 5 scrapes")
	}
	// Every template variable and every panel's query returns data: Prometheus needs a
	// scrape or two more of the last events for the rates, so the queries are asked
	// until they all answer (or 20 s pass, and those still empty are reported).
	type query struct{ what, expr string }
	var queries []query
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			queries = append(queries, query{fmt.Sprintf("template variable $%s (%s) has no values", v.Name, v.Definition),
				fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
		}
	}
	for _, p := range dash.panels() {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: unknown template variable in %s", p.Title, expr)
				continue
			}
			queries = append(queries, query{fmt.Sprintf("panel %q: no series for %s", p.Title, expr), expr})
		}
	}
	var empty []string
	eventually(20*time.Second, func() bool {
		empty = empty[:0]
		for _, q := range queries {
			if len(prom.query(t, q.expr)) == 0 {
				empty = append(empty, q.what)
			}
		}
		return len(empty) == 0
	})
	for _, e := range empty {
		t.Error(e)
	}
	checked := len(queries) - len(empty)
	t.Logf("%d dashboard queries return data", checked)
	stopLoad()
	wg.Wait()
}

// grafanaVars gives Grafana's variables concrete values: a rate window covering the
// whole test (scrapes every second), and "All" for the dashboard's own variables.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "1m", "$__range", "1m",
	"$instance", ".*", "$name", ".*", "$node", ".*", "${datasource}", "")

// labelValues matches Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

type dashboard struct {
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type dashPanel struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []dashPanel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// panels lists the panels with queries, rows flattened.
func (d *dashboard) panels() []dashPanel {
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

func loadDashboard(t *testing.T, path string) *dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(d.panels()) == 0 {
		t.Fatalf("%s: no panels", path)
	}
	return &d
}

// prometheusBinary finds prometheus (Debian package prometheus; .ci/run installs it).
// Without it the test fails, like the tests without redis-server: a skipped check would
// let the dashboard rot unnoticed.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus"
	}
	t.Fatal("prometheus not found: install it (apt-get install prometheus) to run the dashboard check")
	return ""
}

// promServer is a Prometheus process scraping Caddy's admin /metrics every second.
type promServer struct{ base string }

func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: caddy
    static_configs:
      - targets: [%q]
`, target)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	exited, err := childproc.Fork(cmd, func(error) { logf.Close() }) // dies with the test binary
	if err != nil {
		logf.Close()
		t.Fatalf("starting prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", tail(string(b), 30))
		}
	})
	p := &promServer{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	if !eventually(20*time.Second, func() bool {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		t.Fatal("prometheus never became ready")
	}
	return p
}

// query evaluates expr now and returns the series of the answer.
func (p *promServer) query(t *testing.T, expr string) []json.RawMessage {
	t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	if out.Status != "success" {
		t.Errorf("query %s: %s: %s", expr, out.Status, out.Error)
	}
	return out.Data.Result
}
