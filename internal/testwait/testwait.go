// Package testwait is the tests' one way to wait for a condition: poll it until it holds
// or a timeout passes. Both the plugin's tests and the library's use it (each package
// names it eventually), so that a test waits for what it needs, not for a fixed time that
// stands for it (docs/development.md, "Tests").
package testwait

import "time"

// interval is how often Eventually polls: short next to what tests wait for (a round
// trip, a health check, a request), long enough not to load a busy machine.
const interval = 10 * time.Millisecond

// Eventually polls cond every 10ms until it holds or timeout passes, and reports whether
// it held. cond runs at least once, also with a timeout of 0. The caller says what failed:
// the condition's closure can keep the last state it saw for the message.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
