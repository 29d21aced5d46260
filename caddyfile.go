package caddyredlock

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// This file holds the Caddyfile side of the handler: the `redlock` directive's place in
// Caddy's directive order and the parsing of its block into Handler's fields (syntax
// only: Handler.resolve validates, in module.go). The tls block is parsed in tls.go.

func init() {
	// After templates, that is before handle, route, respond and reverse_proxy: the lock
	// must wrap whatever produces the response ("before reverse_proxy" would put it after
	// handle and respond, too late).
	httpcaddyfile.RegisterDirectiveOrder("redlock", httpcaddyfile.After, "templates")
	httpcaddyfile.RegisterHandlerDirective("redlock", parseCaddyfile)
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	hd := new(Handler)
	if err := hd.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return hd, nil
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	redlock [<matcher>] {
//	    redis <url...>
//	    tls {
//	        ca <pem-file...>
//	        client_cert <cert-file> <key-file>
//	        server_name <name>
//	        insecure_skip_verify
//	    }
//	    path <template> [<key>...]
//	    key <template...>
//	    shared <method...>
//	    limit <n>
//	    case_insensitive
//	    prefix <string>
//	    ttl <duration>
//	    max_ttl <duration>
//	    renew_interval <duration>
//	    wait <duration>
//	    retry_delay <min> [<max>]
//	    node_timeout <duration>
//	    drift_factor <float>
//	    max_hold <duration>
//	    busy_status <code>
//	    fencing [<header>]
//	    on_unavailable fail|bypass
//	    dry_run
//	    name <label>
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.Errf("redlock: unexpected argument %q: options go in a block", d.Val())
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		opt := d.Val()
		if seen[opt] && opt != "redis" && opt != "path" {
			return d.Errf("redlock: %s: given more than once", opt)
		}
		seen[opt] = true
		if err := h.parseOption(d, opt); err != nil {
			return err
		}
	}
	// The parsing above checks syntax only; ranges and cross-option rules (renew_interval
	// < ttl, ...) have one home, the validation Provision runs: run it here too, so that
	// adapting refuses what Provision would.
	if _, err := h.resolve(); err != nil {
		return d.Errf("redlock: %v", err)
	}
	return nil
}

func (h *Handler) parseOption(d *caddyfile.Dispenser, opt string) error {
	switch opt {
	case "redis":
		urls := d.RemainingArgs()
		if len(urls) == 0 {
			return d.Errf("redlock: redis: want at least one node URL")
		}
		h.Redis = append(h.Redis, urls...)
	case "tls":
		return h.parseTLS(d)
	case "path":
		args := d.RemainingArgs()
		if len(args) < 1 {
			return d.Errf("redlock: path: want <template> [<key>...], got no argument")
		}
		pk := PathKey{Path: args[0]}
		pk.Key, pk.Keys = oneOrSeveral(args[1:])
		h.Paths = append(h.Paths, pk)
	case "key":
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.Errf("redlock: key: want <template...>, got no argument")
		}
		h.Key, h.Keys = oneOrSeveral(args)
	case "shared":
		h.Shared = d.RemainingArgs()
		if len(h.Shared) == 0 {
			return d.Errf("redlock: shared: want the methods that read, e.g. shared GET HEAD")
		}
	case "limit":
		var s string
		if err := oneArg(d, opt, &s); err != nil {
			return err
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 { // 0 would read as "unset"
			return d.Errf("redlock: limit: want a whole number of holders >= 1, got %q", s)
		}
		h.Limit = n
	case "case_insensitive":
		if d.NextArg() {
			return d.Errf("redlock: case_insensitive: takes no argument")
		}
		h.CaseInsensitive = true
	case "prefix":
		return oneArg(d, opt, &h.Prefix)
	case "name":
		return oneArg(d, opt, &h.Name)
	case "ttl":
		return durationArg(d, opt, &h.TTL)
	case "max_ttl":
		return durationArg(d, opt, &h.MaxTTL)
	case "renew_interval":
		return durationArg(d, opt, &h.RenewInterval)
	case "wait":
		var w caddy.Duration
		if err := durationArg(d, opt, &w); err != nil {
			return err
		}
		h.Wait = &w
	case "retry_delay":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return d.Errf("redlock: retry_delay: want <min> [<max>], got %d arguments", len(args))
		}
		for _, a := range args {
			v, err := parseDuration(a)
			if err != nil {
				return d.Errf("redlock: retry_delay: %v", err)
			}
			h.RetryDelay = append(h.RetryDelay, v)
		}
	case "node_timeout":
		return durationArg(d, opt, &h.NodeTimeout)
	case "drift_factor":
		var s string
		if err := oneArg(d, opt, &s); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0) { // 0 would read as "unset"; NaN fails every comparison
			return d.Errf("redlock: drift_factor: want a number > 0, got %q", s)
		}
		h.DriftFactor = f
	case "max_hold":
		return durationArg(d, opt, &h.MaxHold)
	case "busy_status":
		var s string
		if err := oneArg(d, opt, &s); err != nil {
			return err
		}
		code, err := strconv.Atoi(s)
		if err != nil {
			return d.Errf("redlock: busy_status: want a status code, got %q", s)
		}
		h.BusyStatus = code
	case "fencing":
		h.Fencing = true
		if d.NextArg() {
			h.FencingHeader = d.Val()
			if d.NextArg() {
				return d.Errf("redlock: fencing: want at most one header name")
			}
		}
	case "on_unavailable":
		return oneArg(d, opt, &h.OnUnavailable)
	case "dry_run":
		if d.NextArg() {
			return d.Errf("redlock: dry_run: takes no argument")
		}
		h.DryRun = true
	default:
		return d.Errf("redlock: unknown option %q", opt)
	}
	return nil
}

// oneOrSeveral sorts key templates into the JSON fields: key for one, keys for several.
func oneOrSeveral(templates []string) (string, []string) {
	switch len(templates) {
	case 0:
		return "", nil
	case 1:
		return templates[0], nil
	}
	return "", templates
}

// oneArg reads exactly one argument into dst.
func oneArg(d *caddyfile.Dispenser, opt string, dst *string) error {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("redlock: %s: want exactly one argument, got %d", opt, len(args))
	}
	*dst = args[0]
	return nil
}

// durationArg reads exactly one non-negative duration into dst.
func durationArg(d *caddyfile.Dispenser, opt string, dst *caddy.Duration) error {
	var s string
	if err := oneArg(d, opt, &s); err != nil {
		return err
	}
	v, err := parseDuration(s)
	if err != nil {
		return d.Errf("redlock: %s: %v", opt, err)
	}
	*dst = v
	return nil
}

func parseDuration(s string) (caddy.Duration, error) {
	v, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, errNegative(s)
	}
	return caddy.Duration(v), nil
}

type errNegative string

func (e errNegative) Error() string { return "negative duration " + strconv.Quote(string(e)) }
