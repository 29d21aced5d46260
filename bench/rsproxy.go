package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	_ "expvar"         // /debug/vars on the debug listener
	_ "net/http/pprof" // /debug/pprof on the debug listener

	"github.com/go-redsync/redsync/v4"
)

// The redsync-based equivalent of Caddy + redlock: an httputil.ReverseProxy that takes a
// redsync mutex per key (path /r/{id} -> key "redlock:res:{id}", the same names Caddy
// uses), extends it every ttl/3 from a goroutine while the request runs (cancelling the
// request if an extend fails), and unlocks when the upstream response is done.
// It runs as a child process of the bench: `bench proxy -listen ... -upstream ...`.

type rsProxy struct {
	rs       *redsync.Redsync
	proxy    *httputil.ReverseProxy
	opts     []redsync.Option
	ttl      time.Duration
	wait     time.Duration
	prefix   string
	lockless bool
	lost     atomic.Int64
}

func runProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	debug := fs.String("debug", "", "address for /debug/pprof and /debug/vars")
	up := fs.String("upstream", "", "upstream host:port")
	redisURLs := fs.String("redis", "", "comma-separated redis URLs; empty = no lock (plain proxy)")
	ttl := fs.Duration("ttl", 10*time.Second, "lock expiry")
	wait := fs.Duration("wait", 30*time.Second, "how long a request may wait for the lock")
	retryMin := fs.Duration("retry-min", 0, "min retry delay; 0 = redsync default (50-250ms)")
	retryMax := fs.Duration("retry-max", 0, "max retry delay")
	fs.Parse(args)

	target, err := url.Parse("http://" + *up)
	if err != nil || *up == "" {
		return fmt.Errorf("proxy: bad -upstream %q", *up)
	}
	p := &rsProxy{ttl: *ttl, wait: *wait, prefix: "redlock:", lockless: *redisURLs == ""}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host },
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 32, IdleConnTimeout: 2 * time.Minute},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	if !p.lockless {
		rs, closeRS := newRedsync(strings.Split(*redisURLs, ","))
		defer closeRS()
		p.rs = rs
		// Tries: unbounded in practice; the wait (a context deadline) ends the waiting, as
		// Caddy's `wait` does. Expiry = Caddy's ttl. Everything else at redsync's defaults.
		p.opts = []redsync.Option{redsync.WithExpiry(*ttl), redsync.WithTries(1 << 30)}
		if *retryMin > 0 {
			lo, hi := *retryMin, max(*retryMax, *retryMin)
			p.opts = append(p.opts, redsync.WithRetryDelayFunc(func(int) time.Duration {
				return lo + rand.N(hi-lo+1)
			}))
		}
	}
	if *debug != "" {
		dl, err := net.Listen("tcp", *debug)
		if err != nil {
			return err
		}
		go http.Serve(dl, http.DefaultServeMux)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return (&http.Server{Handler: p, ReadHeaderTimeout: time.Minute}).Serve(l)
}

func (p *rsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.lockless {
		p.proxy.ServeHTTP(w, r)
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/r/")
	if !ok || id == "" || strings.Contains(id, "/") {
		http.NotFound(w, r)
		return
	}
	m := p.rs.NewMutex(p.prefix+"res:"+id, p.opts...)
	wctx, cancelWait := context.WithTimeout(r.Context(), p.wait)
	err := m.LockContext(wctx)
	waitErr := wctx.Err()
	cancelWait()
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			return // client went away
		case waitErr != nil || errors.Is(err, redsync.ErrFailed):
			w.Header().Set("Retry-After", "1")
			http.Error(w, "locked", http.StatusLocked)
		default:
			http.Error(w, "lock unavailable", http.StatusServiceUnavailable)
		}
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	done := make(chan struct{})
	go p.keepExtending(m, cancel, done)
	p.proxy.ServeHTTP(w, r.WithContext(ctx))
	close(done)
	cancel()
	uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
	m.UnlockContext(uctx)
	ucancel()
}

// keepExtending extends m every ttl/3 until done; a failed extend cancels the request.
func (p *rsProxy) keepExtending(m *redsync.Mutex, cancel context.CancelFunc, done <-chan struct{}) {
	t := time.NewTicker(p.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			ctx, c := context.WithTimeout(context.Background(), p.ttl/3)
			ok, err := m.ExtendContext(ctx)
			c()
			if !ok || err != nil {
				p.lost.Add(1)
				cancel()
				return
			}
		}
	}
}
