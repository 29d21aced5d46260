package redlock

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Scripts run by their digest (EVALSHA), with the digest computed by Redis, never here.
//
// Redis names a cached script by the SHA-1 of its text. go-redis's NewScript computes it
// in Go at package init, which panics in a binary run with GODEBUG=fips140=only (SHA-1 is
// not a FIPS 140 approved hash): every Caddy built with this plugin would refuse to start,
// even `caddy version`. go-redis's NewScriptServerSHA asks SCRIPT LOAD instead, but the
// ACL line in docs/connecting.md grants EVAL and EVALSHA, not SCRIPT LOAD (an ACL user would then pay
// a refused SCRIPT LOAD and an EVAL on every call).
//
// So the digests come from Lua's redis.sha1hex, through EVAL, which the ACL line grants:
// digestScript returns the digest of every script text it is given, in one call that
// rides in the pipeline a new connection already sends (node.onConnect), so learning
// them costs no round trip. The digest of a text is the same on every server (it is the
// script's name in the EVALSHA protocol), so the first node to answer teaches the whole
// process: commands are then built once per round and shared by every node (batcher.go).
//
// Until a digest is known a script goes out as EVAL with its text (one round trip, and
// the node caches it). A node that answers NOSCRIPT (it restarted, SCRIPT FLUSH) gets
// the call again as EVAL, which caches the script there for the next EVALSHA: the
// fallback needs nothing beyond EVAL either.

// script is a Lua script of the client, with what the ACL hints say about it.
type script struct {
	name     string   // what ACL hints call it ("the acquire script")
	commands []string // the Redis commands it runs (ACL hints)
	src      string
	sha      atomic.Pointer[string] // its digest, as Redis computed it; nil until learned
}

func newScript(src string) *script { return &script{src: src} }

// about names s and the commands it runs (for the scripts table).
func (s *script) about(name string, commands ...string) *script {
	s.name, s.commands = name, commands
	return s
}

// digest is the script's digest, or "" while no node has told it.
func (s *script) digest() string {
	if p := s.sha.Load(); p != nil {
		return *p
	}
	return ""
}

// run runs the script on one node by itself (not batched): EVALSHA once the digest is
// known, EVAL with the text when it is not or the node answered NOSCRIPT.
func (s *script) run(ctx context.Context, c redis.Scripter, keys []string, argv ...any) *redis.Cmd {
	if sha := s.digest(); sha != "" {
		r := c.EvalSha(ctx, sha, keys, argv...)
		if !isNoScript(r.Err()) {
			return r
		}
	}
	return c.Eval(ctx, s.src, keys, argv...)
}

// isNoScript tells a node's NOSCRIPT answer (go-redis may have turned it into
// redis.ErrNoScript).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// scripts are all the client's scripts run by digest, with what ACL hints say of them:
// their names and the Redis commands they run. announceScript is not among them: it
// always goes as EVAL (node.announce).
var scripts = []*script{
	acquireScript.about("acquire", "GET", "PTTL", "SET", "DEL", "TIME"),
	readAcquireScript.about("shared acquire", "GET", "PTTL", "SET", "DEL", "TIME", "ZREMRANGEBYSCORE", "ZADD", "ZRANGE", "PEXPIRE"),
	readReleaseScript.about("shared release", "GET", "SET", "DEL", "TIME", "ZREM", "ZREMRANGEBYSCORE", "ZRANGE", "PEXPIRE", "PUBLISH"),
	commitScript.about("fencing commit", "GET", "SET", "PEXPIRE", "ZSCORE", "TIME"),
	extendScript.about("renewal", "GET", "PEXPIRE", "PTTL", "TIME", "ZSCORE", "ZADD"),
	retakeScript.about("re-take", "SET"),
	releaseScript.about("release", "GET", "DEL", "SET", "PUBLISH"),
	forceReleaseScript.about("force release", "DEL", "PUBLISH"),
	probeScript.about("permission probe", probeCommands...),
}

// scriptsBySrc finds a script from the text an EVAL sent (ACL hints).
var scriptsBySrc = func() map[string]*script {
	m := make(map[string]*script, len(scripts))
	for _, s := range scripts {
		m[s.src] = s
	}
	return m
}()

// scriptByDigest finds a script from the digest an EVALSHA sent (ACL hints); nil when
// the digest is none of ours.
func scriptByDigest(sha string) *script {
	for _, s := range scripts {
		if d := s.digest(); d != "" && d == sha {
			return s
		}
	}
	return nil
}

// digestScript returns redis.sha1hex of each ARGV: the digests under which the node
// caches those texts. It runs no command, so any user allowed EVAL may run it.
const digestScript = `
local r = {}
for i = 1, #ARGV do r[i] = redis.sha1hex(ARGV[i]) end
return r`

// learnDigests queues digestScript for the scripts whose digest is not known yet, or
// returns nil when every digest is known.
func learnDigests(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	var texts []any
	for _, s := range scripts {
		if s.digest() == "" {
			texts = append(texts, s.src)
		}
	}
	if len(texts) == 0 {
		return nil
	}
	return p.Eval(ctx, digestScript, nil, texts...)
}

// noteDigests keeps the digests a node answered to learnDigests. The texts are matched
// again in the order learnDigests sent them (it sends only unknown ones, and a digest
// once known is never forgotten, so a concurrent learner can only have sent more). An
// answer that is not one digest per text, each 40 lowercase hex digits, is ignored: the
// scripts then keep going as EVAL, and the next new connection asks again.
func noteDigests(cmd *redis.Cmd) {
	if cmd == nil || cmd.Err() != nil {
		return
	}
	got, err := cmd.StringSlice()
	if err != nil {
		return
	}
	sent := cmd.Args()[3:] // eval, script, numkeys (0), texts...
	if len(got) != len(sent) {
		return
	}
	for _, d := range got {
		if !isDigest(d) {
			return
		}
	}
	for i, d := range got {
		if s := scriptsBySrc[sent[i].(string)]; s != nil {
			s.sha.CompareAndSwap(nil, &d)
		}
	}
}

// isDigest reports whether d looks like a SHA-1 hex digest as Redis writes it.
func isDigest(d string) bool {
	if len(d) != 40 {
		return false
	}
	for _, r := range d {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}
