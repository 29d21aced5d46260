package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The lock modes under chaos: besides the exclusive /r/{id} route, every Caddy instance
// locks /s/{id} shared for GET (other methods write), /l/{id} with a limit, and
// /t/{from}/{to} on two keys at once (a transfer), so that every fault also runs against
// them. The ledger judges each mode (ledger.go).
const (
	modeExclusive = "exclusive"
	modeShared    = "shared"
	modeLimit     = "limit"

	headerMode = "X-Lock-Mode"

	chaosLimit = 3           // the limit of /l/{id}
	limitKey   = "lres:pool" // the one limited key the load uses
)

// modeRoutes are the Caddyfile lines of the mode routes, each a redlock handler of its own
// with the common options (common) and the mode's.
func modeRoutes(common string) string {
	var b strings.Builder
	for _, r := range []struct{ name, path, opts string }{
		{"r", "/r/{id} res:{id}", ""},
		{"s", "/s/{id} sres:{id}", "shared GET"},
		{"l", "/l/{id} lres:{id}", "limit " + strconv.Itoa(chaosLimit)},
		{"t", "/t/{from}/{to} acct:{from} acct:{to}", ""},
	} {
		b.WriteString("\t@" + r.name + " path /" + r.name + "/*\n")
		b.WriteString("\tredlock @" + r.name + " {\n" + common + "\t\tpath " + r.path + "\n")
		if r.opts != "" {
			b.WriteString("\t\t" + r.opts + "\n")
		}
		b.WriteString("\t}\n")
	}
	return b.String()
}

// wantLock is the lock a request must hold by its route: the mode and the keys in lock
// order (sorted, without duplicates), as modeRoutes configures them.
func wantLock(method, path string) (mode string, keys []string) {
	route, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	parts := strings.Split(rest, "/")
	switch route {
	case "r":
		return modeExclusive, []string{"res:" + parts[0]}
	case "s":
		if method == "GET" {
			return modeShared, []string{"sres:" + parts[0]}
		}
		return modeExclusive, []string{"sres:" + parts[0]}
	case "l":
		return modeLimit, []string{"lres:" + parts[0]}
	case "t":
		for _, p := range parts {
			keys = append(keys, "acct:"+p)
		}
		slices.Sort(keys)
		return modeExclusive, slices.Compact(keys)
	}
	return modeExclusive, nil
}

// lockedKeys reads what Caddy says the request holds: its keys (in lock order) and the
// fencing token of each (the bare token for one key, key=token pairs for several).
func lockedKeys(keyHeader, tokenHeader string) (keys []string, tokens map[string]int64) {
	keys = strings.Fields(keyHeader)
	tokens = map[string]int64{}
	for _, p := range strings.Split(tokenHeader, ",") {
		k, v, pair := strings.Cut(p, "=")
		if !pair {
			if len(keys) != 1 {
				continue
			}
			k, v = keys[0], p
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			tokens[k] = n
		}
	}
	return keys, tokens
}

// modeChecks are the run's verdicts on the modes besides overlaps (the ledger's): no
// request stuck (a deadlock of transfers would leave some), and each mode reached the
// concurrency it allows (readers together, the limit's holders), so the lock was not
// stricter than it must be. It logs what was reached, per key.
func modeChecks(e *env) []string {
	var out []string
	if n := e.ld.stuck.Load(); n > 0 {
		out = append(out, fmt.Sprintf("%d lock-mode requests got no answer within %v (stuck)", n, e.ld.client.Timeout))
	}
	most := e.led.mostInside()
	perKey := e.led.mostPerKey()
	var keys []string
	for k := range perKey {
		if strings.HasPrefix(k, "sres:") || strings.HasPrefix(k, "lres:") || strings.HasPrefix(k, "acct:") {
			keys = append(keys, fmt.Sprintf("%s %d", k, perKey[k]))
		}
	}
	slices.Sort(keys)
	e.logf("lock modes: up to %d readers inside one key together, up to %d holders of a key limited to %d; most inside per key: %s",
		most[modeShared], most[modeLimit], chaosLimit, strings.Join(keys, ", "))
	if most[modeShared] < 2 {
		out = append(out, fmt.Sprintf("readers never overlapped (at most %d inside one key)", most[modeShared]))
	}
	if n := perKey[limitKey]; n < chaosLimit {
		out = append(out, fmt.Sprintf("the limit %d of %s was never reached (at most %d holders)", chaosLimit, limitKey, n))
	}
	return out
}

// waitedOut is the deadlock check of the transfers: with no fault injected (the steady
// phase), a transfer answered 423 waited the whole wait for two accounts whose holders
// each hold for milliseconds: A->B and B->A taking their keys in opposite orders would do
// that. (A deadlock with no wait at all would show as a stuck request instead.)
func waitedOut(rs []result) []string {
	n, sent := 0, 0
	for _, r := range rs {
		if r.route != "transfer" {
			continue
		}
		sent++
		if r.status == 423 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d of %d transfers waited out their wait with no fault injected (a deadlock of A->B and B->A?)", n, sent)}
}

// modeRoute names a lock-mode request for the per-fault figures: "shared GET", "shared
// PUT", "limit" or "transfer".
func modeRoute(method, path string) string {
	switch {
	case strings.HasPrefix(path, "/s/"):
		return "shared " + method
	case strings.HasPrefix(path, "/l/"):
		return "limit"
	case strings.HasPrefix(path, "/t/"):
		return "transfer"
	}
	return ""
}

// modeNote is a fault's lock-mode figures: per route, answered 200 out of sent, so the
// summary shows every mode ran through the fault.
func modeNote(rs []result) string {
	sent, ok := map[string]int{}, map[string]int{}
	for _, r := range rs {
		if r.route == "" {
			continue
		}
		sent[r.route]++
		if r.status == 200 {
			ok[r.route]++
		}
	}
	var parts []string
	for _, route := range []string{"shared GET", "shared PUT", "limit", "transfer"} {
		parts = append(parts, fmt.Sprintf("%s %d/%d", route, ok[route], sent[route]))
	}
	return "lock modes (200/sent): " + strings.Join(parts, ", ")
}
