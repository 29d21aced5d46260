package caddyredlock

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// exportedSpan is one span as the console exporter (stdouttrace) prints it.
type exportedSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Status struct{ Code, Description string }
}

// attr is the span's attribute key as text ("" when absent).
func (s exportedSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// tracedCaddy is a cmd/caddy process whose spans go to its standard output
// (OTEL_TRACES_EXPORTER=console), one JSON span a line.
type tracedCaddy struct{ *caddyProc }

// startTracedCaddy runs cmd/caddy with the Caddyfile site body and the console span
// exporter, exporting every 50ms, until the test ends.
func startTracedCaddy(t *testing.T, body string) *tracedCaddy {
	t.Helper()
	return &tracedCaddy{startCaddyProc(t, body,
		"OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_TRACES_SAMPLER=parentbased_always_on")}
}

// trace reads the spans exported so far of one trace, by name.
func (c *tracedCaddy) trace(t *testing.T, traceID string) map[string][]exportedSpan {
	t.Helper()
	f, err := os.Open(c.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byName := map[string][]exportedSpan{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s exportedSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			continue // a line still being written
		}
		if s.SpanContext.TraceID == traceID {
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	return byName
}

// waitTrace waits until the trace has all the named spans and returns them.
func (c *tracedCaddy) waitTrace(t *testing.T, traceID string, names ...string) map[string][]exportedSpan {
	t.Helper()
	var got map[string][]exportedSpan
	complete := func() bool {
		got = c.trace(t, traceID)
		for _, n := range names {
			if len(got[n]) == 0 {
				return false
			}
		}
		return true
	}
	if !eventually(10*time.Second, complete) {
		t.Fatalf("trace %s: want spans %q, got %v", traceID, names, got)
	}
	return got
}

// newTraceparent returns a sampled W3C traceparent header of a new trace, and its id.
func newTraceparent() (header, traceID string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	traceID = hex.EncodeToString(b[:16])
	return "00-" + traceID + "-" + hex.EncodeToString(b[16:]) + "-01", traceID
}

// tracedGet sends a GET in a new trace (sampled or not) and returns the status and the
// trace id.
func tracedGet(t *testing.T, url string, sampled bool) (int, string) {
	t.Helper()
	tp, id := newTraceparent()
	if !sampled {
		tp = strings.TrimSuffix(tp, "01") + "00"
	}
	status, _, _ := get(t, http.DefaultClient, "GET", url, http.Header{"Traceparent": {tp}})
	return status, id
}

// TestTracingSpans: with Caddy's `tracing` handler, a locked request's redlock.acquire
// and redlock.hold spans reach a real exporter (the console one of autoexport, as Caddy
// configures it from OTEL_* variables) as children of Caddy's server span, with their
// attributes, for a lock acquired, a busy key and a lock force-released mid-request.
// Without `tracing`, or in a trace not sampled, there is no span.
func TestTracingSpans(t *testing.T) {
	servers := redistest.StartN(t, 3)
	slowIn := make(chan struct{}, 1)
	up := newUpstream(t, 0, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/slow") {
			slowIn <- struct{}{}
			select { // held until the lock is force released (the request is then aborted)
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.Write([]byte("ok"))
	})
	block := fmt.Sprintf(`redlock {
			%s
			prefix tr:
			wait 0
			fencing
		}
		reverse_proxy %s`, redisLine(servers), up.addr)
	c := startTracedCaddy(t, fmt.Sprintf(`	handle /t/* {
		tracing {
			span caddy_request
		}
		%s
	}
	handle /p/* {
		%s
	}`, block, block))

	// checkChild checks that s is a child of the trace's server span.
	checkChild := func(t *testing.T, got map[string][]exportedSpan, s exportedSpan) {
		t.Helper()
		server := got["caddy_request"][0]
		if s.Parent.TraceID != server.SpanContext.TraceID || s.Parent.SpanID != server.SpanContext.SpanID {
			t.Errorf("%s: parent %+v, want Caddy's server span %+v", s.Name, s.Parent, server.SpanContext)
		}
	}

	t.Run("acquired", func(t *testing.T) {
		status, id := tracedGet(t, c.url+"/t/a", true)
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		got := c.waitTrace(t, id, "caddy_request", "redlock.acquire", "redlock.hold")
		acq, hold := got["redlock.acquire"][0], got["redlock.hold"][0]
		for _, s := range []exportedSpan{acq, hold} {
			checkChild(t, got, s)
			if s.attr("redlock.key") != "/t/a" || s.attr("redlock.mode") != "exclusive" || s.attr("redlock.fencing_token") == "" {
				t.Errorf("%s: attributes %+v", s.Name, s.Attributes)
			}
			if s.Status.Code == "Error" {
				t.Errorf("%s: status %+v", s.Name, s.Status)
			}
		}
		if acq.attr("redlock.result") != "acquired" || hold.attr("redlock.hold_end") != "released" {
			t.Errorf("acquire %+v\nhold %+v", acq.Attributes, hold.Attributes)
		}
	})

	t.Run("busy", func(t *testing.T) {
		release := holdKey(t, servers, "tr:", "/t/busy", 10*time.Second)
		defer release()
		status, id := tracedGet(t, c.url+"/t/busy", true)
		if status != 423 {
			t.Fatalf("status %d, want 423", status)
		}
		got := c.waitTrace(t, id, "caddy_request", "redlock.acquire")
		acq := got["redlock.acquire"][0]
		checkChild(t, got, acq)
		if acq.attr("redlock.result") != "busy" || acq.attr("redlock.key") != "/t/busy" || acq.attr("redlock.fencing_token") != "" {
			t.Errorf("acquire: %+v", acq.Attributes)
		}
		if len(got["redlock.hold"]) != 0 {
			t.Errorf("a hold span for a lock never taken: %+v", got["redlock.hold"])
		}
	})

	t.Run("lost", func(t *testing.T) {
		done := make(chan struct{})
		tp, id := newTraceparent()
		go func() { // no t here: it may outlive a failed test
			req, _ := http.NewRequest("GET", c.url+"/t/slow", nil)
			req.Header.Set("Traceparent", tp)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			close(done)
		}()
		select {
		case <-slowIn:
		case <-time.After(5 * time.Second):
			t.Fatal("the request never reached the upstream")
		}
		req, _ := http.NewRequest("DELETE", c.admin+"/redlock/keys?key=/t/slow", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("force release: %s", resp.Status)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the request was not aborted by the force release")
		}
		got := c.waitTrace(t, id, "caddy_request", "redlock.acquire", "redlock.hold")
		hold := got["redlock.hold"][0]
		checkChild(t, got, hold)
		if hold.Status.Code != "Error" || hold.attr("redlock.lost_reason") != "force_released" || hold.attr("redlock.hold_end") != "lost" {
			t.Errorf("hold: status %+v, attributes %+v", hold.Status, hold.Attributes)
		}
		if acq := got["redlock.acquire"][0]; acq.attr("redlock.result") != "acquired" {
			t.Errorf("acquire: %+v", acq.Attributes)
		}
	})

	t.Run("untraced", func(t *testing.T) {
		// No `tracing` handler on /p/, and a trace not sampled on /t/: no span at all.
		_, plain := tracedGet(t, c.url+"/p/a", true)
		_, unsampled := tracedGet(t, c.url+"/t/a", false)
		// A traced request after them: once its spans are out, theirs would be too.
		_, id := tracedGet(t, c.url+"/t/after", true)
		c.waitTrace(t, id, "redlock.hold")
		for _, tr := range []string{plain, unsampled} {
			if got := c.trace(t, tr); len(got) != 0 {
				t.Errorf("trace %s has spans: %+v", tr, got)
			}
		}
	})
}
