package childproc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/testwait"
)

// A real child: its output goes to the log, it can be paused and resumed by PID, Stop
// ends it even while it is paused and ignores SIGTERM, and a reaped child is not
// signalled again.
func TestStartSignalStop(t *testing.T) {
	log := filepath.Join(t.TempDir(), "child.log")
	// Ignores SIGTERM: Stop must fall back to SIGKILL after the grace period.
	c, err := Start("sh", "/bin/sh", []string{"-c", `trap "" TERM; echo started; while :; do sleep 0.05; done`}, nil, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if !testwait.Eventually(5*time.Second, func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "started")
	}) {
		t.Fatal("no output in the log")
	}
	if err := c.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c.Stop(200 * time.Millisecond)
	if !c.Exited() || c.Err() == nil {
		t.Fatalf("after Stop: exited %v, err %v", c.Exited(), c.Err())
	}
	if err := c.Signal(syscall.SIGCONT); err == nil {
		t.Fatal("a reaped child was signalled")
	}
}

// StopAll ends every child still running.
func TestStopAll(t *testing.T) {
	dir := t.TempDir()
	var cs []*Child
	for range 3 {
		c, err := Start("sleep", "sleep", []string{"30"}, nil, dir, filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	StopAll(time.Second)
	for _, c := range cs {
		if !c.Exited() {
			t.Fatalf("pid %d still running after StopAll", c.PID())
		}
	}
}
