// Command upstream is the demo backend for caddy-redlock. Each request "works" for a
// while; the upstream counts, per resource, who is inside at once: an overlap is a writer
// that entered with anyone inside, or a reader (X-Redlock-Mode: shared) that entered with
// a writer inside: the lock failed. Readers together are fine. It checks that a writer's
// fencing token is above every token seen before for the resource. Several resources
// (a transfer: X-Redlock-Key "account:1 account:2") are each checked. GET /stats reports
// the totals as JSON.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type stats struct {
	mu          sync.Mutex
	inside      map[string]int   // resource -> requests inside now
	readers     map[string]int   // resource -> readers (shared) inside now
	maxInside   map[string]int   // resource -> most seen at once
	lastToken   map[string]int64 // resource -> highest fencing token seen
	Requests    int              `json:"requests"`
	Unlocked    int              `json:"unlocked"`     // requests without a lock (not checked for overlaps)
	Overlaps    int              `json:"overlaps"`     // writers that found anyone inside, readers that found a writer
	ReadersMax  int              `json:"readers_max"`  // most readers inside one resource at once
	StaleTokens int              `json:"stale_tokens"` // tokens not larger than one already seen
	Parallel    int              `json:"parallel_max"` // most requests inside at once, all resources
	nowInside   int
}

// resource names what a request works on: the lock key Caddy sends in X-Redlock-Key. A
// request redlock did not lock (a read) has no key, or the unexpanded placeholder text
// "{http.redlock.key}" (Caddy leaves unknown placeholders as they are in headers).
func resource(r *http.Request) (res string, locked bool) {
	if k := r.Header.Get("X-Redlock-Key"); k != "" && !strings.HasPrefix(k, "{") {
		return k, true
	}
	return path.Clean(r.URL.Path), false
}

func (s *stats) enter(res string, shared, locked bool, token int64, hasToken bool) (overlap, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Requests++
	s.inside[res]++
	s.nowInside++
	s.Parallel = max(s.Parallel, s.nowInside)
	if !locked {
		s.Unlocked++
		return false, false
	}
	writers := s.inside[res] - 1 - s.readers[res]
	if shared {
		s.readers[res]++
		s.ReadersMax = max(s.ReadersMax, s.readers[res])
		overlap = writers > 0
	} else {
		overlap = s.inside[res] > 1
	}
	if overlap {
		s.Overlaps++
	}
	s.maxInside[res] = max(s.maxInside[res], s.inside[res])
	if hasToken {
		// Readers that hold a resource together may arrive out of token order; a writer
		// must be above everyone before it.
		if last, ok := s.lastToken[res]; ok && token <= last && !shared {
			s.StaleTokens++
			stale = true
		}
		s.lastToken[res] = max(s.lastToken[res], token)
	}
	return overlap, stale
}

func (s *stats) leave(res string, shared bool) {
	s.mu.Lock()
	s.inside[res]--
	if shared {
		s.readers[res]--
	}
	s.nowInside--
	s.mu.Unlock()
}

// tokens reads the fencing header for each resource: the bare token for one, key=token
// pairs for several.
func tokens(res []string, header string) map[string]int64 {
	out := map[string]int64{}
	for _, p := range strings.Split(header, ",") {
		k, v, pair := strings.Cut(p, "=")
		if !pair {
			k, v = res[0], p
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

func (s *stats) serveStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := map[string]any{"requests": s.Requests, "unlocked": s.Unlocked, "overlaps": s.Overlaps, "stale_tokens": s.StaleTokens,
		"readers_max":  s.ReadersMax,
		"parallel_max": s.Parallel, "max_inside_per_resource": s.maxInside}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9080", "listen address")
	delay := flag.Duration("delay", 300*time.Millisecond, "how long each request works")
	tokenHeader := flag.String("token-header", "Redlock-Fencing-Token", "request header with the fencing token")
	flag.Parse()

	st := &stats{inside: map[string]int{}, readers: map[string]int{}, maxInside: map[string]int{}, lastToken: map[string]int64{}}
	start := time.Now()
	// Not an http.ServeMux: it would redirect "//a/./b" to "/a/b" before the request
	// reaches us, hiding what Caddy's key normalization does.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/stats" {
			st.serveStats(w, r)
			return
		}
		key, locked := resource(r)
		shared := r.Header.Get("X-Redlock-Mode") == "shared"
		tokStr := r.Header.Get(*tokenHeader)
		all := strings.Fields(key)
		toks := tokens(all, tokStr)
		overlap, stale := false, false
		for _, res := range all {
			tok, hasToken := toks[res]
			o, s := st.enter(res, shared, locked, tok, hasToken)
			overlap, stale = overlap || o, stale || s
			defer st.leave(res, shared)
		}
		res := key
		note := ""
		if shared {
			note = "  (shared)"
		}
		if !locked {
			note += "  (not locked)"
		}
		if overlap {
			note += "  <-- OVERLAP: a writer with another request for this resource inside"
		}
		if stale {
			note += "  <-- STALE fencing token"
		}
		log.Printf("%8.3fs enter %-6s %-28s resource=%-16s token=%-18s%s",
			time.Since(start).Seconds(), r.Method, r.URL.Path, res, tokStr, note)
		select {
		case <-time.After(*delay):
		case <-r.Context().Done():
			log.Printf("%8.3fs abort %s %s: %v", time.Since(start).Seconds(), r.Method, r.URL.Path, r.Context().Err())
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s %s resource=%s token=%s overlap=%v\n", r.Method, r.URL.Path, res, tokStr, overlap)
	})

	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		_ = srv.Close()
	}()
	log.SetFlags(0)
	log.Printf("demo upstream on http://%s (each request takes %v; GET /stats for totals)", *addr, *delay)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
