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

// Hole 7 of safety round 5: a request body still arriving after a loss is not streamed
// on to a FastCGI application. PHP-FPM starts a script only once stdin is complete, so
// a 64 KiB POST whose second half came after a force release ran beside the next
// holder. Body reads are refused from the loss on, the read already waiting included
// (exchange.go, watchedBody): the application never gets the whole body.
func TestLossStopsFastCGIBody(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 10
	got := make(chan int64, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		// The application: counts the stdin it got; a whole body would run the script.
		_ = fcgi.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			got <- n
			io.WriteString(w, "ran")
		}))
	}()
	t.Cleanup(func() {
		ln.Close()
		<-served
	})
	s := startCaddy(t, "", fmt.Sprintf(`
	redlock {
		%s
		prefix fcgibody:
		ttl 2s
		node_timeout 200ms
	}
	reverse_proxy %s {
		transport fastcgi
	}`, redisLine(servers), ln.Addr()))
	lostBefore := metricTotal(t, metrics.lost, map[string]string{"reason": "force_released"})

	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	half := strings.Repeat("x", size/2)
	fmt.Fprintf(conn, "POST /app.php HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", size, half)
	if !waitState("/app.php", stateHeld, 5*time.Second) {
		t.Fatal("the request never held its lock")
	}
	time.Sleep(200 * time.Millisecond) // the first half on its way to the application
	forceRelease(t, s, "/app.php")
	if !eventually(5*time.Second, func() bool {
		return metricTotal(t, metrics.lost, map[string]string{"reason": "force_released"}) > lostBefore
	}) {
		t.Fatal("the loss was never counted")
	}
	io.WriteString(conn, half) // the rest, after the loss
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		t.Logf("status %d", resp.StatusCode)
		resp.Body.Close()
	}
	select {
	case n := <-got:
		if n == size {
			t.Errorf("the application got the whole body (%d bytes), its second half sent after the lock was lost", n)
		}
	case <-time.After(time.Second): // a whole body comes at once; the aborted transport ends a short one
		// The application is still waiting for stdin: it never ran.
	}
}
