package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// child is one process the bench started (redis-server, caddy, a proxy). Every child runs
// in its own process group and dies with the bench (parent-death signal); stopAll ends the
// ones still running, by PID, on exit or on SIGINT/SIGTERM.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

var (
	childrenMu sync.Mutex
	children   = map[*child]bool{}
)

// startChild starts bin with args; stdout and stderr go to logPath.
func startChild(name, bin string, args, env []string, logPath string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	childrenMu.Lock()
	children[c] = true
	childrenMu.Unlock()
	return c, nil
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child is gone.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's own process group, then SIGKILL after a grace period.
func (c *child) stop() {
	childrenMu.Lock()
	delete(children, c)
	childrenMu.Unlock()
	if c.exited() {
		return
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGTERM)
	select {
	case <-c.done:
		return
	case <-time.After(3 * time.Second):
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
	}
}

// stopAll stops every child still running, in parallel.
func stopAll() {
	childrenMu.Lock()
	list := make([]*child, 0, len(children))
	for c := range children {
		list = append(list, c)
	}
	childrenMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Go(c.stop)
	}
	wg.Wait()
}

// cleanupOnSignal stops all children and runs extra cleanup when the bench is interrupted.
func cleanupOnSignal(extra func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "\nbench: %v: stopping child processes\n", s)
		stopAll()
		extra()
		os.Exit(130)
	}()
}

// errExited is returned when a child dies while we wait for it to become ready.
var errExited = errors.New("process exited")
