package transport

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
// rides in the pipeline a new connection already sends (Node.onConnect), so learning
// them costs no round trip. The digest of a text is the same on every server (it is the
// script's name in the EVALSHA protocol), so the first node to answer teaches the whole
// process: commands are then built once per round and shared by every node (batcher.go).
//
// Until a digest is known a script goes out as EVAL with its text (one round trip, and
// the node caches it). A node that answers NOSCRIPT (it restarted, SCRIPT FLUSH) gets
// the call again as EVAL, which caches the script there for the next EVALSHA: the
// fallback needs nothing beyond EVAL either.

// Script is a Lua script run by digest, with what the ACL hints say about it.
type Script struct {
	name     string   // what ACL hints call it ("the acquire script")
	commands []string // the Redis commands it runs (ACL hints)
	src      string
	cleanup  bool                   // AsCleanup
	sha      atomic.Pointer[string] // its digest, as Redis computed it; nil until learned
}

// NewScript makes the script of a Lua text.
func NewScript(src string) *Script { return &Script{src: src} }

// About names s and the commands it runs (for ACL hints).
func (s *Script) About(name string, commands ...string) *Script {
	s.name, s.commands = name, commands
	return s
}

// AsCleanup marks s as a cleanup that may run twice (a compare-and-delete): in a batch
// where an earlier call met NOSCRIPT, s is sent again after that call's retry, so it
// still runs after what it cleans up (batcher.go, noScriptRetry).
func (s *Script) AsCleanup() *Script {
	s.cleanup = true
	return s
}

// IsCleanup reports whether s was marked AsCleanup.
func (s *Script) IsCleanup() bool { return s.cleanup }

// Name is what ACL hints call the script.
func (s *Script) Name() string { return s.name }

// Src is the script's Lua text.
func (s *Script) Src() string { return s.src }

// Digest is the script's digest, or "" while no node has told it.
func (s *Script) Digest() string { return s.digest() }

func (s *Script) digest() string {
	if p := s.sha.Load(); p != nil {
		return *p
	}
	return ""
}

// ForgetDigest makes the script go as EVAL again until a new connection learns its
// digest (tests: a process that never learned it).
func (s *Script) ForgetDigest() { s.sha.Store(nil) }

// Run runs the script on one node by itself (not batched), unrecorded: EVALSHA once the
// digest is known, EVAL with the text when it is not or the node answered NOSCRIPT.
func (s *Script) Run(ctx context.Context, n *Node, keys []string, argv ...any) Reply {
	if sha := s.digest(); sha != "" {
		r := n.client.EvalSha(ctx, sha, keys, argv...)
		if !isNoScript(r.Err()) {
			return replyOf(r)
		}
	}
	return replyOf(n.client.Eval(ctx, s.src, keys, argv...))
}

// isNoScript tells a node's NOSCRIPT answer (go-redis may have turned it into
// redis.ErrNoScript).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Scripts are the scripts a process runs by digest (Config.Scripts): the owner's, and the
// permission probe's (probe.go).
type Scripts struct {
	list  []*Script
	bySrc map[string]*Script // what an EVAL sent (ACL hints, noteDigests)
}

// NewScripts gathers the owner's scripts, each named with About.
func NewScripts(list ...*Script) *Scripts {
	list = append(list[:len(list):len(list)], probeScript)
	m := make(map[string]*Script, len(list))
	for _, s := range list {
		m[s.src] = s
	}
	return &Scripts{list: list, bySrc: m}
}

// List returns every script of the set, the probe's last.
func (ss *Scripts) List() []*Script { return ss.list }

// byDigest finds a script from the digest an EVALSHA sent (ACL hints); nil when the
// digest is none of ours.
func (ss *Scripts) byDigest(sha string) *Script {
	for _, s := range ss.list {
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
func learnDigests(ctx context.Context, p redis.Pipeliner, ss *Scripts) *redis.Cmd {
	if ss == nil {
		return nil
	}
	var texts []any
	for _, s := range ss.list {
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
func noteDigests(cmd *redis.Cmd, ss *Scripts) {
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
		if s := ss.bySrc[sent[i].(string)]; s != nil {
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
