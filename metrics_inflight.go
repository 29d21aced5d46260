package caddyredlock

import "github.com/prometheus/client_golang/prometheus"

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
