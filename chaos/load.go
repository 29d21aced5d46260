package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// load is the client side: bounded loops of hot-key requests and streams, spread over
// the Caddy instances, until stopped (or the run's deadline).
type load struct {
	cfg    config
	insts  []*instance
	rec    *recorder
	client *http.Client
	seq    atomic.Int64
	stuck  atomic.Int64 // mode requests that got no answer within the client's timeout

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// probePrefix marks the runner's own requests (the ledger keeps their visits).
const probePrefix = "probe-"

func hotKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("hot%d", i)
	}
	return ks
}

func newLoad(cfg config, insts []*instance, rec *recorder) *load {
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.clients + cfg.streamers + 4, IdleConnTimeout: 30 * time.Second}
	return &load{cfg: cfg, insts: insts, rec: rec,
		// Longer than a paused instance plus a full wait behind it.
		client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// start runs the loops until stop is called or ctx ends.
func (l *load) start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(ctx)
	keys := hotKeys(l.cfg.hotKeys)
	for w := range l.cfg.clients {
		l.wg.Go(func() { l.hotLoop(ctx, w, keys) })
	}
	for w := range l.cfg.streamers {
		l.wg.Go(func() { l.streamLoop(ctx, w) })
	}
	for w := range l.cfg.modeClients {
		l.wg.Go(func() { l.modeLoop(ctx, w) })
	}
}

// modeLoop sends requests to the lock modes' routes (modes.go): shared reads and writes
// of two documents, a limited pool, and transfers between three accounts both ways.
func (l *load) modeLoop(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(uint64(w), 99))
	accts := []string{"a", "b", "c"}
	for i := 0; ctx.Err() == nil; i++ {
		inst := (w + i) % len(l.insts)
		hold := l.cfg.holdMin + time.Duration(rng.Int64N(int64(l.cfg.holdMax-l.cfg.holdMin)+1))
		method, path := "POST", ""
		switch p := rng.IntN(100); {
		case p < 40:
			method, path = "GET", fmt.Sprintf("/s/doc%d", rng.IntN(2))
		case p < 50:
			method, path = "PUT", fmt.Sprintf("/s/doc%d", rng.IntN(2))
		case p < 75:
			path = "/l/pool"
		default:
			from := rng.IntN(3)
			to := (from + 1 + rng.IntN(2)) % 3
			path = "/t/" + accts[from] + "/" + accts[to]
		}
		res := result{start: time.Now(), key: path, inst: inst, route: modeRoute(method, path)}
		res.status, _, _ = l.send(ctx, inst, method, path, "hold="+hold.String(), fmt.Sprintf("m%d-%d", w, i))
		res.end = time.Now()
		// No answer within the client's timeout: a request stuck (a deadlock of the
		// transfers would show here). One cut by stop counts too if it waited that long.
		if res.status == 0 && res.end.Sub(res.start) >= l.client.Timeout {
			l.stuck.Add(1)
		}
		if ctx.Err() != nil && res.status == 0 {
			return
		}
		l.rec.add(res)
		think := time.Duration(rng.Int64N(int64(l.cfg.thinkMax) + 1))
		if res.status != 200 {
			think += 50 * time.Millisecond
		}
		sleep(ctx, think)
	}
}

// stop ends the loops and waits for them; requests in flight are cut.
func (l *load) stop() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

func (l *load) hotLoop(ctx context.Context, w int, keys []string) {
	rng := rand.New(rand.NewPCG(uint64(w), 42))
	for i := 0; ctx.Err() == nil; i++ {
		inst := (w + i) % len(l.insts)
		key := keys[rng.IntN(len(keys))]
		hold := l.cfg.holdMin + time.Duration(rng.Int64N(int64(l.cfg.holdMax-l.cfg.holdMin)+1))
		res := l.do(ctx, inst, key, fmt.Sprintf("hold=%s", hold), fmt.Sprintf("c%d-%d", w, i))
		res.hot = true
		if ctx.Err() != nil && res.status == 0 {
			return // cut by stop: not a result
		}
		l.rec.add(res)
		think := time.Duration(rng.Int64N(int64(l.cfg.thinkMax) + 1))
		if res.status != 200 {
			think += 50 * time.Millisecond // no storms against a failing cluster
		}
		sleep(ctx, think)
	}
}

func (l *load) streamLoop(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	nkeys := max(1, l.cfg.streamers/2) // two loops per stream key: they contend
	for i := 0; ctx.Err() == nil; i++ {
		inst := (w + i) % len(l.insts)
		key := fmt.Sprintf("st%d", w%nkeys)
		d := l.cfg.streamMin + time.Duration(rng.Int64N(int64(l.cfg.streamMax-l.cfg.streamMin)+1))
		res := l.do(ctx, inst, key, fmt.Sprintf("stream=%s&every=50ms", d.Round(time.Millisecond)), fmt.Sprintf("s%d-%d", w, i))
		res.stream = true
		if ctx.Err() != nil && res.status == 0 {
			return
		}
		l.rec.add(res)
		sleep(ctx, time.Duration(rng.Int64N(int64(100*time.Millisecond))))
	}
}

// do sends one GET /r/{key}?{query} through instance inst and reads the whole body.
func (l *load) do(ctx context.Context, inst int, key, query, id string) result {
	res := result{start: time.Now(), key: key, inst: inst}
	status, body, err := l.get(ctx, inst, key, query, id)
	res.end = time.Now()
	res.status = status
	if err == nil && status == 200 && strings.Contains(query, "stream=") {
		res.complete = strings.HasSuffix(body, "done\n")
	}
	return res
}

func (l *load) get(ctx context.Context, inst int, key, query, id string) (int, string, error) {
	return l.send(ctx, inst, "GET", "/r/"+key, query, id)
}

// send sends one request through instance inst and reads the whole body.
func (l *load) send(ctx context.Context, inst int, method, path, query, id string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("%s%s?%s", l.insts[inst].url(), path, query), nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set(headerReq, id)
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

// probeStream starts a long stream on key through inst for the runner itself and returns
// once its first chunk arrived (the lock is held and the stream is inside the upstream).
// The returned channel gets the outcome when the stream ends.
func (l *load) probeStream(ctx context.Context, inst int, key string, d time.Duration) (id string, done <-chan result, err error) {
	id = fmt.Sprintf("%s%d", probePrefix, l.seq.Add(1))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/r/%s?stream=%s&every=50ms", l.insts[inst].url(), key, d), nil)
	if err != nil {
		return "", nil, err
	}
	req.Header.Set(headerReq, id)
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		return "", nil, err
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return "", nil, fmt.Errorf("probe stream through caddy%d: status %d", inst, resp.StatusCode)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		resp.Body.Close()
		return "", nil, fmt.Errorf("probe stream: first chunk: %w", err)
	}
	out := make(chan result, 1)
	go func() {
		defer resp.Body.Close()
		rest, _ := io.ReadAll(resp.Body)
		out <- result{start: start, end: time.Now(), key: key, inst: inst, stream: true, status: 200,
			complete: strings.HasSuffix(string(buf)+string(rest), "done\n")}
	}()
	return id, out, nil
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
