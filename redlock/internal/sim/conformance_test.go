package sim

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-redlock/caddy-redlock/internal/redistest"
)

// TestConformance holds the simulated node to a real redis-server: every command the
// lock client sent to one node during a simulated schedule (its real scripts by EVAL and
// EVALSHA, the announce, INFO, the probe, the digests, NOSCRIPT and all) is sent again,
// in order and on the same inputs, to a real redis-server and to a fresh simulated node
// whose clock reads the time redis-server ran each command, and the replies must agree:
// exactly, but for values read from the clock (TIME, tokens drawn from it, PTTLs, the
// marker's creation time, reader entries' expiries), which must agree within the
// command's round trip, and INFO, whose fields the client reads must be there and alike.
// Pub/sub is checked on its own.
func TestConformance(t *testing.T) {
	var rec [][]string
	// Schedules' commands to node 0, until every script was sent (at most 12 schedules).
	need := map[string]bool{}
	for _, s := range scriptNames {
		need[s] = true
	}
	seed := uint64(1)
	for ; seed <= 12 && len(need) > 0; seed++ {
		var got [][]string
		synctest.Test(t, func(t *testing.T) {
			cfg := Config{Nodes: 5, Clients: 3, Duration: 4 * time.Second, Quiet: 2 * time.Second, Record: true}
			got = Run(seed, cfg).Recorded
		})
		got = got[:min(len(got), 1500)]
		rec = append(rec, got...)
		for _, args := range got { // what is replayed, not what was cut off
			delete(need, scriptOf(args))
		}
	}
	rec = append(rec, extraCommands(rec)...)
	srv := redistest.StartN(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The simulated node's clock reads, for each command, the redis-server's own clock
	// just before it ran it (TIME, sent with the command in one pipeline: the server runs
	// both in one go): a key expiring during the replay expires for both between the same
	// two commands, even one that lapses within the round trip (a readers' turn of 10 ms).
	var at int64
	sim := NewServer("sim", func() int64 { return at }, strings.Repeat("ab", 20))
	sess := sim.NewSession()
	seen := map[string]int{}
	bad := 0
	for i, args := range rec {
		switch strings.ToUpper(args[0]) {
		case "SUBSCRIBE", "UNSUBSCRIBE", "HELLO":
			continue // pub/sub mode and the handshake: below
		}
		start := time.Now()
		var now *redis.TimeCmd
		var cmd *redis.Cmd
		_, _ = rc.Pipelined(ctx, func(p redis.Pipeliner) error {
			now, cmd = p.Time(ctx), p.Do(ctx, toAny(args)...)
			return nil
		})
		real := toReply(cmd.Result())
		rtt := time.Since(start)
		if now.Err() != nil {
			t.Fatalf("TIME: %v", now.Err())
		}
		at = now.Val().UnixMicro()
		before := copyData(sim.data)
		got := sess.Exec(args)[0]
		slack := rtt + 5*time.Millisecond
		seen[scriptOf(args)]++
		msg := agree(args, real, got, slack)
		// Redis judges a key's expiry by the time it takes when the command (or script)
		// starts, which may fall in the millisecond before or after the TIME read with
		// it (a loaded machine): a key lapsing in that millisecond goes either way. Run
		// the command on the neighbouring milliseconds before calling it a difference,
		// and keep the simulated node's state of the run that agreed (or of the first).
		for _, d := range []int64{-1000, 1000} {
			if msg == "" {
				break
			}
			sim.data = copyData(before)
			at = now.Val().UnixMicro() + d
			if g := sess.Exec(args)[0]; agree(args, real, g, slack) == "" {
				got, msg = g, ""
			}
		}
		if msg != "" {
			sim.data, at = before, now.Val().UnixMicro()
			got = sess.Exec(args)[0]
		}
		if msg != "" {
			bad++
			if bad <= 10 {
				t.Errorf("command %d %s: %s\n  redis-server: %s\n  simulated:    %s", i, traceArgs(args), msg, real, got)
			}
		}
	}
	for _, s := range scriptNames {
		if seen[s] == 0 {
			t.Errorf("the replay sent no %s", s)
		}
	}
	t.Logf("%d commands replayed (seeds 1 to %d), by kind: %v", len(rec), seed-1, seen)
	checkPubSub(t, srv.Addr())
}

// scriptNames are what scriptOf calls the client's scripts and commands; each must be
// replayed at least once.
var scriptNames = []string{"acquire", "shared acquire", "shared release", "renewal", "release",
	"force read", "force release", "announce", "digests", "probe", "fencing commit", "re-take", "seq marker", "INFO", "GET", "PTTL", "ZCARD"}

// scriptOf names a recorded command by its script's first line.
func scriptOf(args []string) string {
	cmd := strings.ToUpper(args[0])
	src := ""
	switch cmd {
	case "EVAL":
		src = args[1]
	case "EVALSHA":
		if v, ok := sources.Load(strings.ToLower(args[1])); ok {
			src = v.(string)
		}
	default:
		return cmd
	}
	for name, re := range scriptMarks {
		if re.MatchString(src) {
			return name
		}
	}
	return cmd + " (unknown script)"
}

var scriptMarks = map[string]*regexp.Regexp{
	"acquire":        regexp.MustCompile(`^\s*if not redis.call\('SET', KEYS\[1\], ARGV\[1\], 'NX'`),
	"shared acquire": regexp.MustCompile(`^\s*local cur = redis.pcall\('GET', KEYS\[1\]\)\nif type\(cur\) == 'table' or \(cur and`),
	"shared release": regexp.MustCompile(`^\s*if redis.pcall\('ZREM'`),
	"renewal":        regexp.MustCompile(`^\s*local n = #ARGV / 3`),
	"release":        regexp.MustCompile(`^\s*if redis.pcall\('GET', KEYS\[1\]\) == ARGV\[1\] then\n  redis.call\('DEL'`),
	"force read":     regexp.MustCompile(`^\s*local function held\(k\)[\s\S]*\nlocal out = `),
	"force release":  regexp.MustCompile(`^\s*local function held\(k\)[\s\S]*\nlocal function gone\(`),
	"announce":       regexp.MustCompile(`^\s*local cur = redis.pcall\('GET', KEYS\[1\]\)\ncur = `),
	"digests":        regexp.MustCompile(`redis.sha1hex`),
	"probe":          regexp.MustCompile(`^\s*local bad = \{\}`),
	"fencing commit": regexp.MustCompile(`^\s*if ARGV\[4\] == '1' then\n  local sc = redis.pcall\('ZSCORE'`),
	"re-take":        regexp.MustCompile(`^\s*local n = #KEYS - 1\nlocal set = 0`),
	"seq marker":     regexp.MustCompile(`^local sq = \(tonumber\(redis.call\('GET', KEYS\[1\]\)\) or 0\) \+ 1`),
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// extraCommands are commands the client sends that a schedule may not: Inspect's reads,
// a commit, a re-take and a force release by hand (the scripts' texts come from the
// schedule's EVALs, or from the digests' request).
func extraCommands(rec [][]string) [][]string {
	src := func(name string) string {
		var out string
		sources.Range(func(_, v any) bool {
			if scriptMarks[name].MatchString(v.(string)) {
				out = v.(string)
				return false
			}
			return true
		})
		// Or from the digests' request, which carries every script's text: a script the
		// schedules never ran (a fencing commit is rare) is still known.
		for _, args := range rec {
			for _, a := range args {
				if out == "" && len(a) > 40 && scriptMarks[name].MatchString(a) {
					out = a
				}
			}
		}
		return out
	}
	var out [][]string
	// The digests' request (transport's digestScript), in case this process learned them
	// before the schedules above ran.
	out = append(out, []string{"eval", "\nlocal r = {}\nfor i = 1, #ARGV do r[i] = redis.sha1hex(ARGV[i]) end\nreturn r", "0", "return 1", "x"})
	out = append(out, []string{"set", "x:k", "v1", "px", "5000"})
	out = append(out, []string{"get", "x:k"}, []string{"pttl", "x:k"}, []string{"zcard", "x:k\x00readers"}, []string{"pttl", "x:none"})
	if s := src("fencing commit"); s != "" {
		out = append(out, []string{"eval", s, "3", "x:k", "x:k\x00fence", "x:k\x00readers", "v1", "123", "60000", "0"})
		out = append(out, []string{"eval", s, "3", "x:k", "x:k\x00fence", "x:k\x00readers", "v2", "456", "60000", "0"})
		out = append(out, []string{"get", "x:k\x00fence"})
	}
	if s := src("re-take"); s != "" {
		out = append(out, []string{"eval", s, "2", "x:k", "x:k2", "v1", "v2", "5000", "5000"})
		out = append(out, []string{"get", "x:k2"})
	}
	if s := src("renewal"); s != "" {
		out = append(out, []string{"eval", s, "1", "x:wrong", "v", "1000", "0"})
		out = append(out, []string{"zadd", "x:z", "1", "m"})
		out = append(out, []string{"eval", s, "1", "x:z", "v", "1000", "0"}) // WRONGTYPE under pcall: someone else's
	}
	// A force release of a key of another type under the lock's name ("x": WRONGTYPE).
	fk := []string{"x:f", "x:f\x00writer", "x:f\x00readturn", "x:f\x00readers"}
	out = append(out, []string{"zadd", "x:f", "1", "m"})
	if s := src("force read"); s != "" {
		out = append(out, append([]string{"eval", s, "4"}, fk...))
	}
	if s := src("force release"); s != "" {
		out = append(out, append(append([]string{"eval", s, "4"}, fk...), "x:f\x00released", "sx", "", "", "0"))
		out = append(out, append(append([]string{"eval", s, "4"}, fk...), "x:f\x00released", "x", "", "", "0"))
		out = append(out, []string{"zcard", "x:f"})
	}
	return out
}

// infoFields are the INFO fields the client reads, and the replication fields the
// simulated nodes report (replication.go): each must be in both replies or in neither.
var infoFields = []string{"run_id", "uptime_in_seconds", "evicted_keys", "maxmemory", "maxmemory_policy",
	"role", "connected_slaves", "master_replid", "master_repl_offset"}

// agree compares a real reply with the simulated one; "" when they agree.
func agree(args []string, real, got reply, slack time.Duration) string {
	cmd := strings.ToUpper(args[0])
	if cmd == "INFO" {
		for _, f := range infoFields {
			rv, gv := infoField(real.s, f), infoField(got.s, f)
			if (rv == "") != (gv == "") {
				return "INFO field " + f + " present in one only"
			}
			if f == "run_id" && len(gv) != 40 {
				return "run_id not 40 characters"
			}
		}
		return ""
	}
	if cmd == "TIME" {
		return agreeTime(real, got, slack)
	}
	if scriptOf(args) == "force read" {
		sortEntries(real)
		sortEntries(got)
	}
	return agreeValue(real, got, slack)
}

// sortEntries puts the reader entries of a force release's read ({lock, mark, turn, n,
// n entries, places...}) in one order: ZRANGE orders them by expiry, which each side
// reads from its own clock, so two entries a millisecond apart may come in either order.
func sortEntries(r reply) {
	if r.kind != '*' || len(r.arr) < 4 || r.arr[3].kind != ':' || int64(len(r.arr)) < 4+r.arr[3].i {
		return
	}
	e := r.arr[4 : 4+r.arr[3].i]
	sort.Slice(e, func(i, j int) bool { return e[i].s < e[j].s })
}

func agreeValue(real, got reply, slack time.Duration) string {
	if real.kind == '$' && got.kind == '+' {
		got.kind = '$' // go-redis's Do reads a status reply as a string
	}
	if real.kind != got.kind {
		return fmt.Sprintf("reply kinds differ (%q, %q)", real.kind, got.kind)
	}
	switch real.kind {
	case '-':
		if strings.Fields(real.s)[0] != strings.Fields(got.s)[0] {
			return "error codes differ"
		}
	case ':':
		if real.i != got.i && !closeNumbers(float64(real.i), float64(got.i), slack) {
			return "integers differ"
		}
	case '$':
		if real.s != got.s && !closeStrings(real.s, got.s, slack) {
			return "strings differ"
		}
	case '*':
		if len(real.arr) != len(got.arr) {
			return "array lengths differ"
		}
		for i := range real.arr {
			if m := agreeValue(real.arr[i], got.arr[i], slack); m != "" {
				return fmt.Sprintf("element %d: %s", i, m)
			}
		}
	}
	return ""
}

// closeNumbers: values read from the clock (ms or µs since the epoch, or a PTTL) may
// differ by the replay's time.
func closeNumbers(a, b float64, slack time.Duration) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	switch {
	case a > 1e14: // µs since the epoch (tokens, counters)
		return d <= float64(slack.Microseconds())
	case a > 1e11: // ms since the epoch (reader entries, marker times)
		return d <= float64(slack.Milliseconds())
	default: // a PTTL
		return d <= float64(slack.Milliseconds())
	}
}

// closeStrings: numbers as strings, or a marker "mark/run_id:ms" (each server's own
// run_id, which differ: both must be one, 40 characters).
func closeStrings(a, b string, slack time.Duration) bool {
	if x, err1 := strconv.ParseFloat(a, 64); err1 == nil {
		y, err2 := strconv.ParseFloat(b, 64)
		return err2 == nil && closeNumbers(x, y, slack)
	}
	ap, as, ok1 := strings.Cut(a, ":")
	bp, bs, ok2 := strings.Cut(b, ":")
	if !ok1 || !ok2 || !closeStrings(as, bs, slack) {
		return false
	}
	am, ar, okA := strings.Cut(ap, "/")
	bm, br, okB := strings.Cut(bp, "/")
	if okA || okB {
		return okA && okB && am == bm && len(ar) == 40 && len(br) == 40
	}
	return ap == bp
}

func agreeTime(real, got reply, slack time.Duration) string {
	if len(real.arr) != 2 || len(got.arr) != 2 {
		return "TIME is not two values"
	}
	at := func(r reply) float64 {
		s, _ := strconv.ParseFloat(r.arr[0].s, 64)
		u, _ := strconv.ParseFloat(r.arr[1].s, 64)
		return s*1e6 + u
	}
	if !closeNumbers(at(real), at(got), slack) {
		return "clocks differ"
	}
	return ""
}

func infoField(info, f string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, f+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// toReply turns go-redis's decoding of a RESP2 reply back into a reply.
func toReply(v any, err error) reply {
	if errors.Is(err, redis.Nil) {
		return nilReply
	}
	if err != nil {
		return errReply(err.Error())
	}
	switch v := v.(type) {
	case int64:
		return integer(v)
	case string:
		return bulk(v)
	case []any:
		out := make([]reply, len(v))
		for i, e := range v {
			out[i] = toReply(e, nil)
		}
		return array(out...)
	case nil:
		return nilReply
	case redis.Error:
		return errReply(v.Error())
	}
	return errReply(fmt.Sprintf("ERR unexpected %T", v))
}

func toAny(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// checkPubSub: subscribe, publish, unsubscribe, alike on both.
func checkPubSub(t *testing.T, addr string) {
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	ps := rc.Subscribe(ctx, "ch")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := rc.Publish(ctx, "ch", "hi").Result()
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sim := NewServer("sim", func() int64 { return time.Now().UnixMicro() }, strings.Repeat("ab", 20))
	var pushed []reply
	sim.push = func(_ *Session, r reply) { pushed = append(pushed, r) }
	sub, pub := sim.NewSession(), sim.NewSession()
	if r := sub.Exec([]string{"SUBSCRIBE", "ch"}); len(r) != 1 || r[0].String() != `["subscribe", "ch", 1]` {
		t.Errorf("SUBSCRIBE: %v", r)
	}
	if r := pub.Exec([]string{"PUBLISH", "ch", "hi"}); r[0].i != n {
		t.Errorf("PUBLISH: simulated %v, redis-server %d", r[0], n)
	}
	if len(pushed) != 1 || pushed[0].String() != fmt.Sprintf(`["message", %q, %q]`, msg.Channel, msg.Payload) {
		t.Errorf("message: %v, redis-server %s %s", pushed, msg.Channel, msg.Payload)
	}
	if r := sub.Exec([]string{"PING"}); r[0].String() != `["pong", ""]` {
		t.Errorf("PING while subscribed: %v", r)
	}
	if r := sub.Exec([]string{"GET", "x"}); !r[0].isErr() {
		t.Errorf("GET while subscribed: %v", r)
	}
	if r := sub.Exec([]string{"UNSUBSCRIBE", "ch"}); r[0].String() != `["unsubscribe", "ch", 0]` {
		t.Errorf("UNSUBSCRIBE: %v", r)
	}
}
