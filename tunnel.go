package caddyredlock

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
)

// Upgraded connections (websockets, any Connection: Upgrade) need their own watch: when
// reverse_proxy's tunnel ends, ServeHTTP returns nil however it ended, and net/http never
// cancels a hijacked request's context. The tunnel ends early on a client read error (a
// reset) or on its own stream_timeout, closing the backend connection while the upstream
// may still be working on the last message it got; it ends cleanly only when both
// directions saw their end of stream (Caddy's switchProtocolCopier: the client's EOF is
// passed on to the backend with CloseWrite, the backend's EOF to the client the same way).
// So the tunnel is watched on the client's side (the connection exchange.Hijack hands
// out): a clean end is the client's EOF read AND the backend's end passed to the client
// (CloseWrite on the client connection); anything else is an exchange cut short, and its
// lock drains (finish, endOf).

// tunnelKind is what a request may turn into.
type tunnelKind int

const (
	noTunnel       tunnelKind = iota
	upgradeTunnel             // HTTP/1.1 Upgrade: the connection is hijacked (watched here)
	extendedTunnel            // HTTP/2 or /3 extended CONNECT websocket: no hijack to watch
)

// tunnelOf says whether r asks for a tunnel, as reverse_proxy decides it.
func tunnelOf(r *http.Request) tunnelKind {
	switch {
	case r.Method == http.MethodConnect && r.ProtoMajor == 2 && r.Header.Get(":protocol") != "",
		r.Method == http.MethodConnect && r.ProtoMajor == 3 && r.Proto == "websocket":
		return extendedTunnel
	case httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") && r.Header.Get("Upgrade") != "":
		return upgradeTunnel
	}
	return noTunnel
}

// tunnelEnd is how a request's tunnel ended, as finish judges it.
type tunnelEnd int

const (
	tunnelNone  tunnelEnd = iota // no tunnel was opened: an ordinary exchange
	tunnelClean                  // both sides ended their streams
	tunnelCut                    // ended otherwise (reset, stream_timeout, shutdown), or cannot be told
)

// watchedConn is the client's side of a tunnel (exchange.Hijack hands it out): it
// records the client's end of stream and the backend's end passed on to the client, and
// refuses writes once the request's lock is lost. It exposes only net.Conn's methods and
// CloseWrite, so io.Copy goes through Read and Write.
type watchedConn struct {
	net.Conn
	readEOF  atomic.Bool // the client closed its side cleanly (FIN)
	wroteEOF atomic.Bool // the backend's end of stream was passed on to the client
	x        *exchange   // whose loss refuses writes
}

func (c *watchedConn) Write(p []byte) (int, error) {
	if le := c.x.lostNow(); le != nil {
		return 0, refused(le)
	}
	return c.Conn.Write(p)
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == io.EOF {
		c.readEOF.Store(true)
	}
	return n, err
}

// CloseWrite passes the backend's end of stream to the client, where the connection can.
func (c *watchedConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported // as a connection without CloseWrite: the tunnel ends
	}
	err := cw.CloseWrite()
	if err == nil {
		c.wroteEOF.Store(true)
	}
	return err
}
