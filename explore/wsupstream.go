package main

// The upstream's websocket endpoint (the websocket shape: websocket.go). An upgrade
// request is one piece of work, logged from its arrival to the moment the upstream is
// done with the tunnel: it echoes each text message with a chunk line (logged as written,
// like a streamed chunk), and ends on a close handshake (either side's), or, when the
// tunnel breaks without one (Caddy closed it: a loss, stream_timeout, a client's reset),
// at once if attentive, or after going on for d if deaf (the upstream still working on
// the last message). Its end is logged before it closes its side: the close is what
// tells Caddy the upstream is done.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// wsIdle bounds a tunnel that hears nothing (never reached by a case: work is bounded).
const wsIdle = 5 * time.Second

// isWebsocket: a websocket upgrade, as reverse_proxy passes it on.
func isWebsocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func (l *ledger) serveWS(w http.ResponseWriter, r *http.Request, via string) {
	wk := l.begin(r, via)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		l.finish(wk, endCancelled)
		return
	}
	l.conns.Store(conn, nil) // ledger.close closes it: http.Server.Close does not
	defer l.conns.Delete(conn)
	how := endCancelled
	_, err = fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if err == nil {
		how = l.converse(wk, conn, brw.Reader)
	}
	l.finish(wk, how)
	_ = conn.Close()
}

// converse runs the tunnel's conversation and says how the work ended.
func (l *ledger) converse(wk *work, conn net.Conn, br *bufio.Reader) string {
	echoes := 0
	for {
		_ = conn.SetReadDeadline(time.Now().Add(wsIdle))
		f, err := readFrame(br)
		if err != nil {
			return wsBroken(wk)
		}
		switch f.op {
		case opClose: // the client's close: answered, and the upstream is done
			_, _ = conn.Write(frame(opClose, closePayload, false))
			return endCompleted
		case opPing:
			_, _ = conn.Write(frame(opPong, f.payload, false))
		case opText:
			if wk.spec.close && echoes >= 2 {
				// The upstream ends the conversation: its close, then the client's (bounded).
				_, _ = conn.Write(frame(opClose, closePayload, false))
				_ = conn.SetReadDeadline(time.Now().Add(time.Second))
				for {
					if f, err := readFrame(br); err != nil || f.op == opClose {
						return endCompleted
					}
				}
			}
			if _, err := conn.Write(frame(opText, []byte(l.chunk(wk)), false)); err != nil {
				return wsBroken(wk)
			}
			echoes++
		}
	}
}

// wsBroken: the tunnel broke without a close handshake. Deaf work goes on for d (at
// most deafMax) before the upstream closes its side.
func wsBroken(wk *work) string {
	if !wk.spec.deaf {
		return endCancelled
	}
	time.Sleep(min(wk.spec.d, deafMax))
	return endCompleted
}
