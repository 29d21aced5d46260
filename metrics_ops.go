package caddyredlock

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The operator metrics (issue 14): how long locks are held and what dry run let through.
// Kept apart from metrics.go's table; registerMetrics registers opsCollectors too.

// How a hold ended, the label of caddy_redlock_hold_duration_seconds.
const (
	holdReleased   = "released"    // the request completed; the lock was released
	holdHandedOver = "handed_over" // passed straight to the next local waiter
	holdLost       = "lost"        // lost while the request ran (expired, taken, max_hold, force release)
	holdDrained    = "drained"     // the request was cut short; released after one more ttl
)

// holdBuckets run exponentially (x2.5) from 1ms to about 1.6h (5821s): a 2ms API call
// and an hour-long stream both land in a bucket of their own order of magnitude, in 18
// buckets per label.
var holdBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 18)

var (
	holdHist = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "hold_duration_seconds",
		Help:    "How long requests held their lock, by lock mode (exclusive, shared, limit) and how the hold ended: released, handed_over, lost, drained.",
		Buckets: holdBuckets,
	}, []string{"name", "mode", "how"})
	dryRunTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "dry_run_total",
		Help: "Requests that dry_run served unlocked although they would have waited, been refused or been cut, by reason: busy, unavailable, error, lost.",
	}, []string{"name", "reason"})
)

// opsCollectors are registered with the others by registerMetrics.
var opsCollectors = []prometheus.Collector{holdHist, dryRunTotal}

// observeHold records a hold that ended.
func observeHold(name, mode, how string, held time.Duration) {
	holdHist.WithLabelValues(name, mode, how).Observe(held.Seconds())
}

// countDryRun records a request dry run let through unlocked.
func countDryRun(name, reason string) { dryRunTotal.WithLabelValues(name, reason).Inc() }
