package redlock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The readers' turn on one node, script by script: a reader refused by a writer marks
// readers as waiting; that writer's release leaves the lock name holding the shared
// marker (no entry) for the turn; a writer is refused meanwhile (and marks itself as
// waiting), a reader goes in past that mark; once the turn is over, the writer's mark
// refuses new readers again, and the writer gets the key when the readers inside leave.
func TestReadersTurnScripts(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	tn := scriptNode(t, srv)
	ctx := context.Background()
	const turn = 300 // ms: loose, the race detector on shared cores is slow
	keys := []string{"k", "k" + counterSuffix, "k" + writerSuffix, "k" + readersSuffix, "k" + turnSuffix}
	const marker = "marker" // the data marker's key (before the bound): read for grants' replies
	const bound = "bound"   // the node's bound (last): read for counter expiries
	// ints is a reply's numbers ({granted, token or PTTL, ...}; a grant's marker left out).
	ints := func(r []any, err error) []int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, v := range r {
			if n, ok := v.(int64); ok {
				out = append(out, n)
			}
		}
		return out
	}
	write := func(owner string, attempt int) []int64 {
		t.Helper()
		return ints(acquireScript.Run(ctx, tn, []string{keys[0], keys[1], keys[2], marker, bound},
			owner+strconv.Itoa(attempt), 5000, owner, "0", 60000, attempt, 2000).Slice())
	}
	read := func(value string) []int64 {
		t.Helper()
		return ints(readAcquireScript.Run(ctx, tn, append(keys[:5:5], marker, bound), value, 5000, value, "0", 60000, 1, 2000).Slice())
	}
	get := func(k string) string { v, _ := rc.Get(ctx, k).Result(); return v }

	if r := write("W1:", 1); r[0] != 1 {
		t.Fatalf("first writer on a free key: %v", r)
	}
	if r := read("R1"); r[0] != 0 {
		t.Fatalf("reader granted under a writer: %v", r)
	}
	if get(keys[4]) != "w" {
		t.Fatalf("refused reader left no waiting mark: %q", get(keys[4]))
	}
	if r := write("W2:", 2); r[0] != 0 {
		t.Fatalf("second writer granted under the first: %v", r)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W1:1", "chan", "id", turn).Int64(); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if get("k") != sharedMarker || get(keys[4]) != "t" {
		t.Fatalf("after the release: name %q, turn mark %q; want the shared marker and the readers' turn", get("k"), get(keys[4]))
	}
	if r := write("W2:", 3); r[0] != 0 {
		t.Fatalf("writer granted during the readers' turn: %v", r)
	} else if r[1] <= 0 || r[1] > turn {
		t.Fatalf("writer refused by the turn was told to wait %dms, want the turn's rest (<= %d)", r[1], turn)
	}
	if get(keys[2]) != "W2:" {
		t.Fatalf("writer refused by the turn left no waiting mark: %q", get(keys[2]))
	}
	if r := read("R1"); r[0] != 1 {
		t.Fatalf("reader refused during its turn (past a writer's mark): %v", r)
	}
	// The turn lapses; the reader inside keeps the name.
	time.Sleep(turn*time.Millisecond + 50*time.Millisecond)
	if r := read("R2"); r[0] != 0 {
		t.Fatalf("late reader granted past a waiting writer after the turn: %v", r)
	}
	if r := write("W2:", 4); r[0] != 0 {
		t.Fatalf("writer granted while a reader holds: %v", r)
	}
	if n, err := readReleaseScript.Run(ctx, tn, keys[:4], "R1", "chan", "id").Int64(); err != nil || n < 1 {
		t.Fatalf("reader release: %d %v", n, err)
	}
	if r := write("W2:", 5); r[0] != 1 {
		t.Fatalf("waiting writer refused once the readers left: %v", r)
	}
	// A release with no readers waiting (R2's mark is "w" again: it was refused after the
	// turn) gives them a turn; one with no mark does not.
	if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W2:5", "chan", "id", turn).Int64(); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if get(keys[4]) != "t" {
		t.Fatalf("R2 waited, but no turn: %q", get(keys[4]))
	}
	rc.Del(ctx, "k", keys[4])
	if r := write("W3:", 1); r[0] != 1 {
		t.Fatalf("writer on a free key: %v", r)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W3:1", "chan", "id", turn).Int64(); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if v, err := rc.Exists(ctx, "k").Result(); err != nil || v != 0 {
		t.Fatalf("release with no reader waiting left the name (%d, %v)", v, err)
	}
}

// Across clients: while a writer of one client holds the key, readers of another client
// and a writer of a third wait. On the release, the readers go in together before that
// other writer, every time (the readers' turn), and the writer then gets the key once
// they leave: its wait is bounded by the readers' work plus the turn, never starved.
func TestSharedReadersGoBeforeOtherClientsWriter(t *testing.T) {
	servers := redistest.StartN(t, 3)
	wa := newTestClient(t, servers, fastOptions())
	wc := newTestClient(t, servers, fastOptions())
	ropt := fastOptions()
	ropt.RetryDelayMin, ropt.RetryDelayMax = 5*time.Second, 5*time.Second // only notices wake them
	rb := newTestClient(t, servers, ropt)
	const readers, rounds = 4, 6
	const hold = 30 * time.Millisecond
	for round := range rounds {
		w1 := mustAcquire(t, wa, "doc", AcquireOptions{Wait: 10 * time.Second})
		var order atomic.Int32
		var wg sync.WaitGroup
		var readersAt readerLog
		for range readers {
			startReader(t, &wg, rb, "doc", &order, hold, &readersAt)
		}
		w2At := make(chan int32, 1)
		w2Waited := make(chan time.Duration, 1)
		eventually(t, "readers waiting", func() bool {
			rb.readers.mu.Lock()
			defer rb.readers.mu.Unlock()
			return rb.readers.waiting["doc"] == readers
		})
		go func() {
			t0 := time.Now()
			w2, err := wc.Acquire(context.Background(), "doc", AcquireOptions{Wait: 10 * time.Second})
			if err != nil {
				t.Errorf("second writer: %v", err)
				w2At <- 0
				return
			}
			w2Waited <- time.Since(t0)
			w2At <- order.Add(1)
			_ = w2.Release(context.Background())
		}()
		time.Sleep(50 * time.Millisecond) // the readers asleep on their notice, the writer too
		released := time.Now()
		if err := w1.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if got := <-w2At; got != readers+1 {
			t.Fatalf("round %d: the other client's writer came %d-th, readers %v: waiting readers did not all go first", round, got, &readersAt)
		}
		// Bounded: the readers' work plus the turn and a few round trips (loose for -race).
		if after := time.Since(released); after > time.Second {
			t.Fatalf("round %d: writer in %v after the release", round, after)
		}
		<-w2Waited
	}
}
