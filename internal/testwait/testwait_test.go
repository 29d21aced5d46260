package testwait

import (
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	n := 0
	if !Eventually(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("a condition that holds on the third poll: polled %d times", n)
	}
	start := time.Now()
	n = 0
	if Eventually(50*time.Millisecond, func() bool { n++; return false }) {
		t.Fatal("a condition that never holds held")
	}
	if d := time.Since(start); d < 50*time.Millisecond || n < 2 {
		t.Fatalf("gave up after %v and %d polls, want the whole timeout", d, n)
	}
	n = 0
	if !Eventually(0, func() bool { n++; return true }) || n != 1 {
		t.Fatalf("a timeout of 0: polled %d times, want once", n)
	}
}
