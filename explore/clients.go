package main

// The requests: each case's clients, sent at their moments, in their ways (HTTP/1.1,
// h2c, a body that trickles in, Expect: 100-continue, a client that leaves early), and
// what each got back: the status, and every chunk of the body it read with the
// upstream's name for it (so the judge can tell when that byte was written).

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// outcome is what a client saw.
type outcome struct {
	req      string
	sent     time.Time
	ended    time.Time
	status   int    // 0: no response
	err      string // a transport error, or the body cut short
	chunks   []chunkRef
	whole    bool // the body ended with the upstream's END line and a clean EOF
	aborted  bool // the client left on purpose
	bodyDone time.Time
}

// chunkRef names a chunk the upstream wrote: request, piece of work, index.
type chunkRef struct {
	req  string
	n, i int
}

// clients are the HTTP clients the requests use (shared: connections are reused).
type clients struct {
	h1, h2 *http.Client
}

func newClients() *clients {
	h1 := &http.Transport{DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		ExpectContinueTimeout: time.Second, MaxIdleConnsPerHost: 16, DisableCompression: false}
	h2 := &http.Transport{DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{}}
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetUnencryptedHTTP2(true)
	return &clients{h1: &http.Client{Transport: h1, Timeout: 15 * time.Second},
		h2: &http.Client{Transport: h2, Timeout: 15 * time.Second}}
}

func (cl *clients) close() {
	cl.h1.CloseIdleConnections()
	cl.h2.CloseIdleConnections()
}

// path is the request's path as spelled: spellings of one resource take one lock.
func (q request) path(lane string) string {
	switch q.spell {
	case "dot":
		return "/" + lane + "/./" + q.keyID + "/x"
	case "double":
		return "/" + lane + "//" + q.keyID + "/x"
	case "dotdot":
		return "/" + lane + "/z/../" + q.keyID + "/x"
	}
	return "/" + lane + "/" + q.keyID + "/x"
}

// send runs one request and reports what its client saw.
func (cl *clients) send(base string, lane string, q request, slowBody time.Duration) outcome {
	if q.client == clientWS {
		return cl.sendWS(base, lane, q)
	}
	o := outcome{req: q.id, sent: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if q.client == "abort" {
		t := time.AfterFunc(q.abortAt, cancel)
		defer t.Stop()
	}
	var body io.Reader
	if q.method == "POST" {
		body = strings.NewReader("payload " + q.id)
		if q.client == "big" {
			body = strings.NewReader(strings.Repeat("B", bigBody)) // its length told
		}
		if q.client == "slowbody" {
			pr, pw := io.Pipe()
			head := ""
			if q.sized {
				head = strings.Repeat("h", sizedHead-1) + "\n"
			}
			go trickle(ctx, pw, head, slowBody)
			body = pr
		}
	}
	req, err := http.NewRequestWithContext(ctx, q.method, base+q.path(lane), body)
	if err != nil {
		o.err = err.Error()
		return o
	}
	if q.client == "slowbody" {
		req.ContentLength = -1
		if q.sized {
			req.ContentLength = int64(sizedHead + trickleLen)
		}
	}
	if q.errWork != "" {
		req.Header.Set("X-Work-Err", q.errWork)
	}
	req.Header.Set("X-Req-Id", q.id)
	req.Header.Set("X-Work", q.work)
	if q.first != "" {
		req.Header.Set("X-Work-First", q.first)
	}
	if q.deny {
		req.Header.Set("X-Auth", "deny")
	}
	if q.client == "expect" {
		req.Header.Set("Expect", "100-continue")
	}
	c := cl.h1
	if q.client == "h2c" {
		c = cl.h2
	}
	resp, err := c.Do(req)
	if err != nil {
		o.err, o.ended = err.Error(), time.Now()
		o.aborted = q.client == "abort" && ctx.Err() != nil
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if strings.HasSuffix(line, "\n") {
			o.readLine(strings.TrimSpace(line))
		}
		if err != nil {
			if err != io.EOF {
				o.err = "body: " + err.Error()
				o.whole = false
			}
			break
		}
	}
	o.ended = time.Now()
	o.aborted = q.client == "abort" && ctx.Err() != nil
	return o
}

func (o *outcome) readLine(l string) {
	f := strings.Fields(l)
	switch {
	case len(f) == 4 && f[0] == "chunk":
		var ref chunkRef
		ref.req = f[1]
		fmt.Sscanf(f[2], "%d", &ref.n)
		fmt.Sscanf(f[3], "%d", &ref.i)
		o.chunks = append(o.chunks, ref)
	case len(f) >= 2 && f[0] == "END":
		o.whole = true
	}
}

// A sized slow body (request.sized): its head, sent at once, is more than the 4 KiB
// Caddy's FastCGI transport buffers before it dials; the pieces follow.
const (
	sizedHead  = 5000
	trickleLen = 4 * len("piece 0\n") // the pieces trickle writes
)

// trickle writes head, then a body in pieces over d, then ends it.
func trickle(ctx context.Context, w *io.PipeWriter, head string, d time.Duration) {
	const pieces = 4
	if head != "" {
		if _, err := io.WriteString(w, head); err != nil {
			return
		}
	}
	for i := range pieces {
		if _, err := fmt.Fprintf(w, "piece %d\n", i); err != nil {
			return
		}
		select {
		case <-time.After(d / pieces):
		case <-ctx.Done():
			w.CloseWithError(ctx.Err())
			return
		}
	}
	w.Close()
}
