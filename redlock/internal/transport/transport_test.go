package transport

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
	"github.com/caddy-redlock/caddy-redlock/internal/testwait"
)

// Test scripts: a SET NX and its compare-and-delete cleanup, as a round and its release.
func testScripts() (*Scripts, *Script, *Script) {
	set := NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 10000) and 1 or 0`).About("set", "SET")
	del := NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`).
		About("delete", "GET", "DEL").AsCleanup()
	return NewScripts(set, del), set, del
}

// Replies convert as go-redis's Cmd does.
func TestReplyConversions(t *testing.T) {
	boom := errors.New("boom")
	if v, err := NewReply(int64(7), nil).Int64(); v != 7 || err != nil {
		t.Errorf("Int64: %v %v", v, err)
	}
	if v, err := NewReply("42", nil).Int64(); v != 42 || err != nil {
		t.Errorf("Int64 of a string: %v %v", v, err)
	}
	if _, err := NewReply([]any{}, nil).Int64(); err == nil {
		t.Error("Int64 of an array: no error")
	}
	if _, err := NewReply(int64(1), boom).Int64(); err != boom {
		t.Errorf("Int64 with an error: %v", err)
	}
	if v, err := NewReply("x", nil).Text(); v != "x" || err != nil {
		t.Errorf("Text: %q %v", v, err)
	}
	if _, err := NewReply(int64(1), nil).Text(); err == nil {
		t.Error("Text of an integer: no error")
	}
	if v, err := NewReply([]any{int64(1), "2"}, nil).Int64Slice(); err != nil || len(v) != 2 || v[1] != 2 {
		t.Errorf("Int64Slice: %v %v", v, err)
	}
	if v, err := NewReply([]any{"a", "b"}, nil).StringSlice(); err != nil || strings.Join(v, "") != "ab" {
		t.Errorf("StringSlice: %v %v", v, err)
	}
	if _, err := NewReply([]any{"a", int64(1)}, nil).StringSlice(); err == nil {
		t.Error("StringSlice with an integer: no error")
	}
	if _, err := NewReply("x", nil).Slice(); err == nil {
		t.Error("Slice of a string: no error")
	}
	if !NewReply(nil, redis.Nil).IsNil() || NewReply(nil, boom).IsNil() {
		t.Error("IsNil")
	}
}

// Hello's commands go first on every new connection and with every health check, and
// their replies reach Heard; Check updates the node's facts; the digests are learned.
func TestHelloCheckAndFacts(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	ss, _, _ := testScripts()
	cfg := testConfig(ss)
	var mu sync.Mutex
	var heard []string
	cfg.Hello = func() [][]any { return [][]any{{"echo", "hello"}} }
	cfg.Heard = func(r []Reply) {
		v, _ := r[0].Text()
		mu.Lock()
		heard = append(heard, v)
		mu.Unlock()
	}
	var observed atomic.Int64
	cfg.Observe = func(node, op string, rtt time.Duration, err error) {
		if node == srv.Addr() && op == "health" && err == nil {
			observed.Add(1)
		}
	}
	n := newTestNode(t, srv, cfg)
	if n.Addr() != srv.Addr() {
		t.Fatalf("Addr %q, want %q", n.Addr(), srv.Addr())
	}
	if f := n.Facts(); f.Checked || f.Up {
		t.Fatalf("facts before a check: %+v", f)
	}
	waitDigests(t, n, ss) // the first connection's hello
	n.Check(context.Background(), time.Second)
	f := n.Facts()
	if !f.Checked || !f.Up || f.LastRTT <= 0 || f.LastCheck.IsZero() || f.Errors != 0 {
		t.Fatalf("facts after a check: %+v", f)
	}
	mu.Lock()
	got := heard
	mu.Unlock()
	// At least one connection's hello and the check's (go-redis may dial more).
	if len(got) < 2 || strings.Trim(strings.Join(got, ""), "helo") != "" || observed.Load() != 1 {
		t.Fatalf("heard %q, observed %d health calls: want a connection's hello and a check's", got, observed.Load())
	}
	n.AfterCheck(context.Background(), time.Second)
	if !n.Facts().Probed {
		t.Fatalf("the permission probe did not pass on a default user: %+v", n.Facts())
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	n.Check(context.Background(), time.Second)
	if f := n.Facts(); f.Up || f.LastErr == nil || f.Errors != 1 || !n.Silent() {
		t.Fatalf("facts after a failed check: %+v (silent %v)", f, n.Silent())
	}
}

// A Call is answered exactly once, by its deadline, also when the node does not answer;
// and with the node's batcher ended, at once with Config.Closed.
func TestCallDeliversOnceByDeadline(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	for _, pipelining := range []bool{true, false} {
		ss, set, _ := testScripts()
		cfg := testConfig(ss)
		cfg.Pipelining = pipelining
		cfg.NodeTimeout = 200 * time.Millisecond
		n := newTestNode(t, srv, cfg)
		call := func(key string) (Reply, time.Duration) {
			t.Helper()
			got := make(chan Reply, 2)
			start := time.Now()
			n.Call(context.Background(), NewCommand(set, []string{key}, "v"), func(r Reply) { got <- r })
			r := <-got
			took := time.Since(start)
			select {
			case r2 := <-got:
				t.Fatalf("delivered twice: %v, %v", r, r2)
			case <-time.After(50 * time.Millisecond):
			}
			return r, took
		}
		if r, _ := call("k"); r.Err() != nil {
			t.Fatalf("pipelining %v: %v", pipelining, r.Err())
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		r, took := call("k2")
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if r.Err() == nil || !noAnswer(r.Err()) || took > time.Second {
			t.Fatalf("pipelining %v, paused node: %v after %v, want a timeout by the deadline", pipelining, r.Err(), took)
		}
	}
	// Once Flush ended: Closed, without sending.
	ss, set, _ := testScripts()
	n, err := New(srv.URL(), testConfig(ss))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.Flush(ctx)
	var got []error
	n.Call(context.Background(), NewCommand(set, []string{"k3"}, "v"), func(r Reply) { got = append(got, r.Err()) })
	if len(got) != 1 || got[0] != errClosed {
		t.Fatalf("after Flush ended: %v, want one %v", got, errClosed)
	}
}

// A node that lost its scripts (restart, SCRIPT FLUSH) may refuse a round's SET with
// NOSCRIPT while the same pipeline's later release of that value runs (its script was
// loaded): the release then ran first, for nothing. After loading, it must run again
// behind the retried SET, or the value would stand on the node.
func TestBatcherNoScriptRetryKeepsOrder(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	ss, set, del := testScripts()
	n := newTestNode(t, srv, testConfig(ss))
	ctx := context.Background()
	waitDigests(t, n, ss) // so the SET goes as EVALSHA, and meets NOSCRIPT
	if err := n.Do(ctx, "script", "flush").Err(); err != nil {
		t.Fatal(err)
	}
	// Only the cleanup is known.
	if err := n.Do(ctx, "script", "load", del.Src()).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	var got replySink
	mk := func(i int, script *Script, keys []string, args ...any) *call {
		return &call{cmd: NewCommand(script, keys, args...), deadline: deadline, sink: &got, i: i}
	}
	acq := mk(0, set, []string{"noscript"}, "v1")
	rel := mk(1, del, []string{"noscript"}, "v1")
	n.batch.send(ctx, []*call{acq, rel})
	if err := got.replies[0].Err(); err != nil {
		t.Fatalf("SET after the script was loaded: %v", err)
	}
	if r := n.Do(ctx, "get", "noscript"); !r.IsNil() {
		t.Fatalf("the retried SET stands (%v): its release ran before it and was not sent again", r.Val())
	}
}

// Answers that are not one digest per text are not kept (the scripts keep going as EVAL).
func TestNoteDigestsRefusesOddAnswers(t *testing.T) {
	s := NewScript("return 1").About("test")
	ss := NewScripts(s)
	ctx := context.Background()
	for _, answer := range [][]any{
		{},                        // too few
		{"a", "b"},                // too many
		{"not a digest"},          // not hex
		{strings.Repeat("A", 40)}, // not as Redis writes it
	} {
		cmd := redis.NewCmd(ctx, "eval", digestScript, 0, s.Src())
		cmd.SetVal(answer)
		noteDigests(cmd, ss)
		if s.Digest() != "" {
			t.Fatalf("answer %v kept as digest %q", answer, s.Digest())
		}
	}
	cmd := redis.NewCmd(ctx, "eval", digestScript, 0, s.Src())
	cmd.SetVal([]any{strings.Repeat("a", 40)})
	noteDigests(cmd, ss)
	if s.Digest() != strings.Repeat("a", 40) {
		t.Fatalf("a well-formed answer was not kept: %q", s.Digest())
	}
}

// scriptOf knows a script by its digest (EVALSHA, once a node told it) and by its text
// (EVAL), for ACL hints.
func TestScriptOf(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	ss, set, del := testScripts()
	n := newTestNode(t, srv, testConfig(ss))
	waitDigests(t, n, ss)
	ctx := context.Background()
	for _, cmd := range []redis.Cmder{
		redis.NewCmd(ctx, "evalsha", set.Digest(), 0),
		redis.NewCmd(ctx, "EVALSHA", strings.ToUpper(del.Digest()), 0),
		redis.NewCmd(ctx, "eval", probeScript.Src(), 0),
	} {
		if s := scriptOf(cmd, ss); s == nil {
			t.Errorf("%v: script not recognised", cmd.Args()[0])
		}
	}
	for _, cmd := range []redis.Cmder{
		redis.NewCmd(ctx, "eval", "return 1", 0),
		redis.NewCmd(ctx, "evalsha", strings.Repeat("0", 40), 0),
	} {
		if s := scriptOf(cmd, ss); s != nil {
			t.Errorf("unknown script %v recognised as %q", cmd.Args()[1], s.Name())
		}
	}
}

// OnAll returns once the quorum said yes, without waiting for a node that does not
// answer; a node not asked is neither a yes nor a no, and its error names it.
func TestOnAllQuorum(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ss, _, _ := testScripts()
	cfg := testConfig(ss)
	cfg.NodeTimeout = 2 * time.Second
	nodes := make([]*Node, len(servers))
	for i, s := range servers {
		nodes[i] = newTestNode(t, s, cfg)
	}
	ctx := context.Background()
	ping := func(ctx context.Context, i int) (bool, error) {
		return true, nodes[i].Do(ctx, "ping").Err()
	}
	if yes, no, errs := OnAll(ctx, nodes, "test", 0, ping); yes != 3 || no != 0 || len(errs) != 0 {
		t.Fatalf("all up: %d yes, %d no, %v", yes, no, errs)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = servers[2].Resume() }()
	start := time.Now()
	if yes, _, _ := OnAll(ctx, nodes, "test", 2, ping); yes != 2 || time.Since(start) > time.Second {
		t.Fatalf("quorum of 2 with one node paused: %d yes after %v", yes, time.Since(start))
	}
	yes, no, errs := OnAll(ctx, nodes, "test", 0, func(ctx context.Context, i int) (bool, error) {
		if i == 2 {
			return false, ErrNotAsked
		}
		return i == 0, nil
	})
	if yes != 1 || no != 1 || len(errs) != 1 || !errors.Is(errs[0], ErrNotAsked) || !strings.HasPrefix(errs[0].Error(), servers[2].Addr()) {
		t.Fatalf("not asked: %d yes, %d no, %v", yes, no, errs)
	}
}

// A subscription confirms its channels and hands on their messages, until removed.
func TestSubscriptionNotices(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	ss, _, _ := testScripts()
	n := newTestNode(t, srv, testConfig(ss))
	ctx, cancel := context.WithCancel(context.Background())
	sub := n.Subscribe(ctx)
	notices := make(chan Notice, 16)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sub.Apply(ctx) }()
	go func() { defer wg.Done(); sub.Listen(func(m Notice) { notices <- m }) }()
	defer func() {
		cancel()
		_ = sub.Close()
		wg.Wait()
	}()
	next := func() Notice {
		t.Helper()
		select {
		case m := <-notices:
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no notice")
		}
		return Notice{}
	}
	sub.Add("ch")
	if m := next(); !m.Subscribed || m.Channel != "ch" {
		t.Fatalf("want the confirmation, got %+v", m)
	}
	if err := n.Do(context.Background(), "publish", "ch", "hi").Err(); err != nil {
		t.Fatal(err)
	}
	if m := next(); m.Subscribed || m.Channel != "ch" || m.Payload != "hi" {
		t.Fatalf("want the message, got %+v", m)
	}
	sub.Remove("ch")
	var r []any
	if !testwait.Eventually(5*time.Second, func() bool {
		r, _ = n.Do(context.Background(), "pubsub", "numsub", "ch").Slice()
		return len(r) == 2 && r[1] == int64(0)
	}) {
		t.Fatalf("still subscribed: %v", r)
	}
}

// URLs: the address shown never has a password; skip_verify and bad forms are refused.
func TestParseURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:pw@127.0.0.1:6379/2": "127.0.0.1:6379/2",
		"127.0.0.1:7000":               "127.0.0.1:7000",
		"unix:///tmp/r.sock":           "unix:///tmp/r.sock",
	} {
		if addr, err := ParseURL(raw); err != nil || addr != want {
			t.Errorf("%s: %q %v, want %q", raw, addr, err, want)
		}
	}
	for _, raw := range []string{"", "rediss://h:1?skip_verify=true", "http://h:1", "unix://", "redis://:secret@/x",
		// Credentials need a scheme; a bare string that is not host:port is never shown.
		"default:secret@127.0.0.1:6379", "secret@127.0.0.1:6379", "default:secret", "h:0", "h:+1", "h:65536", "redis:/u:secret@h:1"} {
		_, err := ParseURL(raw)
		if err == nil {
			t.Errorf("%q accepted", raw)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: error shows the password: %v", raw, err)
		}
	}
}

// A command's Then runs behind it on the same connection, once per pipeline whatever the
// number of calls that name it, and each call's Reply carries its reply: every call
// pushes its number on a list and its Then reads the list, which must hold that number
// (the read ran after the push); the reads number the pipelines. Without pipelining the
// two go in a pipeline of their own.
func TestThenRunsBehindItsCallsOncePerPipeline(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	for _, pipelining := range []bool{true, false} {
		ss, _, _ := testScripts()
		cfg := testConfig(ss)
		cfg.Pipelining = pipelining
		n := newTestNode(t, srv, cfg)
		list := "then-list-" + map[bool]string{true: "p", false: "np"}[pipelining]
		read := NewCommand(nil, nil, "lrange", list, 0, -1)
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rc.Close()
		if err := rc.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		const calls = 200
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				done := make(chan Reply, 1)
				n.Call(context.Background(), NewCommand(nil, nil, "rpush", list, i).Then(read), func(r Reply) { done <- r })
				r := <-done
				if err := r.Err(); err != nil {
					t.Errorf("call %d: %v", i, err)
					return
				}
				got, err := r.Then().StringSlice()
				if err != nil {
					t.Errorf("call %d: Then: %v", i, err)
					return
				}
				if !slices.Contains(got, strconv.Itoa(i)) {
					t.Errorf("call %d: Then read %v, without the call's own push: it ran before the call", i, got)
				}
			})
		}
		wg.Wait()
		info, err := rc.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		reads := 0
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_lrange:calls="); ok {
				reads, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			}
		}
		batches, sent := n.Batches()
		switch {
		case pipelining && (int64(reads) != batches || sent != calls):
			t.Errorf("pipelining: %d reads for %d pipelines of %d calls, want one per pipeline", reads, batches, sent)
		case pipelining && batches == calls:
			t.Logf("pipelining: no two calls shared a pipeline (a slow box): once per pipeline is all this run shows")
		case !pipelining && reads != calls:
			t.Errorf("no pipelining: %d reads for %d calls, want one each", reads, calls)
		}
	}
}

// The batcher reuses its calls and its queue's arrays (free, spare): each call must get
// its own reply, exactly once, whatever call and array carried it. In each wave the node
// is paused while the senders queue more calls than one pipeline takes, then resumed
// while they queue more: the backlog goes in several pipelines while new calls are
// queued on reused arrays.
func TestSendReusesCallsWithoutMixingReplies(t *testing.T) {
	srv := redistest.StartN(t, 1)[0]
	ss, _, _ := testScripts()
	n := newTestNode(t, srv, testConfig(ss))
	const waves, senders, each = 4, 4, 300
	for w := range waves {
		s := &echoSink{wave: w, want: senders * each, got: make([]int, senders*each), done: make(chan struct{})}
		send := func(from, to int) {
			var wg sync.WaitGroup
			for g := range senders {
				wg.Go(func() {
					for k := from; k < to; k++ {
						i := g*each + k
						n.Send(context.Background(), NewCommand(nil, nil, "echo", strconv.Itoa(w)+"/"+strconv.Itoa(i)), s, i)
						if k%16 == 0 {
							runtime.Gosched()
						}
					}
				})
			}
			wg.Wait()
		}
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		send(0, each/2)
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		send(each/2, each)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("wave %d: %d of %d replies", w, s.count(), s.want)
		}
		s.mu.Lock()
		for i, c := range s.got {
			if c != 1 {
				t.Errorf("wave %d: call %d delivered %d times", w, i, c)
			}
		}
		for _, e := range s.errs {
			t.Errorf("wave %d: %s", w, e)
		}
		s.mu.Unlock()
	}
	batches, sent := n.Batches()
	if sent != waves*senders*each {
		t.Fatalf("%d calls sent in %d pipelines, want %d", sent, batches, waves*senders*each)
	}
	t.Logf("%d calls in %d pipelines", sent, batches)
}

// echoSink checks that call i's reply is ECHO's of its wave and i.
type echoSink struct {
	mu   sync.Mutex
	wave int
	want int
	n    int
	got  []int
	errs []string
	done chan struct{}
}

func (s *echoSink) Deliver(i int, r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := r.Text()
	if err != nil || v != strconv.Itoa(s.wave)+"/"+strconv.Itoa(i) {
		s.errs = append(s.errs, "call "+strconv.Itoa(i)+" got "+strconv.Quote(v)+" "+errString(err))
	}
	s.got[i]++
	if s.n++; s.n == s.want {
		close(s.done)
	}
}

func (s *echoSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// replySink keeps the replies it is given, by index (one goroutine: send's).
type replySink struct{ replies [2]Reply }

func (s *replySink) Deliver(i int, r Reply) { s.replies[i] = r }
