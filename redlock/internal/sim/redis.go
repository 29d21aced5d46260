package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// Server is one simulated Redis node: a keyspace of strings and sorted sets whose
// expiries run on the node's own clock, the commands and Lua scripting the lock client
// sends (the client's real scripts run here, through gopher-lua), pub/sub, INFO. It is
// single-threaded like Redis: the world calls it from its one event loop only. It
// knows nothing of the network; a Session is one client connection.
type Server struct {
	name    string
	clockUS func() int64 // the node's wall clock, µs (drift and offset are the world's)

	data     map[string]*value
	scripts  map[string]bool // digests this node has cached (EVAL, SCRIPT LOAD)
	runID    string
	startUS  int64
	evicted  int64
	channels map[string]map[*Session]bool
	nextID   int64
	lua      *lua.LState
	fns      map[*lua.FunctionProto]*lua.LFunction
	push     func(*Session, reply) // delivers a pub/sub message to a subscriber

	// mayEvict: the node runs with a maxmemory limit and an evicting policy
	// (volatile-ttl), as INFO says; only such nodes are given eviction faults.
	mayEvict bool

	inScript bool
	nowMS    int64 // the command's time snapshot (a script's start), ms

	// Replication (replication.go): the replication id, a new one per process and on
	// promotion, and the offset, the bytes of write commands it ran (as a master counts
	// what it sends its replicas). hideRunID: INFO leaves run_id out (a proxy, a managed
	// service).
	replID     string
	replOffset int64
	hideRunID  bool
}

type value struct {
	s       string
	z       map[string]float64 // a sorted set; nil for a string
	exp     int64              // ms of the node's clock; 0: none
	touched int64              // ms, last access (eviction by LRU)
}

// Session is one client connection's state on the node.
type Session struct {
	srv  *Server
	id   int64
	subs map[string]bool // subscribed channels: the connection is in pub/sub mode
	gone bool
}

// NewServer makes a node with an empty keyspace.
func NewServer(name string, clockUS func() int64, runID string) *Server {
	s := &Server{name: name, clockUS: clockUS}
	s.reset(runID)
	return s
}

// reset empties the node as a restart without persistence does: keys, scripts,
// subscribers; a new run_id and start.
func (s *Server) reset(runID string) {
	s.data = map[string]*value{}
	s.scripts = map[string]bool{}
	s.channels = map[string]map[*Session]bool{}
	s.runID = runID
	s.startUS = s.clockUS()
	s.evicted = 0
	s.replID = sha1hex("repl/" + runID)
	s.replOffset = 0
}

// NewSession opens a connection's state.
func (s *Server) NewSession() *Session {
	s.nextID++
	return &Session{srv: s, id: s.nextID}
}

// Close ends a session: its subscriptions go.
func (ss *Session) Close() {
	if ss.gone {
		return
	}
	ss.gone = true
	for ch := range ss.subs {
		ss.srv.unsub(ss, ch)
	}
}

func (s *Server) unsub(ss *Session, ch string) {
	if m := s.channels[ch]; m != nil {
		delete(m, ss)
		if len(m) == 0 {
			delete(s.channels, ch)
		}
	}
	delete(ss.subs, ch)
}

// now returns the node's clock in ms: the snapshot while a script runs.
func (s *Server) now() int64 {
	if s.inScript {
		return s.nowMS
	}
	return s.clockUS() / 1000
}

// lookup returns the live value of key, deleting it when expired (Redis: now > exp).
func (s *Server) lookup(key string) *value {
	v := s.data[key]
	if v == nil {
		return nil
	}
	now := s.now()
	if v.exp != 0 && now > v.exp {
		delete(s.data, key)
		return nil
	}
	v.touched = now
	return v
}

const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

func errArgs(cmd string) reply {
	return errReply("ERR wrong number of arguments for '" + strings.ToLower(cmd) + "' command")
}

// Exec runs one command from a connection and returns its replies (several for
// SUBSCRIBE and UNSUBSCRIBE of several channels).
func (ss *Session) Exec(args []string) []reply {
	if len(args) == 0 {
		return []reply{errReply("ERR empty command")}
	}
	cmd := strings.ToUpper(args[0])
	if len(ss.subs) > 0 {
		switch cmd {
		case "SUBSCRIBE", "UNSUBSCRIBE", "PING", "QUIT", "RESET":
		default:
			return []reply{errReply(fmt.Sprintf("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", strings.ToLower(args[0])))}
		}
	}
	switch cmd {
	case "SUBSCRIBE":
		if len(args) < 2 {
			return []reply{errArgs(cmd)}
		}
		var out []reply
		for _, ch := range args[1:] {
			if ss.subs == nil {
				ss.subs = map[string]bool{}
			}
			if !ss.subs[ch] {
				ss.subs[ch] = true
				m := ss.srv.channels[ch]
				if m == nil {
					m = map[*Session]bool{}
					ss.srv.channels[ch] = m
				}
				m[ss] = true
			}
			out = append(out, array(bulk("subscribe"), bulk(ch), integer(int64(len(ss.subs)))))
		}
		return out
	case "UNSUBSCRIBE":
		chs := args[1:]
		if len(chs) == 0 {
			for ch := range ss.subs {
				chs = append(chs, ch)
			}
			sort.Strings(chs)
			if len(chs) == 0 {
				return []reply{array(bulk("unsubscribe"), nilReply, integer(0))}
			}
		}
		var out []reply
		for _, ch := range chs {
			ss.srv.unsub(ss, ch)
			out = append(out, array(bulk("unsubscribe"), bulk(ch), integer(int64(len(ss.subs)))))
		}
		return out
	case "PING":
		if len(ss.subs) > 0 {
			msg := ""
			if len(args) > 1 {
				msg = args[1]
			}
			return []reply{array(bulk("pong"), bulk(msg))}
		}
	case "HELLO":
		if len(args) > 1 && args[1] != "2" {
			return []reply{errReply("NOPROTO unsupported protocol version")}
		}
		return []reply{array(bulk("server"), bulk("redis"), bulk("version"), bulk("7.0.15"), bulk("proto"), integer(2),
			bulk("id"), integer(ss.id), bulk("mode"), bulk("standalone"), bulk("role"), bulk("master"), bulk("modules"), array())}
	}
	ss.srv.nowMS = ss.srv.clockUS() / 1000
	r := ss.srv.command(args, false)
	switch cmd {
	case "SET", "DEL", "PEXPIRE", "ZADD", "ZREM", "ZREMRANGEBYSCORE", "EVAL", "EVALSHA", "FLUSHALL", "FLUSHDB":
		// What a master would send its replicas (about: the offset only grows with writes).
		for _, a := range args {
			ss.srv.replOffset += int64(len(a))
		}
	}
	return []reply{r}
}

// command runs one command of the keyspace, from a connection or from a script.
func (s *Server) command(args []string, script bool) reply {
	cmd := strings.ToUpper(args[0])
	a := args[1:]
	need := func(n int) bool { return len(a) == n }
	atLeast := func(n int) bool { return len(a) >= n }
	switch cmd {
	case "PING":
		if len(a) == 1 {
			return bulk(a[0])
		}
		return reply{kind: '+', s: "PONG"}
	case "ECHO":
		if !need(1) {
			return errArgs(cmd)
		}
		return bulk(a[0])
	case "GET":
		if !need(1) {
			return errArgs(cmd)
		}
		v := s.lookup(a[0])
		switch {
		case v == nil:
			return nilReply
		case v.z != nil:
			return errReply(wrongType)
		}
		return bulk(v.s)
	case "SET":
		return s.set(a)
	case "INCR":
		return s.incr(a)
	case "DEL":
		if !atLeast(1) {
			return errArgs(cmd)
		}
		n := int64(0)
		for _, k := range a {
			if s.lookup(k) != nil {
				delete(s.data, k)
				n++
			}
		}
		return integer(n)
	case "PEXPIRE":
		if !need(2) {
			return errArgs(cmd)
		}
		ms, err := strconv.ParseInt(a[1], 10, 64)
		if err != nil {
			return errReply("ERR value is not an integer or out of range")
		}
		v := s.lookup(a[0])
		if v == nil {
			return integer(0)
		}
		when := s.now() + ms
		if when <= s.now() {
			delete(s.data, a[0])
			return integer(1)
		}
		v.exp = when
		return integer(1)
	case "PTTL":
		if !need(1) {
			return errArgs(cmd)
		}
		v := s.lookup(a[0])
		switch {
		case v == nil:
			return integer(-2)
		case v.exp == 0:
			return integer(-1)
		}
		return integer(max(v.exp-s.now(), 0))
	case "TIME":
		us := s.clockUS()
		return array(bulk(strconv.FormatInt(us/1e6, 10)), bulk(strconv.FormatInt(us%1e6, 10)))
	case "PUBLISH":
		if !need(2) {
			return errArgs(cmd)
		}
		subs := s.channels[a[0]]
		// In a fixed order: the world's deliveries must not depend on map order.
		list := make([]*Session, 0, len(subs))
		for ss := range subs {
			list = append(list, ss)
		}
		slices.SortFunc(list, func(x, y *Session) int { return int(x.id - y.id) })
		for _, ss := range list {
			if s.push != nil {
				s.push(ss, array(bulk("message"), bulk(a[0]), bulk(a[1])))
			}
		}
		return integer(int64(len(list)))
	case "ZADD":
		return s.zadd(a)
	case "ZRANGE":
		return s.zrange(a)
	case "ZREMRANGEBYSCORE":
		if !need(3) {
			return errArgs(cmd)
		}
		lo, ok1 := parseScore(a[1])
		hi, ok2 := parseScore(a[2])
		if !ok1 || !ok2 {
			return errReply("ERR min or max is not a float")
		}
		v := s.lookup(a[0])
		if v == nil {
			return integer(0)
		}
		if v.z == nil {
			return errReply(wrongType)
		}
		n := int64(0)
		for m, sc := range v.z {
			if sc >= lo && sc <= hi {
				delete(v.z, m)
				n++
			}
		}
		if len(v.z) == 0 {
			delete(s.data, a[0])
		}
		return integer(n)
	case "ZSCORE":
		if !need(2) {
			return errArgs(cmd)
		}
		v := s.lookup(a[0])
		if v == nil {
			return nilReply
		}
		if v.z == nil {
			return errReply(wrongType)
		}
		sc, ok := v.z[a[1]]
		if !ok {
			return nilReply
		}
		return bulk(formatScore(sc))
	case "ZREM":
		if !atLeast(2) {
			return errArgs(cmd)
		}
		v := s.lookup(a[0])
		if v == nil {
			return integer(0)
		}
		if v.z == nil {
			return errReply(wrongType)
		}
		n := int64(0)
		for _, m := range a[1:] {
			if _, ok := v.z[m]; ok {
				delete(v.z, m)
				n++
			}
		}
		if len(v.z) == 0 {
			delete(s.data, a[0])
		}
		return integer(n)
	case "ZCARD":
		if !need(1) {
			return errArgs(cmd)
		}
		v := s.lookup(a[0])
		if v == nil {
			return integer(0)
		}
		if v.z == nil {
			return errReply(wrongType)
		}
		return integer(int64(len(v.z)))
	case "INFO":
		return bulk(s.info())
	case "FLUSHALL", "FLUSHDB":
		if script {
			return errReply("ERR This Redis command is not allowed from script")
		}
		s.data = map[string]*value{}
		return okReply
	case "EVAL", "EVALSHA":
		if script {
			return errReply("ERR This Redis command is not allowed from script")
		}
		return s.eval(cmd == "EVALSHA", a)
	case "SCRIPT":
		if script || len(a) == 0 {
			return errArgs(cmd)
		}
		switch strings.ToUpper(a[0]) {
		case "FLUSH":
			s.scripts = map[string]bool{}
			return okReply
		case "LOAD":
			if len(a) != 2 {
				return errArgs(cmd)
			}
			sha := sha1hex(a[1])
			if _, err := compile(sha, a[1]); err != nil {
				return errReply("ERR Error compiling script (new function): " + err.Error())
			}
			s.scripts[sha] = true
			return bulk(sha)
		case "EXISTS":
			out := make([]reply, 0, len(a)-1)
			for _, sha := range a[1:] {
				if s.scripts[strings.ToLower(sha)] {
					out = append(out, integer(1))
				} else {
					out = append(out, integer(0))
				}
			}
			return array(out...)
		}
	case "SELECT":
		if need(1) && a[0] == "0" {
			return okReply
		}
		return errReply("ERR DB index is out of range")
	case "CLIENT":
		return okReply
	case "DBSIZE":
		return integer(int64(len(s.data)))
	case "REPLICAOF", "SLAVEOF":
		// Only NO ONE: the node is a master already (its replica is the world's:
		// replication.go), and stays one, as redis-server answers a master.
		if script {
			return errReply("ERR This Redis command is not allowed from script")
		}
		if need(2) && strings.EqualFold(a[0], "no") && strings.EqualFold(a[1], "one") {
			return okReply
		}
		if !need(2) {
			return errArgs(cmd)
		}
		return errReply("ERR the simulated node replicates from no one")
	}
	return errReply(fmt.Sprintf("ERR unknown command '%s', with args beginning with: ", args[0]))
}

// set is SET key value [NX|XX] [PX ms|EX s].
func (s *Server) set(a []string) reply {
	if len(a) < 2 {
		return errArgs("SET")
	}
	nx, xx := false, false
	var exp int64
	for i := 2; i < len(a); i++ {
		switch o := strings.ToUpper(a[i]); o {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "PX", "EX":
			if i+1 >= len(a) {
				return errReply("ERR syntax error")
			}
			n, err := strconv.ParseInt(a[i+1], 10, 64)
			if err != nil {
				return errReply("ERR value is not an integer or out of range")
			}
			if n <= 0 {
				return errReply("ERR invalid expire time in 'set' command")
			}
			if o == "EX" {
				n *= 1000
			}
			exp = s.now() + n
			i++
		default:
			return errReply("ERR syntax error")
		}
	}
	if nx && xx {
		return errReply("ERR syntax error")
	}
	cur := s.lookup(a[0])
	if (nx && cur != nil) || (xx && cur == nil) {
		return nilReply
	}
	s.data[a[0]] = &value{s: a[1], exp: exp, touched: s.now()}
	return okReply
}

func (s *Server) zadd(a []string) reply {
	if len(a) < 1 {
		return errArgs("ZADD")
	}
	key, rest, xx := a[0], a[1:], false
	for len(rest) > 0 && strings.EqualFold(rest[0], "XX") {
		xx, rest = true, rest[1:]
	}
	a = append([]string{key}, rest...)
	if len(a) < 3 || (len(a)-1)%2 != 0 {
		return errReply("ERR syntax error")
	}
	v := s.lookup(a[0])
	if v != nil && v.z == nil {
		return errReply(wrongType)
	}
	added := int64(0)
	for i := 1; i+1 < len(a); i += 2 {
		sc, ok := parseScore(a[i])
		if !ok {
			return errReply("ERR value is not a valid float")
		}
		if v == nil {
			if xx {
				continue
			}
			v = &value{z: map[string]float64{}, touched: s.now()}
			s.data[a[0]] = v
		}
		if _, ok := v.z[a[i+1]]; ok {
			v.z[a[i+1]] = sc
			continue
		}
		if xx {
			continue
		}
		v.z[a[i+1]] = sc
		added++
	}
	return integer(added)
}

func (s *Server) zrange(a []string) reply {
	if len(a) < 3 || len(a) > 4 {
		return errReply("ERR syntax error")
	}
	with := len(a) == 4
	if with && !strings.EqualFold(a[3], "WITHSCORES") {
		return errReply("ERR syntax error")
	}
	start, err1 := strconv.ParseInt(a[1], 10, 64)
	stop, err2 := strconv.ParseInt(a[2], 10, 64)
	if err1 != nil || err2 != nil {
		return errReply("ERR value is not an integer or out of range")
	}
	v := s.lookup(a[0])
	if v == nil {
		return array()
	}
	if v.z == nil {
		return errReply(wrongType)
	}
	members := sortedMembers(v.z)
	n := int64(len(members))
	if start < 0 {
		start = max(n+start, 0)
	}
	if stop < 0 {
		stop = n + stop
	}
	stop = min(stop, n-1)
	out := []reply{}
	for i := start; i <= stop; i++ {
		out = append(out, bulk(members[i]))
		if with {
			out = append(out, bulk(formatScore(v.z[members[i]])))
		}
	}
	return array(out...)
}

// sortedMembers orders a sorted set as Redis does: by score, then member.
func sortedMembers(z map[string]float64) []string {
	out := make([]string, 0, len(z))
	for m := range z {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if z[out[i]] != z[out[j]] {
			return z[out[i]] < z[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

func parseScore(s string) (float64, bool) {
	switch strings.ToLower(s) {
	case "-inf":
		return math.Inf(-1), true
	case "+inf", "inf":
		return math.Inf(1), true
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsNaN(f)
}

// formatScore is how Redis 7.0 writes a score in RESP2 (%.17g).
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// info is INFO's text: the fields the client reads, among others.
func (s *Server) info() string {
	now := s.clockUS()
	up := now/1e6 - s.startUS/1e6
	memory := "maxmemory:0\r\nmaxmemory_policy:noeviction\r\n"
	if s.mayEvict {
		memory = "maxmemory:104857600\r\nmaxmemory_policy:volatile-ttl\r\n"
	}
	runID := "run_id:" + s.runID + "\r\n"
	if s.hideRunID {
		runID = ""
	}
	return "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nprocess_id:1\r\n" +
		runID + "uptime_in_seconds:" + strconv.FormatInt(up, 10) + "\r\n" +
		"uptime_in_days:" + strconv.FormatInt(up/86400, 10) + "\r\n\r\n# Memory\r\n" + memory + "\r\n# Stats\r\n" +
		"evicted_keys:" + strconv.FormatInt(s.evicted, 10) + "\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n" +
		"master_replid:" + s.replID + "\r\nmaster_repl_offset:" + strconv.FormatInt(s.replOffset, 10) + "\r\n\r\n# Keyspace\r\n" +
		"db0:keys=" + strconv.Itoa(len(s.data)) + ",expires=0,avg_ttl=0\r\n"
}

func sha1hex(s string) string {
	if len(s) >= 256 { // a script's text: the same few, hashed on every EVAL
		if h, ok := scriptSHAs.Load(s); ok {
			return h.(string)
		}
	}
	h := sha1.Sum([]byte(s))
	sha := hex.EncodeToString(h[:])
	if len(s) >= 256 {
		scriptSHAs.Store(s, sha)
	}
	return sha
}

// scriptSHAs caches the digests of long texts (the client's scripts), process-wide: a
// map lookup costs a tenth of SHA-1 over a script of a few kilobytes.
var scriptSHAs sync.Map // text -> sha
