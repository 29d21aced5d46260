package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// child is one process the runner started (a Caddy instance). It runs in its own process
// group and dies with the runner (parent-death signal, from a thread that outlives the
// child). The runner only ever signals its children by their own PID.
type child struct {
	name string
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the child was reaped
	err  error
}

var (
	childrenMu sync.Mutex
	children   = map[*child]bool{}
)

// startChild starts bin with args; stdout and stderr go to logPath.
func startChild(name, bin string, args, env []string, dir, logPath string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	// Pdeathsig fires when the forking thread exits: this goroutine keeps its thread
	// locked until the child has exited, so the signal comes only when the runner dies.
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded with the goroutine
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	childrenMu.Lock()
	children[c] = true
	childrenMu.Unlock()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the child's PID, never to a recycled one.
func (c *child) signal(sig syscall.Signal) error {
	if c.exited() {
		return fmt.Errorf("%s (pid %d) has exited: %v", c.name, c.pid, c.err)
	}
	return syscall.Kill(c.pid, sig)
}

// stop ends the child: SIGCONT (in case it is paused) and SIGTERM, then SIGKILL.
func (c *child) stop(grace time.Duration) {
	childrenMu.Lock()
	delete(children, c)
	childrenMu.Unlock()
	if c.exited() {
		return
	}
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	_ = syscall.Kill(c.pid, syscall.SIGCONT)
	select {
	case <-c.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(c.pid, syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

// stopChildren stops every child still running, in parallel.
func stopChildren() {
	childrenMu.Lock()
	list := make([]*child, 0, len(children))
	for c := range children {
		list = append(list, c)
	}
	childrenMu.Unlock()
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Go(func() { c.stop(5 * time.Second) })
	}
	wg.Wait()
}
