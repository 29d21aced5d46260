package caddyredlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/caddy-redlock/caddy-redlock/redlock"
)

// Prometheus metrics in Caddy's registry (served at the admin API's /metrics).
//
// The collectors are created once for the process: Caddy builds a new registry for every
// config load, so registerMetrics adds the same collectors to each new registry and the
// counts carry on across reloads. Labels are bounded: the blocks' names (from the config
// only: name.go), acquire results, lost reasons, renewal results, node addresses (never
// with a password) and node operations. Never a lock key, a request URI or a lock value.
// Every collector has the label name, so that one block's series can be told apart.

const metricsNamespace, metricsSubsystem = "caddy", "redlock"

// Buckets: acquiring and waiting run from a millisecond (a free key) to the wait option
// (seconds); node round trips from 100µs (loopback) to node_timeout.
var (
	waitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	rttBuckets  = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

var metrics = struct {
	acquire    *prometheus.HistogramVec
	wait       *prometheus.HistogramVec
	inflight   prometheus.Collector // held_locks and waiting_requests, by name (inflightCollector)
	renewals   *prometheus.CounterVec
	lost       *prometheus.CounterVec
	nodeErrors *prometheus.CounterVec
	nodeRTT    *prometheus.HistogramVec
}{
	acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "acquire_duration_seconds",
		Help:    "Time a request spent acquiring its lock (waiting included), by lock mode (exclusive, shared, limit) and result: acquired, busy, unavailable, cancelled, bypassed, error.",
		Buckets: waitBuckets,
	}, []string{"name", "mode", "result"}),
	wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "wait_seconds",
		Help:    "Time a request waited for a key that was taken when it arrived (held by this or another instance), by lock mode and result.",
		Buckets: waitBuckets,
	}, []string{"name", "mode", "result"}),
	inflight: inflightCollector{},
	renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "renewals_total",
		Help: "Lock renewals by result: ok, error (transient, retried while validity lasts) or lost.",
	}, []string{"name", "result"}),
	lost: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "locks_lost_total",
		Help: "Held locks lost while their request ran (the request was aborted), by reason: expired, taken, vanished, max_hold, force_released.",
	}, []string{"name", "reason"}),
	nodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "node_errors_total",
		Help: "Failed commands to a Redis node, by node address and operation.",
	}, []string{"name", "node", "op"}),
	nodeRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "node_rtt_seconds",
		Help:    "Round-trip time of successful commands to a Redis node, by node address and operation.",
		Buckets: rttBuckets,
	}, []string{"name", "node", "op"}),
}

// nodeObserver counts every redlock client's node calls (through its lockerObserver,
// events.go) and logs nodes' transitions.
var nodeObserver = &observer{failing: map[string]bool{}}

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
	metrics.acquire.WithLabelValues(name, mode, result).Observe(wait.Seconds())
}

// countWaited records the outcome of a request that found its key taken.
func countWaited(name, mode, result string, wait time.Duration) {
	metrics.wait.WithLabelValues(name, mode, result).Observe(wait.Seconds())
}

// registerMetrics adds the collectors to a config's registry. Several modules of one
// config register them (every handler, the admin module): the duplicates are expected.
func registerMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range append([]prometheus.Collector{metrics.acquire, metrics.wait, metrics.inflight,
		metrics.renewals, metrics.lost, metrics.nodeErrors, metrics.nodeRTT}, opsCollectors...) {
		var already prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &already) {
			return fmt.Errorf("redlock: registering metrics: %w", err)
		}
	}
	return nil
}

// observer receives the redlock clients' node calls (from their lockerObserver). It must not block: it only counts, and logs a node's
// transitions between answering and failing, once each, so a dead node does not flood
// the log.
type observer struct {
	mu      sync.Mutex
	failing map[string]bool // node address -> its last call failed
	// rtt caches the histogram of each node and operation: every lock makes 2N calls,
	// and WithLabelValues validates and hashes its labels each time.
	rtt map[nodeOp]prometheus.Observer
}

type nodeOp struct{ name, node, op string }

func (o *observer) nodeCall(name, node, op string, rtt time.Duration, err error) {
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
	log := caddy.Log().Named("http.handlers.redlock")
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
