package caddyredlock

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// modeJudge is a checking upstream for the lock modes. Caddy passes the request's keys
// ({http.redlock.key}: the keys in lock order, space-separated), its mode
// ({http.redlock.mode}) and the fencing header. Per key it judges every entry:
//   - exclusive: nobody else inside;
//   - shared: no writer inside (readers may be);
//   - a writer (exclusive) never enters while readers are inside;
//   - limit: at most limit inside;
//   - fencing: a writer's token is above every token seen before on the key, and no
//     token is used twice (but by readers of one instance sharing their entry).
//
// It records the most requests inside one key at once, so that a test can also check
// the lock is not stricter than it must be (readers overlap, n limited holders reached).
type modeJudge struct {
	addr  string
	hold  time.Duration
	limit int // for mode "limit"

	mu         sync.Mutex
	readers    map[string]int
	writers    map[string]int
	limited    map[string]int
	maxInside  map[string]int // per key, anyone
	maxTokens  map[string]int64
	seen       map[string]map[int64]bool
	violations []string
	hits       int
	modes      map[string]int
}

func newModeJudge(t *testing.T, hold time.Duration, limit int) *modeJudge {
	t.Helper()
	j := &modeJudge{hold: hold, limit: limit, readers: map[string]int{}, writers: map[string]int{},
		limited: map[string]int{}, maxInside: map[string]int{}, maxTokens: map[string]int64{},
		seen: map[string]map[int64]bool{}, modes: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j.addr = ln.Addr().String()
	srv := &http.Server{Handler: j}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return j
}

// proxy is the site's reverse_proxy to the judge.
func (j *modeJudge) proxy() string {
	return fmt.Sprintf(`	reverse_proxy %s {
		header_up X-Lock-Key {http.redlock.key}
		header_up X-Lock-Mode {http.redlock.mode}
	}`, j.addr)
}

func (j *modeJudge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	keys := strings.Fields(r.Header.Get("X-Lock-Key"))
	mode := r.Header.Get("X-Lock-Mode")
	tokens := parseTokens(keys, r.Header.Get("Redlock-Fencing-Token"))
	j.enter(keys, mode, tokens)
	defer j.leave(keys, mode)
	select {
	case <-time.After(j.hold):
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, "ok")
}

// parseTokens reads the fencing header: the bare token for one key, key=token pairs for
// several. Keys without a token (no fencing) are absent.
func parseTokens(keys []string, header string) map[string]int64 {
	out := map[string]int64{}
	if header == "" {
		return out
	}
	if len(keys) == 1 && !strings.Contains(header, "=") {
		if v, err := strconv.ParseInt(header, 10, 64); err == nil {
			out[keys[0]] = v
		}
		return out
	}
	for _, p := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(p, "=")
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

func (j *modeJudge) enter(keys []string, mode string, tokens map[string]int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.hits++
	j.modes[mode]++
	for _, k := range keys {
		r, w, l := j.readers[k], j.writers[k], j.limited[k]
		switch mode {
		case modeShared:
			if w > 0 {
				j.violatef("reader entered %q with a writer inside", k)
			}
			j.readers[k]++
		case modeLimit:
			if l >= j.limit {
				j.violatef("limited request entered %q with %d inside (limit %d)", k, l, j.limit)
			}
			j.limited[k]++
		default:
			if r+w+l > 0 {
				j.violatef("writer entered %q with %d readers, %d writers, %d limited inside", k, r, w, l)
			}
			j.writers[k]++
		}
		j.maxInside[k] = max(j.maxInside[k], j.readers[k]+j.writers[k]+j.limited[k])
		if tok, ok := tokens[k]; ok {
			if j.seen[k] == nil {
				j.seen[k] = map[int64]bool{}
			}
			// Readers of one instance may share an entry, and so its token.
			if j.seen[k][tok] && mode != modeShared {
				j.violatef("token %d used twice on %q", tok, k)
			}
			j.seen[k][tok] = true
			if mode == modeExclusive && tok <= j.maxTokens[k] {
				j.violatef("writer on %q with token %d, not above %d seen before", k, tok, j.maxTokens[k])
			}
			j.maxTokens[k] = max(j.maxTokens[k], tok)
		}
	}
}

func (j *modeJudge) leave(keys []string, mode string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range keys {
		switch mode {
		case modeShared:
			j.readers[k]--
		case modeLimit:
			j.limited[k]--
		default:
			j.writers[k]--
		}
	}
}

func (j *modeJudge) violatef(format string, args ...any) {
	j.violations = append(j.violations, time.Now().Format("15:04:05.000000 ")+fmt.Sprintf(format, args...))
}

// report returns the violations and the most requests inside key at once.
func (j *modeJudge) report(key string) (violations []string, maxInside, hits int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.violations...), j.maxInside[key], j.hits
}
