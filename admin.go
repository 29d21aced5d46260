package caddyredlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// This file holds the admin module (admin.api.redlock) and its routes /redlock/locks,
// /redlock/nodes and /redlock/keys (GET, and DELETE for a force release), with the JSON
// they answer; /redlock/health is in health.go and `caddy redlock`, their client, in
// command.go.

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is the `admin.api.redlock` module: the /redlock/ routes of Caddy's admin
// endpoint. Admin routers are provisioned before the apps and cannot reach handler
// instances, so it reads the package-level tables of lockers.go and requests.go: the pooled lockers and
// the requests that wait for or hold a lock.
//
// Field names are stable (docs/operating.md, "Admin API"): snake_case, durations as *_ms numbers,
// times as RFC 3339. Lock values are never shown: the redlock package does not return
// them, and nothing here asks Redis for them.
type AdminAPI struct {
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.redlock",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Provision runs on every config load, with the new config's context. It also registers
// the metrics with that config's registry, so the admin /metrics route has them even
// before the first handler is provisioned.
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	// Admin routers are not loaded through LoadModule, so the context knows no current
	// module: name it, or the log lines have no logger name.
	a.logger = ctx.Logger(a)
	return registerMetrics(ctx.GetMetricsRegistry())
}

// Routes returns the /redlock/ routes.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/redlock/locks", Handler: caddy.AdminHandlerFunc(a.handleLocks)},
		{Pattern: "/redlock/nodes", Handler: caddy.AdminHandlerFunc(a.handleNodes)},
		{Pattern: "/redlock/keys", Handler: caddy.AdminHandlerFunc(a.handleKeys)},
		{Pattern: "/redlock/health", Handler: caddy.AdminHandlerFunc(a.handleHealth)},
	}
}

// adminTimeout bounds the Redis work of one admin request (each node call is bounded by
// the locker's node_timeout as well).
const adminTimeout = 10 * time.Second

// millis turns a duration into a millisecond number with microsecond precision, so
// sub-millisecond round trips do not show as 0.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// lockJSON is one entry of GET /redlock/locks.
type lockJSON struct {
	Key        string       `json:"key"`            // several keys: in lock order, joined by a space
	Keys       []string     `json:"keys,omitempty"` // several keys: each, in lock order
	Mode       string       `json:"mode"`           // exclusive, shared or limit
	State      requestState `json:"state"`          // waiting, held, draining, releasing (requests.go)
	Locker     string       `json:"locker"`
	Name       string       `json:"name"`  // the redlock block's name (configured, or prefix @ nodes)
	Since      time.Time    `json:"since"` // the request arrived (started waiting)
	HeldSince  time.Time    `json:"held_since,omitzero"`
	WaitMS     int64        `json:"wait_ms"`     // waited so far, or until it got the lock
	HeldMS     int64        `json:"held_ms"`     // held so far; 0 while waiting
	ValidityMS int64        `json:"validity_ms"` // safe time left without a renewal; 0 while waiting, once lost or released
	Renewals   int          `json:"renewals"`
	Token      int64        `json:"token,omitempty"`  // fencing token, with fencing on (several keys: the first key's)
	Tokens     string       `json:"tokens,omitempty"` // several keys with fencing: key=token pairs, as the header carries them
	Method     string       `json:"method"`
	URI        string       `json:"uri"`
	RemoteAddr string       `json:"remote_addr"`
	Waiters    int          `json:"waiters"` // this instance's requests waiting for the same key
}

// locksJSON is GET /redlock/locks: the requests by state, and each one.
type locksJSON struct {
	Held      int        `json:"held"`
	Waiting   int        `json:"waiting"`
	Draining  int        `json:"draining"`
	Releasing int        `json:"releasing"`
	Locks     []lockJSON `json:"locks"`
}

// handleLocks answers GET /redlock/locks: this instance's held and awaited locks.
func (a *AdminAPI) handleLocks(w http.ResponseWriter, r *http.Request) error {
	if err := allowMethods(w, r, http.MethodGet); err != nil {
		return err
	}
	now := time.Now()
	reqs := inflightRequests()
	waiters := map[[2]string]int{}
	for _, ri := range reqs {
		if ri.State == stateWaiting {
			waiters[[2]string{ri.Locker, ri.Key}]++
		}
	}
	out := locksJSON{Locks: make([]lockJSON, 0, len(reqs))}
	for _, ri := range reqs {
		lj := lockJSON{Key: ri.Key, Keys: ri.Keys, Mode: ri.Mode, State: ri.State, Locker: ri.Locker, Name: ri.Name, Since: ri.Since,
			HeldSince: ri.HeldSince, ValidityMS: ri.Validity.Milliseconds(), Renewals: ri.Renewals, Token: ri.Token,
			Tokens: ri.Tokens, Method: ri.Method,
			URI: ri.URI, RemoteAddr: ri.RemoteAddr, Waiters: waiters[[2]string{ri.Locker, ri.Key}]}
		switch ri.State {
		case stateWaiting:
			out.Waiting++
			lj.WaitMS = now.Sub(ri.Since).Milliseconds()
		default:
			switch ri.State {
			case stateDraining:
				out.Draining++
			case stateReleasing:
				out.Releasing++
			default:
				out.Held++
			}
			if !ri.HeldSince.IsZero() {
				lj.WaitMS = ri.HeldSince.Sub(ri.Since).Milliseconds()
				lj.HeldMS = now.Sub(ri.HeldSince).Milliseconds()
			}
		}
		out.Locks = append(out.Locks, lj)
	}
	return writeJSON(w, http.StatusOK, out)
}

// nodeJSON is one node of GET /redlock/nodes.
type nodeJSON struct {
	Address           string    `json:"address"` // host:port[/db], never a password
	Up                bool      `json:"up"`
	Voting            bool      `json:"voting"`  // up and not quarantined: its answers count toward a quorum
	Checked           bool      `json:"checked"` // at least one health check ran
	LastRTTMS         float64   `json:"last_rtt_ms"`
	LastCheck         time.Time `json:"last_check,omitzero"`
	LastError         string    `json:"last_error,omitempty"`
	LastErrorAt       time.Time `json:"last_error_at,omitzero"`
	Errors            uint64    `json:"errors"`
	RunID             string    `json:"run_id,omitempty"`
	QuarantinedUntil  time.Time `json:"quarantined_until,omitzero"` // set while a node that may have lost its keys may not vote
	QuarantinedLeftMS int64     `json:"quarantine_left_ms,omitempty"`
	// QuarantineCause: restart (run_id changed), data_loss (marker gone or changed,
	// evictions) or young (its data began less than a quarantine ago).
	QuarantineCause string `json:"quarantine_cause,omitempty"`
	DataMarker      bool   `json:"data_marker"` // the node keeps the data marker: a loss without restart is seen
}

// lockerJSON names a locker: one redlock client, shared by all handlers with the same
// nodes, prefix and timing options.
type lockerJSON struct {
	Locker string `json:"locker"` // random id, as in /redlock/locks
	Name   string `json:"name"`   // prefix @ node addresses
	Prefix string `json:"prefix"`
	Quorum int    `json:"quorum"`
}

func describeLocker(li *pooledLocker) lockerJSON {
	return lockerJSON{Locker: li.id, Name: li.name, Prefix: li.prefix, Quorum: li.client.Status().Quorum}
}

type lockerNodesJSON struct {
	lockerJSON
	Up    int        `json:"up"`
	Nodes []nodeJSON `json:"nodes"`
}

// handleNodes answers GET /redlock/nodes: the health of every node of every locker.
func (a *AdminAPI) handleNodes(w http.ResponseWriter, r *http.Request) error {
	if err := allowMethods(w, r, http.MethodGet); err != nil {
		return err
	}
	now := time.Now()
	out := struct {
		Lockers []lockerNodesJSON `json:"lockers"`
	}{Lockers: []lockerNodesJSON{}}
	for _, li := range lockers() {
		ln := lockerNodesJSON{lockerJSON: describeLocker(li), Nodes: []nodeJSON{}}
		for _, n := range li.client.Status().Nodes {
			nj := nodeJSON{Address: n.Address, Up: n.Up, Checked: n.Checked, LastRTTMS: millis(n.LastRTT),
				LastCheck: n.LastCheck, LastError: n.LastError, LastErrorAt: n.LastErrorAt, Errors: n.Errors,
				RunID: n.RunID, QuarantinedUntil: n.QuarantinedUntil, QuarantineCause: string(n.QuarantineCause),
				DataMarker: n.Marker, Voting: n.Votes}
			if left := n.QuarantinedUntil.Sub(now); left > 0 {
				nj.QuarantinedLeftMS = left.Milliseconds()
			}
			if n.Up {
				ln.Up++
			}
			ln.Nodes = append(ln.Nodes, nj)
		}
		out.Lockers = append(out.Lockers, ln)
	}
	return writeJSON(w, http.StatusOK, out)
}

// Key states in /redlock/keys.
const (
	keyHeld    = "held"     // a quorum of nodes hold one value: someone holds the lock
	keyPartial = "partial"  // present on some nodes, but no quorum holds one value
	keyNotHeld = "not held" // on no node
)

type keyNodeJSON struct {
	Node     string `json:"node"`
	Present  bool   `json:"present"`
	PTTLMS   int64  `json:"pttl_ms"` // ms left on the key; -1 without expiry; 0 when absent
	HeldHere bool   `json:"held_here"`
	// Type is set when the key is not a string: another client's lock of another kind
	// (e.g. a Redisson hash), held by someone else.
	Type    string `json:"type,omitempty"`
	Readers int    `json:"readers,omitempty"` // shared: reader entries on the node (expired ones not yet dropped included)
	Error   string `json:"error,omitempty"`
}

// holderJSON is this instance's request holding the key.
type holderJSON struct {
	Mode       string       `json:"mode"` // exclusive, shared or limit
	State      requestState `json:"state"`
	HeldMS     int64        `json:"held_ms"`
	ValidityMS int64        `json:"validity_ms"`
	Renewals   int          `json:"renewals"`
	Token      int64        `json:"token,omitempty"`
	Method     string       `json:"method"`
	URI        string       `json:"uri"`
	RemoteAddr string       `json:"remote_addr"`
}

type lockerKeyJSON struct {
	lockerJSON
	RedisKey   string        `json:"redis_key"` // prefix + key
	Status     string        `json:"status"`
	PresentOn  int           `json:"present_on"`
	QuorumHeld bool          `json:"quorum_held"`
	HeldHere   bool          `json:"held_here"` // this instance's lock is the one a quorum holds
	Holder     *holderJSON   `json:"holder,omitempty"`
	Holders    int           `json:"holders"` // this instance's requests holding the key (readers hold it together)
	Waiters    int           `json:"waiters"` // this instance's requests waiting for the key
	Nodes      []keyNodeJSON `json:"nodes"`
	// Places are a limited key's places present on any node (its holders hold places,
	// not the key's own name); the key is held while a quorum holds any of them.
	Places []placeJSON `json:"places,omitempty"`
}

// placeJSON is one place of a limited key.
type placeJSON struct {
	Index      int    `json:"index"`
	RedisKey   string `json:"redis_key"` // prefix + key + NUL "slot" + index
	PresentOn  int    `json:"present_on"`
	QuorumHeld bool   `json:"quorum_held"`
	HeldHere   bool   `json:"held_here"`
}

type keyJSON struct {
	Key     string          `json:"key"`
	Status  string          `json:"status"` // the strongest status of any locker
	Lockers []lockerKeyJSON `json:"lockers"`
}

// handleKeys answers GET (inspect) and DELETE (force release) /redlock/keys?key=K.
func (a *AdminAPI) handleKeys(w http.ResponseWriter, r *http.Request) error {
	if err := allowMethods(w, r, http.MethodGet, http.MethodDelete); err != nil {
		return err
	}
	key, err := keyParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	if r.Method == http.MethodDelete {
		return a.forceRelease(ctx, w, r, key)
	}
	out := keyJSON{Key: key, Status: keyNotHeld, Lockers: []lockerKeyJSON{}}
	reqs := inflightRequests()
	for _, li := range lockers() {
		st, err := li.client.Inspect(ctx, key)
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: fmt.Errorf("inspecting key %q on locker %s: %w", key, li.name, err)}
		}
		lk := lockerKeyJSON{lockerJSON: describeLocker(li), RedisKey: li.prefix + key, Status: keyNotHeld,
			PresentOn: st.Present, QuorumHeld: st.QuorumHeld, HeldHere: st.HeldHere, Nodes: make([]keyNodeJSON, 0, len(st.Nodes))}
		present, quorum := st.Present, st.QuorumHeld
		for _, p := range st.Places {
			lk.Places = append(lk.Places, placeJSON{Index: p.Index, RedisKey: fmt.Sprintf("%s%s\x00slot%d", li.prefix, key, p.Index),
				PresentOn: p.Present, QuorumHeld: p.QuorumHeld, HeldHere: p.HeldHere})
			present, quorum = max(present, p.Present), quorum || p.QuorumHeld
			lk.HeldHere = lk.HeldHere || p.HeldHere
		}
		switch {
		case quorum:
			lk.Status = keyHeld
		case present > 0:
			lk.Status = keyPartial
		}
		for _, kn := range st.Nodes {
			nj := keyNodeJSON{Node: kn.Node, Present: kn.Present, HeldHere: kn.Ours, Type: kn.Type, Readers: kn.Readers, Error: kn.Error}
			if kn.Present {
				nj.PTTLMS = kn.PTTL.Milliseconds()
				if kn.PTTL < 0 { // Redis says -1: no expiry (not written by a Redlock client)
					nj.PTTLMS = -1
				}
			}
			lk.Nodes = append(lk.Nodes, nj)
		}
		for _, ri := range reqs {
			if ri.Locker != li.id || !ri.locks(key) {
				continue
			}
			if ri.State == stateWaiting {
				lk.Waiters++
				continue
			}
			lk.Holders++
			h := &holderJSON{Mode: ri.Mode, State: ri.State, ValidityMS: ri.Validity.Milliseconds(), Renewals: ri.Renewals,
				Token: ri.Token, Method: ri.Method, URI: ri.URI, RemoteAddr: ri.RemoteAddr}
			if !ri.HeldSince.IsZero() {
				h.HeldMS = time.Since(ri.HeldSince).Milliseconds()
			}
			if lk.Holder == nil || ri.State == stateHeld { // a held request wins over one draining or releasing
				lk.Holder = h
			}
		}
		out.Status = strongerStatus(out.Status, lk.Status)
		out.Lockers = append(out.Lockers, lk)
	}
	return writeJSON(w, http.StatusOK, out)
}

func strongerStatus(a, b string) string {
	rank := map[string]int{keyNotHeld: 0, keyPartial: 1, keyHeld: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

type releaseLockerJSON struct {
	lockerJSON
	RedisKey  string   `json:"redis_key"`
	Nodes     int      `json:"nodes"`
	Answered  int      `json:"answered"`   // nodes that confirmed (deleted or had no key)
	DeletedOn int      `json:"deleted_on"` // nodes that had the key
	HeldHere  bool     `json:"held_here"`  // this instance held the key: its request was aborted
	Token     int64    `json:"token,omitempty"`
	Errors    []string `json:"errors,omitempty"`
}

type releaseJSON struct {
	Key       string              `json:"key"`
	Status    string              `json:"status"` // "released" or "not held"
	DeletedOn int                 `json:"deleted_on"`
	Lockers   []releaseLockerJSON `json:"lockers"`
}

// forceRelease deletes key on every node of every locker, whoever holds it, and aborts
// this instance's request holding it. It answers 503 when a locker could not reach a
// quorum of its nodes (the key may still be held there).
func (a *AdminAPI) forceRelease(ctx context.Context, w http.ResponseWriter, r *http.Request, key string) error {
	out := releaseJSON{Key: key, Status: keyNotHeld, Lockers: []releaseLockerJSON{}}
	var short []string
	for _, li := range lockers() {
		st := li.client.Status()
		lr := releaseLockerJSON{lockerJSON: describeLocker(li), RedisKey: li.prefix + key, Nodes: len(st.Nodes)}
		res, err := li.client.ForceRelease(ctx, key)
		lr.DeletedOn, lr.Answered = res.Deleted, res.Answered
		// The locks ForceRelease stopped (marked lost, force_released, and released): the
		// handler's watcher cancels each one's request, whose own release then does nothing.
		for _, stopped := range res.Stopped {
			lr.HeldHere, lr.Token = true, stopped.Token
		}
		for _, n := range res.Nodes {
			if n.Err != nil {
				lr.Errors = append(lr.Errors, n.Node+": "+n.Err.Error())
			}
		}
		if err != nil && len(lr.Errors) == 0 { // not a node's: a bad key, or a stopped lock's release
			lr.Errors = []string{err.Error()}
		}
		if lr.Answered < st.Quorum {
			short = append(short, fmt.Sprintf("%s: %d of %d nodes answered", li.name, lr.Answered, lr.Nodes))
		}
		if res.Deleted > 0 || lr.HeldHere {
			out.Status = "released"
		}
		out.DeletedOn += res.Deleted
		a.logger.Warn("redlock key force-released by operator",
			zap.String("key", key), zap.String("locker", li.name), zap.Int("deleted_on", res.Deleted),
			zap.Int("answered", lr.Answered), zap.Int("nodes", lr.Nodes), zap.Bool("held_here", lr.HeldHere),
			optInt64("token", lr.Token), zap.String("remote_addr", r.RemoteAddr), clientCert(r), zap.Error(err))
		out.Lockers = append(out.Lockers, lr)
	}
	if len(out.Lockers) == 0 {
		a.logger.Warn("redlock force release: no locker configured", zap.String("key", key), zap.String("remote_addr", r.RemoteAddr))
	}
	if len(short) > 0 {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable,
			Err: fmt.Errorf("force release of %q did not reach a quorum (the key may still be held there until its ttl ends): %s", key, strings.Join(short, "; "))}
	}
	return writeJSON(w, http.StatusOK, out)
}

// clientCert names the client certificate of a remote admin request, if any: with
// remote admin, that says who asked better than an address.
func clientCert(r *http.Request) zap.Field {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return zap.Skip()
	}
	return zap.String("client_cert", r.TLS.PeerCertificates[0].Subject.String())
}

func optInt64(name string, v int64) zap.Field {
	if v == 0 {
		return zap.Skip()
	}
	return zap.Int64(name, v)
}

// keyParam returns the one key query parameter, as rendered (what /redlock/locks shows).
func keyParam(r *http.Request) (string, error) {
	keys := r.URL.Query()["key"]
	switch {
	case len(keys) == 0 || keys[0] == "":
		return "", caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: errors.New("missing key query parameter: use ?key=K with the key as /redlock/locks shows it")}
	case len(keys) > 1:
		return "", caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("one key at a time, got %d", len(keys))}
	case strings.IndexByte(keys[0], 0) >= 0:
		return "", caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: errors.New("key contains a NUL byte")}
	}
	return keys[0], nil
}

// allowMethods answers 405 with an Allow header to other methods.
func allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	sort.Strings(methods)
	w.Header().Set("Allow", strings.Join(methods, ", "))
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use %s", r.Method, strings.Join(methods, " or "))}
}

// writeJSON encodes v. The body is built first, so an encoding error still gets a
// proper error status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: fmt.Errorf("encoding response: %w", err)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // the status is out: a write error means the client went away
	return nil
}

// Interface guards
var (
	_ caddy.AdminRouter = (*AdminAPI)(nil)
	_ caddy.Provisioner = (*AdminAPI)(nil)
)
