// Package caddyredlock is a Caddy HTTP handler that serializes requests to a resource
// across Caddy instances with a Redlock on N independent Redis masters: the lock key is
// rendered from the request path, the lock is renewed while the next handler runs (also
// for long streamed responses), and released when it returns.
package caddyredlock

import (
	"fmt"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// This file holds the handler module (http.handlers.redlock): its JSON config
// (Handler, PathKey), Provision and Cleanup, and resolve, the one home of the options'
// defaults, ranges and cross-option rules, which turns a Handler into the settings a
// request reads.

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler serializes requests to a resource across Caddy instances: for each request it
// renders a lock key (a path template's key, or any placeholder), takes a Redlock on N
// independent Redis masters, runs the next handler while renewing the lock (also for
// long streamed responses and websockets), and releases it when that handler returns.
// A request whose lock cannot be renewed in time is cancelled, never left running
// unlocked.
//
// Every JSON field mirrors the Caddyfile option of the same name; zero values mean the
// documented default.
//
// Placeholders set for later handlers and logs:
//
// Placeholder | Description
// ------------|-------------
// `{http.redlock.key}` | the lock key (without prefix); several keys: in lock order, joined by a space; empty when the request is not locked
// `{http.redlock.mode}` | exclusive, shared or limit; empty when the request is not locked
// `{http.redlock.token}` | the fencing token (with fencing); several keys: key=token pairs in lock order, comma-separated
// `{http.redlock.wait_ms}` | how long the request waited for its lock, in ms
// `{http.redlock.path}` | the normalized request path the key was rendered from
// `{http.redlock.param.*}` | each capture of the matching path template, by name
type Handler struct {
	// Redis node URLs, one per independent master: redis://[user:pass@]host:port[/db],
	// rediss://... (TLS), unix://[user:pass@]/path/redis.sock[?db=N] or host:port (no
	// credentials without a scheme).
	// Placeholders such as {env.REDIS_PASS} are expanded at provision. Required.
	Redis []string `json:"redis,omitempty"`
	// TLS configures the rediss:// nodes (tls.go). Without it: system roots, each
	// node's host verified.
	TLS *TLS `json:"tls,omitempty"`
	// Paths are path templates, tried in order; the first match gives the key.
	Paths []PathKey `json:"paths,omitempty"`
	// Key is the key template. Without paths it applies to every request (default
	// {http.request.uri.path}, the normalized path); with paths it is the key for
	// requests no path template matches (without it those requests are not locked).
	// Every placeholder derived from the path ({http.request.uri.path.N}, .dir, .file,
	// {http.request.uri}, the orig_uri ones, ...) renders from the normalized path.
	Key string `json:"key,omitempty"`
	// Keys are several key templates in place of Key: a request holds all of them or
	// none, taken in sorted order (at most 16). Not together with Key.
	Keys []string `json:"keys,omitempty"`
	// Shared lists the methods (e.g. GET, HEAD) whose requests take their keys shared:
	// they run together, never while a request of another method holds a key, and a
	// waiting writer keeps new readers out. Default: none (every request exclusive).
	Shared []string `json:"shared,omitempty"`
	// Limit lets up to Limit requests hold a key at once, across all instances (a
	// distributed concurrency limit). Default 1: a mutex. Not together with Shared.
	Limit int `json:"limit,omitempty"`
	// CaseInsensitive lowercases the normalized path (and pattern literals), so
	// /Doc and /doc take the same lock.
	CaseInsensitive bool `json:"case_insensitive,omitempty"`
	// Prefix is prepended to every lock key in Redis. Default "redlock:".
	Prefix string `json:"prefix,omitempty"`
	// TTL is the lock validity per acquire or renewal. Default 10s.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// MaxTTL is the longest ttl any handler or client uses on these Redis nodes: a
	// restarted node does not vote for that long (plus drift), so that every lock it may
	// have lost has expired first. Set it to the same value on every instance and route
	// using the nodes. The nodes also remember the largest max_ttl announced to them, and
	// every instance follows that. Default: ttl; must be at least ttl.
	MaxTTL caddy.Duration `json:"max_ttl,omitempty"`
	// RenewInterval is how often a held lock is renewed. Default ttl/3.
	RenewInterval caddy.Duration `json:"renew_interval,omitempty"`
	// Wait is how long a request may wait for a busy key; 0 fails at once. Default 5s
	// when not given.
	Wait *caddy.Duration `json:"wait,omitempty"`
	// RetryDelay is [min] or [min, max]: the jittered delay between tries when no
	// release notice arrives. Default [25ms, 250ms].
	RetryDelay []caddy.Duration `json:"retry_delay,omitempty"`
	// NodeTimeout bounds every command to one node. Default 100ms; must be < ttl.
	NodeTimeout caddy.Duration `json:"node_timeout,omitempty"`
	// DriftFactor is the clock drift allowance as a fraction of the ttl, in (0, 0.5).
	// Default 0.01.
	DriftFactor float64 `json:"drift_factor,omitempty"`
	// MaxHold caps the hold, counted from when the lock was taken (the wait for it does
	// not count): when it is reached, renewals stop and the request is cut; the key stays
	// on the nodes until its validity ends, as the upstream may still be working. Default
	// 0: no cap.
	MaxHold caddy.Duration `json:"max_hold,omitempty"`
	// BusyStatus is the status when the wait runs out (with Retry-After). Default 423.
	BusyStatus int `json:"busy_status,omitempty"`
	// Fencing adds a fencing token to every lock, sent upstream in FencingHeader.
	Fencing bool `json:"fencing,omitempty"`
	// FencingHeader is the request header carrying the token. Default Redlock-Fencing-Token.
	FencingHeader string `json:"fencing_header,omitempty"`
	// OnUnavailable is "fail" (503 + Retry-After, the default) or "bypass" (proxy
	// unlocked, logged) when no quorum of nodes can be reached.
	OnUnavailable string `json:"on_unavailable,omitempty"`
	// DryRun is the rollout mode: locks are taken when free, but a request never waits
	// and never gets 423 or 503 from this handler; one that would have is served
	// unlocked, counted (caddy_redlock_dry_run_total) and logged.
	DryRun bool `json:"dry_run,omitempty"`
	// Name labels this block's metrics (label `name`), log lines, events and admin/CLI
	// output: letters, digits and . _ : / @ -, at most 64 characters. Default: derived
	// from the prefix and the node set ("redlock: @ host:port,..."). Blocks with the same
	// node set and name share one Redis client; the same name on other nodes is allowed
	// (warned): their metrics add up.
	Name string `json:"name,omitempty"`

	s       *settings
	keyer   *keyer
	locker  *lockerLease
	logger  *zap.Logger
	ns      namespace       // where the keys live (namespace.go)
	readers *atomic.Int32   // live handlers taking keys shared where ns's keys live (readersOn)
	cfgDone <-chan struct{} // identifies the config this handler belongs to
	// errorRoutes caches, per server of this config, whether error routes may run for an
	// error the handler returns (errorroutes.go).
	errorRoutes *sync.Map // *caddyhttp.Server -> bool; set at Provision
}

// PathKey is one `path <template> [<key>...]` line.
type PathKey struct {
	// Path is the path template: literal segments, `{name}` for exactly one segment, and
	// a trailing `*` for the rest. Required.
	Path string `json:"path"`
	// Key is the key template for requests this path matches; it may use the `{name}`
	// captures and any placeholder. Default: the template with its captures filled in.
	Key string `json:"key,omitempty"`
	// Keys are several key templates in place of Key: the request holds all of them or
	// none, taken in sorted order (at most 16). Not together with Key.
	Keys []string `json:"keys,omitempty"`
}

// moduleID is the handler's module ID, also the logger name of the plugin's lines (logs.go).
const moduleID = "http.handlers.redlock"

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  moduleID,
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision validates the configuration and attaches the handler to a pooled locker.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	s, err := h.resolve()
	if err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	k, err := h.newKeyer()
	if err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	urls, err := expandURLs(s.urls)
	if err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	if s.lock.TLSConfig, s.tlsKey, err = h.TLS.load(urls); err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	events, err := eventsApp(ctx)
	if err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	lease, err := openLocker(urls, s)
	if err != nil {
		return fmt.Errorf("redlock: redis: %w", err)
	}
	h.logger = h.logger.With(zap.String("name", lease.pooled.name))
	// Also here, not only in the admin module: with `admin off` the metrics must still
	// reach a `metrics` handler. Registering again is a no-op.
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		lease.drop()
		return err
	}
	h.s, h.keyer, h.locker = s, k, lease
	h.ns, h.cfgDone = newNamespace(urls, s, h), ctx.Done()
	h.errorRoutes = new(sync.Map)
	h.goLive()
	h.warnSharedName()
	h.warnCoverClashes()
	if events != nil {
		lease.pooled.events.attach(h, ctx, events)
	}
	for _, w := range lease.pooled.client.Status().Warnings {
		h.logger.Warn("redlock configuration", zap.String("warning", w), zap.String("locker", lease.pooled.name))
	}
	if slowRenewalRisk(s) {
		h.logger.Warn("redlock renew_interval plus twice node_timeout is more than half the ttl: with a node silent, one slow renewal can lose the lock",
			zap.Duration("renew_interval", s.renew), zap.Duration("node_timeout", s.lock.NodeTimeout), zap.Duration("ttl", s.lock.TTL))
	}
	return nil
}

// slowRenewalRisk reports a renewal cadence with no room for one slow renewal. A renewal
// waits for every node, a silent one up to node_timeout; its validity counts from its
// start, and the next renewal is due renew_interval after it ended, so with a node silent
// a new validity lands renew_interval + 2×node_timeout after the last one began. Within
// half the ttl, a failed renewal still has time for its retry.
func slowRenewalRisk(s *settings) bool {
	return s.renew+2*s.lock.NodeTimeout > s.lock.TTL/2
}

// Cleanup gives up this handler's use of its locker. On a reload it leaves running
// requests alone (the locker stays open until they are done). When the process exits
// (after Caddy's grace period for running requests) it cuts the requests still running:
// like any cut-short request their locks are not released but left to expire after a
// ttl, since their upstream may still be working on them; and it waits for the releases
// of completed requests still on their way.
func (h *Handler) Cleanup() error {
	if h.s != nil {
		h.leave()
		h.locker.pooled.events.detach(h)
	}
	if caddy.Exiting() && h.s != nil {
		h.abortInflight(h.s.lock.NodeTimeout + time.Second)
		// Releases of completed requests still on the way: let them reach Redis before
		// the process exits (else the keys would stand for a ttl). Each is bounded by
		// about two node timeouts: the round's late replies, then the release itself.
		// (On a reload they simply finish: the process goes on.)
		h.waitReleases(2*h.s.lock.NodeTimeout + time.Second)
	}
	if h.locker != nil {
		h.locker.drop()
	}
	return nil
}

// settings are the resolved options with defaults applied.
type settings struct {
	urls   []string
	tlsKey string // fingerprint of the tls block and its files (lockerKey)
	// lock are the client's options, resolved by the redlock package (the one home of
	// their defaults and ranges): prefix, ttl, max_ttl, node_timeout, drift_factor,
	// retry_delay; TLSConfig is set at provision.
	lock          redlock.Options
	renew         time.Duration
	wait          time.Duration
	maxHold       time.Duration
	busyStatus    int
	fencing       bool
	fencingHeader string
	bypass        bool
	dryRun        bool
	shared        map[string]bool // methods that take their keys shared (nil: none)
	limit         int             // holders per key: 1 = a mutex
	name          string          // the configured name, "" for the default (name.go)
}

// Defaults of the handler's own options; those of the lock itself (prefix, ttl,
// node_timeout, drift_factor, retry_delay) are the redlock package's (Options.Resolve).
const (
	defaultWait          = 5 * time.Second
	defaultBusyStatus    = 423
	defaultFencingHeader = "Redlock-Fencing-Token"
)

// resolve applies defaults and checks every option, naming it in the error. It does not
// touch the network, so the Caddyfile adapter runs it too.
func (h *Handler) resolve() (*settings, error) {
	s := &settings{renew: time.Duration(h.RenewInterval), wait: defaultWait, maxHold: time.Duration(h.MaxHold),
		busyStatus: h.BusyStatus, fencing: h.Fencing, fencingHeader: h.FencingHeader, dryRun: h.DryRun, name: h.Name}
	if err := checkName(h.Name); err != nil {
		return nil, err
	}
	if h.Wait != nil {
		s.wait = time.Duration(*h.Wait)
	}
	if err := h.resolveNodes(s); err != nil {
		return nil, err
	}
	var err error
	if s.lock, err = h.lockOptions(); err != nil {
		return nil, err
	}
	if _, err := h.newKeyer(); err != nil {
		return nil, err
	}
	for _, step := range []func() error{s.resolveTiming, s.resolveResponse, s.resolveFencing,
		func() error { return s.resolveUnavailable(h.OnUnavailable) },
		func() error { return s.resolveModes(h.Shared, h.Limit) }} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// resolveNodes checks the node URLs' form and the tls block.
func (h *Handler) resolveNodes(s *settings) error {
	if len(h.Redis) == 0 {
		return fmt.Errorf("redis: at least one node URL is required")
	}
	for i, u := range h.Redis {
		if err := checkNodeURL(u); err != nil {
			return fmt.Errorf("redis: node %d: %w", i+1, err)
		}
	}
	s.urls = append([]string(nil), h.Redis...)
	return h.TLS.check()
}

// lockOptions are the client's options, resolved (defaults applied, ranges checked) by
// the redlock package.
func (h *Handler) lockOptions() (redlock.Options, error) {
	o := redlock.Options{Prefix: h.Prefix, TTL: time.Duration(h.TTL), MaxTTL: time.Duration(h.MaxTTL),
		NodeTimeout: time.Duration(h.NodeTimeout), DriftFactor: h.DriftFactor}
	switch rd := h.RetryDelay; len(rd) {
	case 0:
	case 1, 2:
		o.RetryDelayMin, o.RetryDelayMax = time.Duration(rd[0]), time.Duration(rd[len(rd)-1])
		// A zero max would read as "unset" and turn into the default.
		if o.RetryDelayMax <= 0 {
			return o, fmt.Errorf("retry_delay: max must be > 0, got %v", o.RetryDelayMax)
		}
	default:
		return o, fmt.Errorf("retry_delay: want <min> [<max>], got %d values", len(rd))
	}
	return o.Resolve()
}

// resolveTiming checks the handler's own durations against the lock's.
func (s *settings) resolveTiming() error {
	ttl := s.lock.TTL
	if s.renew == 0 {
		s.renew = ttl / 3
	}
	switch {
	case s.renew < 0 || s.renew >= ttl:
		return fmt.Errorf("renew_interval: must be > 0 and smaller than ttl (%v), got %v", ttl, s.renew)
	case s.wait < 0:
		return fmt.Errorf("wait: must be >= 0, got %v", s.wait)
	case s.maxHold < 0:
		return fmt.Errorf("max_hold: must be >= 0 (0 = no cap), got %v", s.maxHold)
	}
	return nil
}

// resolveResponse checks the status of a request whose key stayed busy.
func (s *settings) resolveResponse() error {
	if s.busyStatus == 0 {
		s.busyStatus = defaultBusyStatus
	}
	if s.busyStatus < 400 || s.busyStatus > 599 {
		return fmt.Errorf("busy_status: must be a 4xx or 5xx status code, got %d", s.busyStatus)
	}
	return nil
}

// resolveUnavailable reads on_unavailable.
func (s *settings) resolveUnavailable(v string) error {
	switch v {
	case "", "fail":
	case "bypass":
		s.bypass = true
	default:
		return fmt.Errorf(`on_unavailable: must be "fail" or "bypass", got %q`, v)
	}
	return nil
}

// newKeyer builds the handler's keyer.
func (h *Handler) newKeyer() (*keyer, error) {
	fallback, err := keyTemplates(h.Key, h.Keys)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	return newKeyer(h.Paths, fallback, h.CaseInsensitive)
}

// forbiddenFencingHeaders would change how the request is framed or routed.
var forbiddenFencingHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true,
}

func (s *settings) resolveFencing() error {
	if s.fencingHeader == "" {
		s.fencingHeader = defaultFencingHeader
		return nil
	}
	if !s.fencing {
		return fmt.Errorf("fencing_header: set but fencing is off")
	}
	if !validHeaderName(s.fencingHeader) {
		return fmt.Errorf("fencing: %q is not a valid header name", s.fencingHeader)
	}
	s.fencingHeader = canonicalHeader(s.fencingHeader)
	if forbiddenFencingHeaders[s.fencingHeader] {
		return fmt.Errorf("fencing: header %s cannot carry the token", s.fencingHeader)
	}
	return nil
}

// checkNodeURL checks the form of a node URL without connecting, by the library's own
// rules (redlock.CheckNodeURL). URLs with placeholders are checked after expansion, at
// provision.
func checkNodeURL(raw string) error {
	if strings.Contains(raw, "{") {
		return nil
	}
	return redlock.CheckNodeURL(raw)
}

// expandURLs expands global placeholders ({env.X}, {file.path}) in node URLs, so that
// passwords can stay out of the config.
func expandURLs(raw []string) ([]string, error) {
	repl := caddy.NewReplacer()
	out := make([]string, len(raw))
	for i, u := range raw {
		exp, err := repl.ReplaceOrErr(u, true, true)
		if err != nil {
			return nil, fmt.Errorf("redis: node %d: %w", i+1, err)
		}
		if err := checkNodeURL(exp); err != nil {
			return nil, fmt.Errorf("redis: node %d after expansion: %w", i+1, err)
		}
		out[i] = exp
	}
	return out, nil
}

func validHeaderName(s string) bool { return httpguts.ValidHeaderFieldName(s) }

func canonicalHeader(s string) string { return textproto.CanonicalMIMEHeaderKey(s) }

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
