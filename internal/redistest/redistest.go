// Package redistest runs real redis-server processes on free loopback ports
// for tests and demo/chaos tools.
//
// In a test:
//
//	servers := redistest.StartN(t, 5)        // stopped automatically by t.Cleanup
//	urls := redistest.URLs(servers)          // "redis://127.0.0.1:PORT", ...
//	_ = servers[0].Pause()                   // SIGSTOP: the server hangs
//	_ = servers[0].Resume()                  // SIGCONT: it answers again
//	_ = servers[1].Restart()                 // same port, empty dataset, new run_id
//
// Real deployments (tls.go, command.go, acl.go):
//
//	pki := redistest.NewPKI(t, "redis.test")  // CA, server and client certificates, made now
//	tlsServers := redistest.StartN(t, 3, redistest.Options{TLS: pki, TLSAuthClients: true})
//	_ = tlsServers[0].URL()                   // "rediss://127.0.0.1:PORT"
//	_ = servers[0].SocketURL()                // "unix:///tmp/redistest-.../redis.sock"
//	_, _ = servers[0].Command("ACL", "SETUSER", "u", "on", ">pw", "~p:*", "+get")
//	_, _ = servers[0].Command(redistest.DocsACLSetUser(t, "u", "pw")...) // docs/connecting.md's user (acl.go)
//
// Without a testing.T (the caller must Stop every server):
//
//	servers, err := redistest.New(3, redistest.Options{Args: []string{"--requirepass", "x"}})
//	defer func() { for _, s := range servers { s.Stop() } }()
//
// Every server runs without persistence (--save "" --appendonly no) in its
// own temporary directory and its own process group. The servers die with
// the test binary even if it is killed (Linux parent-death signal), and Stop
// removes the temporary directory. redis-server must be on PATH; on Debian or
// Ubuntu: apt-get install -y redis-server.
//
// A Server's methods are safe for concurrent use.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-redlock/caddy-redlock/internal/childproc"
)

// Options for starting servers.
type Options struct {
	// Args are extra redis-server arguments, appended after the defaults,
	// e.g. {"--maxmemory", "1mb", "--requirepass", "x"}.
	Args []string
	// TLS, if set, makes the servers listen with TLS only (tls-port; the plain port is
	// off), with certificates from this PKI (NewPKI). URL then returns rediss://.
	TLS *PKI
	// TLSAuthClients requires a client certificate signed by the PKI's CA (mutual TLS,
	// tls-auth-clients yes). Without it client certificates are optional.
	TLSAuthClients bool
}

const (
	binaryName = "redis-server"

	readyTimeout    = 5 * time.Second        // per launch, until the server answers PING
	newPortAttempts = 5                      // fresh ports tried when a port turns out to be taken
	samePortRetry   = 3 * time.Second        // Start after Kill: how long to retry a busy port
	stopGrace       = 2 * time.Second        // SIGTERM -> SIGKILL
	exitTimeout     = 10 * time.Second       // after SIGKILL, before giving up waiting
	pauseTimeout    = 2 * time.Second        // until /proc reports the process stopped
	pingDialTimeout = 500 * time.Millisecond // readiness probe
	pingIOTimeout   = time.Second            // readiness probe
	logTailBytes    = 2048
	maxUnixPathLen  = 100 // sun_path is 108 bytes on Linux
)

var errPortInUse = errors.New("port already in use")

// proc is one run of redis-server. done is closed once the process has
// been reaped; err is written before that.
type proc struct {
	cmd  *exec.Cmd
	pid  int
	done <-chan struct{}
	err  error
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group of p (redis-server and any
// child it forked). It does nothing once p has been reaped, so a recycled
// pid is never signalled.
func (p *proc) signalGroup(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// wait waits up to d for p to be reaped.
func (p *proc) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	bin  string
	dir  string
	args []string // Options.Args
	port int
	tls  *PKI // nil: plain TCP
	mtls bool // tls-auth-clients yes

	mu      sync.Mutex
	p       *proc // nil when not started or killed
	paused  bool
	stopped bool
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns "redis://127.0.0.1:PORT", or "rediss://127.0.0.1:PORT" for a TLS server.
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Port returns the TCP port. It stays the same across Kill/Start/Restart.
func (s *Server) Port() int { return s.port }

// Running reports whether the process is alive (paused or not).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil && !s.p.exited()
}

// Paused reports whether the process is alive and stopped by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused && s.p != nil && !s.p.exited()
}

// Pause stops the process with SIGSTOP: connections are accepted by the
// kernel but nothing is answered. It returns once the process is stopped.
// Pausing a paused server is a no-op; pausing a server that is not running
// is an error.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		return fmt.Errorf("redistest: pause %s: server is not running", s.Addr())
	}
	if s.paused {
		return nil
	}
	if err := s.p.signalGroup(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redistest: pause %s: %w", s.Addr(), err)
	}
	s.paused = true
	if err := waitStopped(s.p, pauseTimeout); err != nil {
		return fmt.Errorf("redistest: pause %s: %w", s.Addr(), err)
	}
	return nil
}

// Resume continues a paused process with SIGCONT. It is a no-op when the
// server is not paused or not running.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		s.paused = false
		return nil
	}
	if err := s.p.signalGroup(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redistest: resume %s: %w", s.Addr(), err)
	}
	s.paused = false
	return nil
}

// Kill kills the process with SIGKILL (paused or not) and waits for it to
// exit. The dataset is lost. Killing a server that is not running is a
// no-op. The port stays reserved for Start.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		return fmt.Errorf("redistest: kill %s: %w", s.Addr(), err)
	}
	return nil
}

func (s *Server) killLocked() error {
	p := s.p
	if p == nil {
		return nil
	}
	s.p, s.paused = nil, false
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(exitTimeout) {
		return fmt.Errorf("pid %d did not exit %v after SIGKILL", p.pid, exitTimeout)
	}
	return nil
}

// Start starts a killed (or crashed) server again on the same port, with an
// empty dataset and a new run_id, and waits until it answers PING. If the
// port is briefly busy it retries for a few seconds. Starting a running or
// stopped server is an error.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startLocked(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.Addr(), err)
	}
	return nil
}

func (s *Server) startLocked() error {
	if s.stopped {
		return errors.New("server was stopped")
	}
	if s.p != nil {
		if !s.p.exited() {
			return errors.New("server is already running")
		}
		s.p, s.paused = nil, false
	}
	deadline := time.Now().Add(samePortRetry)
	for {
		p, err := s.launch()
		if err == nil {
			s.p = p
			return nil
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart kills the server (if running) and starts it again on the same port.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("redistest: restart %s: server was stopped", s.Addr())
	}
	if err := s.killLocked(); err != nil {
		return fmt.Errorf("redistest: restart %s: %w", s.Addr(), err)
	}
	if err := s.startLocked(); err != nil {
		return fmt.Errorf("redistest: restart %s: %w", s.Addr(), err)
	}
	return nil
}

// Stop terminates the server for good (SIGCONT and SIGTERM, then SIGKILL
// after a short grace period), waits for it and removes the temporary
// directory. It is safe to call more than once. The port stays reserved for
// the rest of the process (retired): a client of a finished test may still be
// dialing it (a lock it holds keeps it alive until the lock ends), and a later
// test's server on that port would take its calls, with the same key prefix.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	if p := s.p; p != nil {
		s.p, s.paused = nil, false
		if err := terminate(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redistest: stop %s: %w", s.Addr(), err)
	}
	return nil
}

// terminate ends p gracefully if it can, forcefully otherwise.
func terminate(p *proc) error {
	// SIGTERM first so it is pending when SIGCONT wakes a paused process.
	errTerm := p.signalGroup(syscall.SIGTERM)
	errCont := p.signalGroup(syscall.SIGCONT)
	if errTerm == nil && errCont == nil && p.wait(stopGrace) {
		return nil
	}
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(exitTimeout) {
		return fmt.Errorf("pid %d did not exit %v after SIGKILL", p.pid, exitTimeout)
	}
	return nil
}

func (s *Server) logPath() string    { return filepath.Join(s.dir, "redis.log") }
func (s *Server) stdoutPath() string { return filepath.Join(s.dir, "stdout.log") }
func (s *Server) dataDir() string    { return filepath.Join(s.dir, "data") }
func (s *Server) sockPath() string   { return filepath.Join(s.dir, "redis.sock") }

// useUnixSocket reports whether readiness is probed over a private unix
// socket. That proves the PING was answered by our process: redis-server
// binds its TCP port before its unix socket and exits if the TCP bind
// fails, so another process that grabbed the same port cannot fool us.
func (s *Server) useUnixSocket() bool {
	if len(s.sockPath()) > maxUnixPathLen {
		return false
	}
	for _, a := range s.args {
		if strings.TrimLeft(a, "-") == "unixsocket" {
			return false
		}
	}
	return true
}

func (s *Server) commandArgs() []string {
	args := append(s.portArgs(),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dataDir(),
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", s.logPath(),
	)
	if s.useUnixSocket() {
		args = append(args, "--unixsocket", s.sockPath())
	}
	return append(args, s.args...)
}

// launch runs redis-server once on s.port and waits until it answers. On
// failure nothing is left running; the error wraps errPortInUse when the
// port was taken.
func (s *Server) launch() (*proc, error) {
	// A fresh data directory guarantees an empty dataset even if a test ran
	// SAVE or enabled persistence through CONFIG SET.
	if err := os.RemoveAll(s.dataDir()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.dataDir(), 0o700); err != nil {
		return nil, err
	}
	logOff := fileSize(s.logPath())
	outOff := fileSize(s.stdoutPath())
	out, err := os.OpenFile(s.stdoutPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy

	cmd := exec.Command(s.bin, s.commandArgs()...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	p := &proc{cmd: cmd}
	done, err := childproc.Fork(cmd, func(err error) { p.err = err }) // dies with the test binary
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p.pid, p.done = cmd.Process.Pid, done

	err = s.waitReady(p)
	if err == nil {
		return p, nil
	}
	// Not ready: make sure nothing is left behind, then explain.
	if kerr := p.signalGroup(syscall.SIGKILL); kerr == nil {
		p.wait(exitTimeout)
	}
	logs := tail(s.logPath(), logOff) + tail(s.stdoutPath(), outOff)
	if strings.Contains(logs, "Address already in use") || strings.Contains(logs, "Failed listening on port") {
		err = fmt.Errorf("%w: %w", errPortInUse, err)
	}
	if logs = strings.TrimSpace(logs); logs == "" {
		logs = "(empty)"
	}
	return nil, fmt.Errorf("redis-server on port %d: %w\nredis log:\n%s", s.port, err, logs)
}

// waitReady polls until p answers PING (or -NOAUTH when a password is set)
// on both its unix socket (when used) and its TCP port.
func (s *Server) waitReady(p *proc) error {
	deadline := time.Now().Add(readyTimeout)
	delay := 2 * time.Millisecond
	unix := s.useUnixSocket()
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("exited during startup: %v", p.err)
		}
		lastErr = nil
		if unix {
			lastErr = ping("unix", s.sockPath())
		}
		if lastErr == nil {
			lastErr = s.pingTCP()
		}
		if lastErr == nil {
			if p.exited() {
				return fmt.Errorf("exited during startup: %v", p.err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering PING after %v: %w", readyTimeout, lastErr)
		}
		time.Sleep(delay)
		delay = min(2*delay, 25*time.Millisecond)
	}
}

// ping sends an inline PING and accepts +PONG or -NOAUTH.
func ping(network, addr string) error {
	c, err := net.DialTimeout(network, addr, pingDialTimeout)
	if err != nil {
		return err
	}
	return pingConn(c)
}

func pingConn(c net.Conn) error {
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(pingIOTimeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
		return nil
	}
	return fmt.Errorf("unexpected PING reply %q", strings.TrimSpace(line))
}

// waitStopped waits until /proc reports p as stopped, so a PING sent right
// after Pause cannot be answered. Without /proc it returns at once.
func waitStopped(p *proc, d time.Duration) error {
	path := fmt.Sprintf("/proc/%d/stat", p.pid)
	deadline := time.Now().Add(d)
	for {
		if p.exited() {
			return errors.New("process exited")
		}
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && p.exited() {
				return errors.New("process exited")
			}
			return nil // no usable /proc: SIGSTOP is still on its way
		}
		// Format: "pid (comm) S ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
			if st := b[i+2]; st == 'T' || st == 't' {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process not stopped after %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tail returns up to logTailBytes of path written after offset from.
func tail(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if size := fileSize(path); size-from > logTailBytes {
		from = size - logTailBytes
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, logTailBytes))
	return string(b)
}

// Ports handed out to Servers of this process, live or stopped, so parallel
// starts never pick the same port twice, a killed server keeps its port, and a
// stopped server's port is never handed out again (Stop).
var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// reservePort finds a free loopback port not used by another Server.
func reservePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, err
		}
		portsMu.Lock()
		taken := ports[port]
		if !taken {
			ports[port] = true
		}
		portsMu.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, errors.New("no free port found")
}

func releasePort(port int) {
	portsMu.Lock()
	delete(ports, port)
	portsMu.Unlock()
}

// lookBinary finds redis-server on PATH.
func lookBinary() (string, error) {
	bin, err := exec.LookPath(binaryName)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found on PATH; install it (e.g. apt-get install -y redis-server): %w", binaryName, err)
	}
	return bin, nil
}

// newServer starts one server on a fresh port, trying other ports when the
// chosen one turns out to be taken.
func newServer(bin string, opt Options) (*Server, error) {
	var lastErr error
	for range newPortAttempts {
		port, err := reservePort()
		if err != nil {
			return nil, fmt.Errorf("redistest: reserve port: %w", err)
		}
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			releasePort(port)
			return nil, fmt.Errorf("redistest: temp dir: %w", err)
		}
		s := &Server{bin: bin, dir: dir, port: port, args: append([]string(nil), opt.Args...),
			tls: opt.TLS, mtls: opt.TLSAuthClients}
		p, err := s.launch()
		if err == nil {
			s.p = p
			return s, nil
		}
		releasePort(port)
		_ = os.RemoveAll(dir)
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	return nil, fmt.Errorf("redistest: start server: %w", lastErr)
}

// New starts n servers in parallel without a testing.T (for demo and chaos
// tools). The caller must Stop them. On error nothing is left running.
func New(n int, opt Options) ([]*Server, error) {
	if n < 0 {
		return nil, fmt.Errorf("redistest: invalid server count %d", n)
	}
	bin, err := lookBinary()
	if err != nil {
		return nil, err
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = newServer(bin, opt) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopAll(servers)
		return nil, err
	}
	return servers, nil
}

// stopAll stops the non-nil servers in parallel.
func stopAll(servers []*Server) []error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s != nil {
			wg.Go(func() { errs[i] = s.Stop() })
		}
	}
	wg.Wait()
	return errs
}

// StartN starts n servers for a test and stops them in t.Cleanup (paused
// servers are resumed first so they can shut down). Extra Options are
// merged (their Args concatenated). If redis-server is not on PATH, or a
// server cannot be started, the test fails with t.Fatalf.
func StartN(t testing.TB, n int, opt ...Options) []*Server {
	t.Helper()
	var o Options
	for _, x := range opt {
		o.Args = append(o.Args, x.Args...)
		if x.TLS != nil {
			o.TLS = x.TLS
		}
		o.TLSAuthClients = o.TLSAuthClients || x.TLSAuthClients
	}
	if _, err := lookBinary(); err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	servers, err := New(n, o)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() {
		for _, err := range stopAll(servers) {
			if err != nil {
				t.Errorf("%v", err)
			}
		}
	})
	return servers
}

// URLs returns the URL of each server.
func URLs(servers []*Server) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL()
	}
	return urls
}
