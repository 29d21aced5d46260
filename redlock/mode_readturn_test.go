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
	const asked = 20        // ms: the turn the readers ask for, shorter than the releaser's
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
		return ints(acquireScript.Run(ctx, tn, []string{keys[0], keys[1], keys[2], "seq", marker, bound},
			owner+strconv.Itoa(attempt), 5000, owner, "0", 60000, attempt, 2000).Slice())
	}
	read := func(value string) []int64 {
		t.Helper()
		return ints(readAcquireScript.Run(ctx, tn, append(keys[:5:5], "seq", marker, bound), value, 5000, value, "0", 60000, 1, 2000,
			"0", asked).Slice())
	}
	get := func(k string) string { v, _ := rc.Get(ctx, k).Result(); return v }

	if r := write("W1:", 1); r[0] != 1 {
		t.Fatalf("first writer on a free key: %v", r)
	}
	if r := read("R1"); r[0] != 0 {
		t.Fatalf("reader granted under a writer: %v", r)
	}
	if get(keys[4]) != strconv.Itoa(asked) {
		t.Fatalf("refused reader left no waiting mark with the turn it asks for: %q", get(keys[4]))
	}
	if r := write("W2:", 2); r[0] != 0 {
		t.Fatalf("second writer granted under the first: %v", r)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W1:1", "id", turn).Int64(); err != nil || n != 1 {
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
	// The turn lapses (its mark expires); the reader inside keeps the name.
	if !eventually(turn*time.Millisecond+3*time.Second, func() bool { return rc.Exists(ctx, keys[4]).Val() == 0 }) {
		t.Fatalf("the readers' turn never lapsed: mark %q", get(keys[4]))
	}
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
	// A release with no readers waiting (R2's mark stands again: it was refused after the
	// turn) gives them a turn; one with no mark does not.
	if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W2:5", "id", turn).Int64(); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if get(keys[4]) != "t" {
		t.Fatalf("R2 waited, but no turn: %q", get(keys[4]))
	}
	rc.Del(ctx, "k", keys[4])
	if r := write("W3:", 1); r[0] != 1 {
		t.Fatalf("writer on a free key: %v", r)
	}
	if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W3:1", "id", turn).Int64(); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if v, err := rc.Exists(ctx, "k").Result(); err != nil || v != 0 {
		t.Fatalf("release with no reader waiting left the name (%d, %v)", v, err)
	}
}

// The turn a release gives: its own, or the longest the waiting readers asked for, up to
// the releasing client's longest; an older version's mark ("w") asks for nothing.
func TestReadersTurnAsked(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	tn := scriptNode(t, srv)
	ctx := context.Background()
	const own, longest = 100, 2000 // ms
	for _, tc := range []struct {
		asks []int  // the refused readers' asks, in order
		mark string // or a mark set by hand
		want int
	}{
		{asks: []int{30}, want: own},
		{asks: []int{700}, want: 700},
		{asks: []int{700, 300}, want: 700}, // the longest stays
		{asks: []int{9000}, want: longest},
		{mark: "w", want: own},
	} {
		rc.FlushAll(ctx)
		keys := []string{"k", "k" + counterSuffix, "k" + writerSuffix, "k" + readersSuffix, "k" + turnSuffix, "seq", "marker", "bound"}
		if err := rc.Set(ctx, "k", "W:1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		for i, ask := range tc.asks {
			r, err := readAcquireScript.Run(ctx, tn, keys, "R"+strconv.Itoa(i), 5000, "R", "0", 60000, 1, 2000, "0", ask).Slice()
			if err != nil || r[0] != int64(0) {
				t.Fatalf("asks %v: reader under a writer: %v %v", tc.asks, r, err)
			}
		}
		if tc.mark != "" {
			rc.Set(ctx, keys[4], tc.mark, time.Minute)
		}
		if n, err := releaseScript.Run(ctx, tn, []string{"k", keys[4]}, "W:1", "id", own, longest).Int64(); err != nil || n < 1 {
			t.Fatalf("release: %d %v", n, err)
		}
		pttl, err := rc.PTTL(ctx, keys[4]).Result()
		want := time.Duration(tc.want) * time.Millisecond
		if err != nil || pttl > want || pttl < want-want/5 {
			t.Errorf("asks %v mark %q: turn of %v, want %dms", tc.asks, tc.mark, pttl, tc.want)
		}
	}
}

// Across clients: while a writer of one client holds the key, readers of another client
// and a writer of a third wait. On the release, the readers go in together before that
// other writer, every time (the readers' turn), and the writer then gets the key once
// they leave: its wait is bounded by the readers' work plus the turn, never starved.
func TestSharedReadersGoBeforeOtherClientsWriter(t *testing.T) {
	servers := redistest.StartN(t, 3)
	wa := newTestClient(t, servers, fastOptions())
	wopt := fastOptions()
	wtries := countTries(&wopt)
	wc := newTestClient(t, servers, wopt)
	ropt := fastOptions()
	ropt.RetryDelayMin, ropt.RetryDelayMax = 5*time.Second, 5*time.Second // only notices wake them
	rtries := countTries(&ropt)
	rb := newTestClient(t, servers, ropt)
	const readers, rounds = 4, 6
	const hold = 30 * time.Millisecond
	for round := range rounds {
		w1 := mustAcquire(t, wa, "doc", AcquireOptions{Wait: 10 * time.Second})
		var order atomic.Int32
		var wg sync.WaitGroup
		var readersAt readerLog
		reads0, _ := rtries.tries(len(servers))
		_, writes0 := wtries.tries(len(servers))
		for range readers {
			startReader(t, &wg, rb, "doc", &order, hold, &readersAt)
		}
		w2At := make(chan int32, 1)
		w2Waited := make(chan time.Duration, 1)
		if !eventually(3*time.Second, func() bool { return waitingReaders(rb, "doc") == readers }) {
			t.Fatal("timed out waiting for: readers waiting")
		}
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
		// The readers asleep on their notice, the writer too: each past its second try.
		if !eventually(3*time.Second, func() bool {
			reads, _ := rtries.tries(len(servers))
			_, writes := wtries.tries(len(servers))
			return reads >= reads0+2*readers && writes >= writes0+2
		}) {
			t.Fatalf("round %d: timed out waiting for the readers and the writer to try twice", round)
		}
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

// delayHook delays every command and pipeline of a client by d before it is sent: a
// client far from the nodes (its release notices still come at once).
type delayHook time.Duration

func (h delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(h)) // the distance: a duration under test
		return next(ctx, cmd)
	}
}

func (h delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(h)) // the distance: a duration under test
		return next(ctx, cmds)
	}
}

// A reader of a distant instance (its commands reach the nodes 150ms late) against
// writers of two other clients that keep coming, each holding the key 200ms: each
// writer's release gives the readers a turn, but one sized by the writer's own rounds
// (about 10ms here) is over before the reader's try lands, the other writer is in by
// then, and the reader would wait for as long as writers keep coming. The reader asks for
// a turn of its own rounds (and longer for each turn it misses): it gets in within a
// few writers' holds.
func TestDistantReaderGetsATurn(t *testing.T) {
	skipShort(t)
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	ropt := fastOptions()
	ropt.ClientBuilder = func(o *redis.Options) (*redis.Client, error) {
		c := redis.NewClient(o)
		c.AddHook(delayHook(150 * time.Millisecond))
		return c, nil
	}
	ropt.NodeTimeout = time.Second                                        // its calls queue behind each other's delays
	ropt.RetryDelayMin, ropt.RetryDelayMax = 5*time.Second, 5*time.Second // only notices wake it
	r := newTestClient(t, servers, ropt)
	for range 8 { // its rounds, which size the turn it asks for, are a distant instance's
		l := mustAcquire(t, r, "warm", read)
		_ = l.Release(ctx)
	}
	const each = 10 // holds per writer
	var holds atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		w := newTestClient(t, servers, fastOptions())
		wg.Go(func() {
			for range each {
				select {
				case <-stop:
					return
				default:
				}
				l, err := w.Acquire(ctx, "doc", AcquireOptions{Wait: 5 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				holds.Add(1)
				time.Sleep(200 * time.Millisecond) // its work: the hold the reader's turn must fit between
				_ = l.Release(ctx)
			}
		})
	}
	if !eventually(3*time.Second, func() bool { return holds.Load() >= 2 }) {
		t.Fatal("timed out waiting for: writers taking the key in turn")
	}
	from := holds.Load()
	l, err := r.Acquire(ctx, "doc", AcquireOptions{Shared: true, Wait: 10 * time.Second})
	passed := holds.Load() - from
	if err == nil {
		_ = l.Release(ctx) // before the writers stop: one may wait for the key
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the distant reader: %v (writers' holds meanwhile: %d)", err, passed)
	}
	if passed > 5 {
		t.Fatalf("the distant reader got in after %d writers' holds (the writers stop after %d): it missed turn after turn", passed, 2*each)
	}
}

// The turn a refused reader asks for: readersTurnRounds of its own rounds (at least
// readersTurnMin), doubled for each turn it missed, at most readersTurnMax.
func TestReadersTurnAsk(t *testing.T) {
	c := newTestClient(t, redistest.StartN(t, 1), fastOptions()) // node timeout 300ms
	c.readers.round.Store(int64(20 * time.Millisecond))
	for misses, want := range []time.Duration{80, 160, 320, 640, 1200, 1200} {
		if got := c.readersTurnAsk(misses); got != want*time.Millisecond {
			t.Errorf("%d misses: asks %v, want %v", misses, got, want*time.Millisecond)
		}
	}
	c.readers.round.Store(int64(time.Millisecond))
	if got := c.readersTurnAsk(0); got != readersTurnMin {
		t.Errorf("fast rounds: asks %v, want %v", got, readersTurnMin)
	}
}
