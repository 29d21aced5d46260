package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// benchStart is the zero of the X-Bench-Sent header (monotonic).
var benchStart = time.Now()

// loadSpec is a closed-loop load: Clients goroutines, each sending its next request as soon
// as the previous one is answered, for Duration. Client i talks to Targets[i%len(Targets)].
type loadSpec struct {
	Clients  int
	Duration time.Duration
	Targets  []*httpTarget
	Path     func(client, seq int) string // path and query
	Stamp    bool                         // send X-Bench-Sent / X-Bench-Inst headers
	Drain    time.Duration                // how long requests still in flight at the end may take
}

// loadResult is what one load run saw. Throughput counts successes completed inside the
// window; latencies cover every success, including ones that finished during the drain.
type loadResult struct {
	Window    time.Duration
	OK        int             // 2xx completed inside the window
	Lat       []time.Duration // 2xx, all
	Status    map[int]int     // non-2xx by status (0 = transport error)
	PerTarget []int           // 2xx inside the window, by target
	PerClient []int
	Cut       int // still in flight when the drain ran out
}

// httpTarget is one HTTP front end (a Caddy site or a Go proxy) with its own client.
type httpTarget struct {
	name   string
	base   string // http://127.0.0.1:PORT
	client *http.Client
}

func newTarget(name, base string, conns int) *httpTarget {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &httpTarget{name: name, base: base, client: &http.Client{Transport: tr}}
}

func (t *httpTarget) close() { t.client.CloseIdleConnections() }

// get sends one GET and reads the body; status 0 means a transport error.
func (t *httpTarget) get(ctx context.Context, path string, hdr http.Header) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
	if err != nil {
		return 0
	}
	maps(req.Header, hdr)
	resp, err := t.client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func maps(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// runLoad runs spec and returns what it saw.
func runLoad(spec loadSpec) loadResult {
	res := loadResult{Window: spec.Duration, Status: map[int]int{},
		PerTarget: make([]int, len(spec.Targets)), PerClient: make([]int, spec.Clients)}
	drain := spec.Drain
	if drain == 0 {
		drain = 10 * time.Second
	}
	start := time.Now()
	end := start.Add(spec.Duration)
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(drain))
	defer cancel()

	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range spec.Clients {
		ti := c % len(spec.Targets)
		t := spec.Targets[ti]
		wg.Go(func() {
			var lat []time.Duration
			ok, status, cut := 0, map[int]int{}, 0
			var hdr http.Header
			for seq := 0; time.Now().Before(end); seq++ {
				if spec.Stamp {
					hdr = http.Header{"X-Bench-Inst": {strconv.Itoa(ti)}}
				}
				t0 := time.Now()
				if spec.Stamp {
					hdr.Set("X-Bench-Sent", strconv.FormatInt(int64(t0.Sub(benchStart)), 10))
				}
				code := t.get(ctx, spec.Path(c, seq), hdr)
				t1 := time.Now()
				switch {
				case code >= 200 && code < 300:
					lat = append(lat, t1.Sub(t0))
					if !t1.After(end) {
						ok++
					}
				case code == 0 && ctx.Err() != nil:
					cut++
				default:
					status[code]++
				}
			}
			mu.Lock()
			res.Lat = append(res.Lat, lat...)
			res.OK += ok
			res.PerTarget[ti] += ok
			res.PerClient[c] += ok
			res.Cut += cut
			for k, v := range status {
				res.Status[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

// merge adds another round of the same variant.
func (r *loadResult) merge(o loadResult) {
	if r.Status == nil {
		*r = loadResult{Status: map[int]int{}, PerTarget: make([]int, len(o.PerTarget)), PerClient: make([]int, len(o.PerClient))}
	}
	r.Window += o.Window
	r.OK += o.OK
	r.Lat = append(r.Lat, o.Lat...)
	r.Cut += o.Cut
	for k, v := range o.Status {
		r.Status[k] += v
	}
	for i, v := range o.PerTarget {
		r.PerTarget[i] += v
	}
	for i, v := range o.PerClient {
		r.PerClient[i] += v
	}
}

func (r loadResult) rps() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.OK) / r.Window.Seconds()
}

func (r loadResult) errors() int {
	n := r.Cut
	for _, v := range r.Status {
		n += v
	}
	return n
}
