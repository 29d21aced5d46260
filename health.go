package caddyredlock

import (
	"net/http"
	"time"
)

// GET /redlock/health: for load balancers and readiness probes. 200 when every locker
// has a voting quorum (enough nodes up and out of quarantine to take a lock), else 503.
// Computed from the lockers' node status (health checks run in the background), so a
// probe never makes a Redis round trip.

type healthNodeJSON struct {
	Address           string `json:"address"`
	Up                bool   `json:"up"`
	QuarantinedLeftMS int64  `json:"quarantine_left_ms,omitempty"`
	QuarantineCause   string `json:"quarantine_cause,omitempty"`
	LastError         string `json:"last_error,omitempty"`
}

type healthLockerJSON struct {
	lockerJSON
	Nodes  int  `json:"nodes"`
	Voting int  `json:"voting"` // up and out of quarantine
	OK     bool `json:"ok"`     // voting >= quorum
	// NotVoting lists the nodes down or quarantined (empty when all vote).
	NotVoting []healthNodeJSON `json:"not_voting"`
}

type healthJSON struct {
	OK      bool               `json:"ok"`
	Lockers []healthLockerJSON `json:"lockers"`
}

// health reports every locker's quorum. With no locker configured it is OK: there is
// nothing that could fail for lack of Redis.
func health(now time.Time) healthJSON {
	out := healthJSON{OK: true, Lockers: []healthLockerJSON{}}
	for _, li := range lockers() {
		hl := healthLockerJSON{lockerJSON: describeLocker(li), NotVoting: []healthNodeJSON{}}
		for _, n := range li.client.Status().Nodes {
			hl.Nodes++
			if n.Votes { // the library's own rule
				hl.Voting++
				continue
			}
			hn := healthNodeJSON{Address: n.Address, Up: n.Up, LastError: n.LastError, QuarantineCause: string(n.QuarantineCause)}
			if left := n.QuarantinedUntil.Sub(now); left > 0 {
				hn.QuarantinedLeftMS = left.Milliseconds()
			}
			hl.NotVoting = append(hl.NotVoting, hn)
		}
		hl.OK = hl.Voting >= hl.Quorum
		out.OK = out.OK && hl.OK
		out.Lockers = append(out.Lockers, hl)
	}
	return out
}

// handleHealth answers GET /redlock/health.
func (a *AdminAPI) handleHealth(w http.ResponseWriter, r *http.Request) error {
	if err := allowMethods(w, r, http.MethodGet); err != nil {
		return err
	}
	h := health(time.Now())
	status := http.StatusOK
	if !h.OK {
		status = http.StatusServiceUnavailable
	}
	return writeJSON(w, status, h)
}
