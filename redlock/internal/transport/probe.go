package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"log/slog"

	"github.com/redis/go-redis/v9"
)

// The permission probe: a node that answers INFO may still refuse what locks need (an
// ACL user without +time, a key pattern that misses the prefix, no SUBSCRIBE). Requests
// would then fail one by one with errors that name a script, not the missing grant. So
// once a node answers, the health loop runs every command the client uses, on a name
// under the prefix (so it is checked against the user's key and channel patterns too),
// and reports what was refused, naming the commands and the node: in the log, in the
// node's last error, and the node shows as down until the probe passes (it is retried
// every health check, so granting the permission is enough).

// probeCommands are the commands the scripts run; the probe script tries each with
// redis.pcall and returns the refused ones with their errors.
var probeCommands = []string{"SET", "GET", "PTTL", "PEXPIRE", "DEL", "PUBLISH", "TIME"}

// probeScript: KEYS[1] a probe key under the prefix, ARGV[1] a channel under the prefix.
// Returns {command, error, command, error, ...} for the refused commands.
var probeScript = NewScript(`
local bad = {}
local function try(name, ...)
  local r = redis.pcall(name, ...)
  if type(r) == 'table' and r.err then
    table.insert(bad, name)
    table.insert(bad, r.err)
  end
end
try('SET', KEYS[1], '1', 'PX', 1000)
try('GET', KEYS[1])
try('PTTL', KEYS[1])
try('PEXPIRE', KEYS[1], 1000)
try('DEL', KEYS[1])
try('PUBLISH', ARGV[1], 'probe')
try('TIME')
return bad
`).About("permission probe", probeCommands...)

// probeState is a node's probe outcome, kept out of Node's own fields.
type probeState struct {
	mu       sync.Mutex
	passed   bool
	logged   string    // problemKey of the node's current problem, "" when healthy
	loggedAt time.Time // when a problem was last logged
}

// relogAfter limits how often a node whose problem keeps changing form (a paused node
// times out in several ways) is logged again.
const relogAfter = time.Minute

// probe runs the permission probe on the node; nil when everything the client uses is
// allowed.
func (n *Node) probe(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name := n.cfg.ProbeName
	var missing []string
	// EVAL first (it caches the script), then EVALSHA: both are used.
	r, err := n.client.Eval(ctx, probeScript.src, []string{name}, name).StringSlice()
	if err != nil {
		return fmt.Errorf("permission probe: %w", err)
	}
	var details []string
	for i := 0; i+1 < len(r); i += 2 {
		missing = append(missing, strings.ToLower(r[i]))
		details = append(details, r[i]+": "+r[i+1])
	}
	// Before the digest is known (digest.go), a name no script has: NOSCRIPT then
	// says EVALSHA is allowed as well as running the script would.
	sha := probeScript.digest()
	if sha == "" {
		sha = strings.Repeat("0", 40)
	}
	if err := n.client.EvalSha(ctx, sha, []string{name}, name).Err(); err != nil && !isNoScript(err) {
		return fmt.Errorf("permission probe: %w", err)
	}
	if len(missing) > 0 {
		return &ConfigError{Kind: ConfigACL, Err: errors.New(strings.Join(details, "; ")),
			Hint: fmt.Sprintf("redis ACL: the user may not run %s on keys or channels under the prefix; grant the ACL SETUSER line in docs/connecting.md",
				strings.Join(missing, ", "))}
	}
	if err := n.probeSubscribe(ctx, name); err != nil {
		if strings.HasPrefix(err.Error(), "NOPERM") { // Redis's refusal (subscriptions bypass the hint hook)
			err = &ConfigError{Kind: ConfigACL, Hint: "redis ACL: the user may not subscribe to channels under the prefix; grant &<prefix>*", Err: err}
		}
		return fmt.Errorf("permission probe: SUBSCRIBE (release notices): %w", err)
	}
	return nil
}

// probeSubscribe subscribes to a channel under the prefix on a connection of its own
// and waits for the confirmation (or the refusal).
func (n *Node) probeSubscribe(ctx context.Context, channel string) error {
	ps := n.client.Subscribe(ctx)
	defer ps.Close()
	if err := ps.Subscribe(ctx, channel); err != nil {
		return err
	}
	msg, err := ps.Receive(ctx)
	if err != nil {
		return err
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		return fmt.Errorf("unexpected reply %T", msg)
	}
	return nil
}

// AfterCheck runs after each health check: it probes a node that answers until the
// probe passes, and logs a node's configuration problems (TLS, authentication, ACL; an
// unreachable node is the health check's business) once per distinct problem (at warn;
// a recovery at info; a problem that changes form is logged again after relogAfter).
// Called from the node's own health loop only (after Check).
func (n *Node) AfterCheck(ctx context.Context, timeout time.Duration) {
	if ctx.Err() != nil {
		return // closing: the check failed for that reason
	}
	st := n.Facts()
	p := &n.probed
	p.mu.Lock()
	passed := p.passed
	p.mu.Unlock()
	var problem error
	if !st.Up {
		if configProblem(st.LastErr) {
			problem = st.LastErr
		}
		p.mu.Lock() // probe again once it answers: it may be another server now
		p.passed = false
		p.mu.Unlock()
	} else if !passed {
		err := n.probe(ctx, timeout)
		if ctx.Err() != nil {
			return // closing
		}
		if err != nil && !configProblem(err) {
			return // slow or unreachable: not a verdict on permissions; probe again next check
		}
		if err != nil {
			// Not through record: the Observer would count a node that answers INFO
			// as failing and recovering at every check.
			problem = err
			n.mu.Lock()
			n.up = false
			n.errors++
			n.lastErr, n.lastErrAt = err, time.Now()
			n.mu.Unlock()
		}
		p.mu.Lock()
		p.passed = err == nil
		p.mu.Unlock()
	}
	key := problemKey(problem)
	now := time.Now()
	p.mu.Lock()
	prev := p.logged
	p.logged = key
	warn := problem != nil && (prev == "" || key != prev && now.Sub(p.loggedAt) >= relogAfter)
	if warn {
		p.loggedAt = now
	}
	p.mu.Unlock()
	switch {
	case warn:
		n.cfg.Logger.Warn("redis node unusable", slog.String("node", n.addr), slog.String("error", problem.Error()))
	case problem == nil && prev != "":
		n.cfg.Logger.Info("redis node usable again", slog.String("node", n.addr))
	}
}

// problemKey is what makes two problems the same for logging: a configuration problem's
// kind and hint (the wrapped error may differ by connection: a reset or an alert), else
// the message without digits (ports, counts).
func problemKey(problem error) string {
	if problem == nil {
		return ""
	}
	if ce, ok := errors.AsType[*ConfigError](problem); ok {
		return string(ce.Kind) + ": " + ce.Hint
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, problem.Error())
}

// configProblem tells a deployment mistake, which only the operator can fix, from a node
// that is down or slow: a *ConfigError (errhint.go).
func configProblem(err error) bool {
	_, ok := errors.AsType[*ConfigError](err)
	return ok
}
