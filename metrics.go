package caddyredlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// Prometheus metrics in Caddy's registry (served at the admin API's /metrics): the
// collectors and their registration, the counting helpers the handler calls, the gauges
// read from the request table at scrape time (inflightCollector), and the node-call
// counter (callMetrics) that counts every redlock client's calls and logs a node's transitions.
//
// The collectors are created once for the process: Caddy builds a new registry for every
// config load, so registerMetrics adds the same collectors to each new registry and the
// counts carry on across reloads. Labels are bounded: the blocks' names (from the config
// only: name.go), lock modes, acquire results, lost reasons, renewal results, how a hold
// ended, dry run reasons, node addresses (never with a password) and node operations. Never a lock key, a request URI or a lock value.
// Every collector has the label name, so that one block's series can be told apart.

const metricsNamespace, metricsSubsystem = "caddy", "redlock"

// Buckets: acquiring and waiting run from a millisecond (a free key) to the wait option
// (seconds); node round trips from 100µs (loopback) to node_timeout.
var (
	waitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	rttBuckets  = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	// holdBuckets run exponentially (x2.5) from 1ms to about 1.6h (5821s): a 2ms API call
	// and an hour-long stream both land in a bucket of their own order of magnitude, in 18
	// buckets per label.
	holdBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 18)
)

var metrics = struct {
	acquire    *prometheus.HistogramVec
	wait       *prometheus.HistogramVec
	inflight   prometheus.Collector // held_locks and waiting_requests, by name (inflightCollector)
	renewals   *prometheus.CounterVec
	lost       *prometheus.CounterVec
	hold       *prometheus.HistogramVec // how long requests held their lock, by how the hold ended
	dryRun     *prometheus.CounterVec   // requests dry_run let through unlocked
	nodeErrors *prometheus.CounterVec
	nodeRTT    *prometheus.HistogramVec
}{
	acquire: newHistogram("acquire_duration_seconds",
		"Time a request spent acquiring its lock (waiting included), by lock mode (exclusive, shared, limit) and result: acquired, busy, unavailable, cancelled, bypassed, error.",
		waitBuckets, "name", "mode", "result"),
	wait: newHistogram("wait_seconds",
		"Time a request waited for a key that was taken when it arrived (held by this or another instance), by lock mode and result.",
		waitBuckets, "name", "mode", "result"),
	inflight: inflightCollector{},
	renewals: newCounter("renewals_total",
		"Lock renewals by result: ok, error (transient, retried while validity lasts) or lost.",
		"name", "result"),
	lost: newCounter("locks_lost_total",
		"Held locks lost while their request ran (the request was aborted), by reason: expired, taken, vanished, max_hold, force_released.",
		"name", "reason"),
	hold: newHistogram("hold_duration_seconds",
		"How long requests held their lock, by lock mode (exclusive, shared, limit) and how the hold ended: released, handed_over, lost, drained.",
		holdBuckets, "name", "mode", "how"),
	dryRun: newCounter("dry_run_total",
		"Requests that dry_run served unlocked although they would have waited, been refused or been cut, by reason: busy, unavailable, error, lost.",
		"name", "reason"),
	nodeErrors: newCounter("node_errors_total",
		"Failed commands to a Redis node, by node address and operation.",
		"name", "node", "op"),
	nodeRTT: newHistogram("node_rtt_seconds",
		"Round-trip time of successful commands to a Redis node, by node address and operation.",
		rttBuckets, "name", "node", "op"),
}

// newHistogram and newCounter make a collector named caddy_redlock_<name>.
func newHistogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help, Buckets: buckets,
	}, labels)
}

func newCounter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help,
	}, labels)
}

// nodeCalls counts every redlock client's node calls (through its lockerObserver,
// events.go) and logs nodes' transitions.
var nodeCalls = &callMetrics{failing: map[string]bool{}}

// Acquire outcomes, the result label of the acquire and wait histograms.
const (
	resultAcquired    = "acquired"
	resultBusy        = "busy"
	resultUnavailable = "unavailable"
	resultBypassed    = "bypassed"
	resultCancelled   = "cancelled"
	resultError       = "error"
)

// countAcquire records an acquire outcome.
func countAcquire(name, mode, result string, wait time.Duration) {
	observer(metrics.acquire, name, mode, result).Observe(wait.Seconds())
}

// countWaited records the outcome of a request that found its key taken.
func countWaited(name, mode, result string, wait time.Duration) {
	observer(metrics.wait, name, mode, result).Observe(wait.Seconds())
}

// observers caches the histograms' children by label values. Every request observes two
// (its acquire and its hold), and HistogramVec.WithLabelValues checks each value's UTF-8,
// hashes them and takes the vector's lock on every call (issue 32: about 1% of Caddy's
// CPU under unique keys). The collectors live as long as the process and no child is
// ever deleted, so a cached child stays the one the vector serves; the label values are
// bounded (locker names × modes × outcomes), as the vector's own children are.
var observers struct {
	mu sync.RWMutex
	m  map[observerKey]prometheus.Observer
}

type observerKey struct {
	vec              *prometheus.HistogramVec
	name, mode, what string
}

// observer is vec.WithLabelValues(name, mode, what), cached.
func observer(vec *prometheus.HistogramVec, name, mode, what string) prometheus.Observer {
	k := observerKey{vec, name, mode, what}
	observers.mu.RLock()
	o, ok := observers.m[k]
	observers.mu.RUnlock()
	if ok {
		return o
	}
	o = vec.WithLabelValues(name, mode, what)
	observers.mu.Lock()
	if observers.m == nil {
		observers.m = make(map[observerKey]prometheus.Observer)
	}
	observers.m[k] = o
	observers.mu.Unlock()
	return o
}

// How a hold ended, the label of caddy_redlock_hold_duration_seconds.
const (
	holdReleased   = "released"    // the request completed; the lock was released
	holdHandedOver = "handed_over" // passed straight to the next local waiter
	holdLost       = "lost"        // lost while the request ran (expired, taken, max_hold, force release)
	holdDrained    = "drained"     // the request was cut short; released after one more ttl
)

// observeHold records a hold that ended.
func observeHold(name, mode, how string, held time.Duration) {
	observer(metrics.hold, name, mode, how).Observe(held.Seconds())
}

// countDryRun records a request dry run let through unlocked.
func countDryRun(name, reason string) { metrics.dryRun.WithLabelValues(name, reason).Inc() }

// registerMetrics adds the collectors to a config's registry. Several modules of one
// config register them (every handler, the admin module): the duplicates are expected.
func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{metrics.acquire, metrics.wait, metrics.inflight,
		metrics.renewals, metrics.lost, metrics.hold, metrics.dryRun, metrics.nodeErrors, metrics.nodeRTT} {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return fmt.Errorf("redlock: registering metrics: %w", err)
		}
	}
	return nil
}

// inflightCollector reports caddy_redlock_held_locks and caddy_redlock_waiting_requests
// by name, read from the request table at scrape time. Every locker in use reports its
// series, 0 included, so a block's series do not come and go with its traffic.
type inflightCollector struct{}

var (
	heldDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "held_locks"),
		"Locks this instance holds for requests (draining ones included), by name.", []string{"name"}, nil)
	waitingDesc = prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, metricsSubsystem, "waiting_requests"),
		"Requests of this instance waiting for a lock, by name.", []string{"name"}, nil)
)

func (inflightCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- heldDesc
	ch <- waitingDesc
}

func (inflightCollector) Collect(ch chan<- prometheus.Metric) {
	held, waiting := map[string]int{}, map[string]int{}
	for _, l := range lockers() {
		held[l.name], waiting[l.name] = 0, 0
	}
	requests.mu.Lock()
	for e := range requests.m {
		name := e.owner.label()
		e.mu.Lock()
		switch {
		case isWaiting(e):
			waiting[name]++
		case isHolding(e):
			held[name]++
		}
		e.mu.Unlock()
	}
	requests.mu.Unlock()
	for name, n := range held {
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(n), name)
	}
	for name, n := range waiting {
		ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(n), name)
	}
}

// callMetrics receives the redlock clients' node calls (from their lockerObserver). It must
// not block: it only counts, and logs a node's transitions between answering and
// failing, once each, so a dead node does not flood the log.
type callMetrics struct {
	mu      sync.Mutex
	failing map[string]bool // node address -> its last call failed
	// rtt caches the histogram of each node and operation: every lock makes 2N calls,
	// and WithLabelValues validates and hashes its labels each time.
	rtt map[nodeOp]prometheus.Observer
}

type nodeOp struct{ name, node, op string }

func (o *callMetrics) record(name, node, op string, rtt time.Duration, err error) {
	if errors.Is(err, context.Canceled) {
		return // the caller gave up (a request went away): says nothing about the node
	}
	o.mu.Lock()
	var hist prometheus.Observer
	if err == nil {
		hist = o.rtt[nodeOp{name, node, op}]
		if hist == nil {
			if o.rtt == nil {
				o.rtt = map[nodeOp]prometheus.Observer{}
			}
			hist = metrics.nodeRTT.WithLabelValues(name, node, op)
			o.rtt[nodeOp{name, node, op}] = hist
		}
	}
	was, changed := o.failing[node], o.failing[node] != (err != nil)
	o.failing[node] = err != nil
	o.mu.Unlock()
	if err == nil {
		hist.Observe(rtt.Seconds())
	} else {
		metrics.nodeErrors.WithLabelValues(name, node, op).Inc()
	}
	if !changed {
		return
	}
	log := pluginLog()
	if !was {
		// Node errors name the node and the failure (timeout, refused), never a value.
		log.Warn("redis node not answering", zap.String("node", node), zap.String("op", op), zap.Error(err))
	} else {
		log.Info("redis node answering again", zap.String("node", node), zap.String("op", op),
			zap.Float64("rtt_ms", float64(rtt.Microseconds())/1000))
	}
}

// countRenewal counts one renewal of a lock of the locker name.
func countRenewal(name string, err error) {
	switch {
	case err == nil:
		metrics.renewals.WithLabelValues(name, "ok").Inc()
	case isLost(err):
		metrics.renewals.WithLabelValues(name, "lost").Inc()
	case errors.Is(err, redlock.ErrReleased):
		// released while the renewal was in flight: not an outcome of the renewal
	default:
		metrics.renewals.WithLabelValues(name, "error").Inc()
	}
}
