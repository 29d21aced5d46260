package caddyredlock

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/fcgi"
	"strings"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// Caddy's FastCGI transport ignores the request's context once it has dialed, so
// cancelling a request whose lock was lost does not stop the response: the handler's
// response writer refuses every write from the loss on, and the client never gets what
// the application wrote after it, nor a response that looks whole.
func TestLossStopsFastCGI(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proceed, letAppFinish := newGate(t)
	served := make(chan struct{})
	go func() {
		defer close(served)
		// The application: one part, then (once the test says) the part written
		// after the lock was lost.
		_ = fcgi.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "part one\n")
			w.(http.Flusher).Flush()
			<-proceed
			io.WriteString(w, "part two, after the loss\n")
		}))
	}()
	t.Cleanup(func() {
		ln.Close()
		<-served
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix fcgi:
		ttl 2s
		node_timeout 200ms
	}
	reverse_proxy %s {
		transport fastcgi
		flush_interval -1
	}`, redisLine(servers), ln.Addr()))
	adm := newAdmClient(s)
	lostBefore := metricTotal(t, metrics.lost, map[string]string{"reason": "force_released"})

	resp, err := http.Get(s.url + "/app.php")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "part one\n" {
		t.Fatalf("first part: %q %v", line, err)
	}
	if code, body, _ := adm.do(t, "DELETE", "/redlock/keys?key=/app.php"); code != 200 {
		t.Fatalf("force release: %d %s", code, body)
	}
	if !eventually(5*time.Second, func() bool {
		return metricTotal(t, metrics.lost, map[string]string{"reason": "force_released"}) > lostBefore
	}) {
		t.Fatal("the loss was never counted")
	}
	letAppFinish()
	rest, err := io.ReadAll(br)
	if strings.Contains(string(rest), "part two") {
		t.Errorf("the client got what the application wrote after the lock was lost: %q", rest)
	}
	if err == nil {
		t.Errorf("the response ended cleanly after the lock was lost (rest %q): the client takes it for whole", rest)
	}
	noKeysLeft(t, servers, "fcgi:")
}
