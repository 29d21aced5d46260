package main

// The websocket shape's client (websocket.go): an HTTP/1.1 upgrade over a connection of
// its own, then wsMsgs text messages wsGap apart, each echoed by the upstream with a
// chunk line (read back as a streamed response's chunks are). It ends the tunnel with a
// close handshake after its messages, answers the upstream's close, or leaves after
// wsLeave messages without one: a FIN, or with wsReset a reset (SO_LINGER 0).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const clientWS = "ws"

func (cl *clients) sendWS(base, lane string, q request) (o outcome) {
	o = outcome{req: q.id, sent: time.Now()}
	defer func() { o.ended = time.Now() }()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		o.err = err.Error()
		return o
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second)) // bounded, as the HTTP clients are
	key := wsKey()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nX-Req-Id: %s\r\nX-Work: %s\r\n\r\n",
		q.path(lane), host, key, q.id, q.work); err != nil {
		o.err = err.Error()
		return o
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		o.err = "handshake: " + err.Error()
		return o
	}
	o.status = resp.StatusCode
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_, _ = io.Copy(io.Discard, resp.Body) // a refusal (423, 503): no tunnel
		_ = resp.Body.Close()
		return o
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
		o.err = "handshake: wrong Sec-WebSocket-Accept"
		return o
	}

	var wmu sync.Mutex
	send := func(op byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := conn.Write(frame(op, p, true))
		return err
	}
	var sentClose atomic.Bool
	closeSeen, readDone := make(chan struct{}), make(chan struct{})
	var lines []string
	var gotClose bool
	var rerr error
	go func() {
		defer close(readDone)
		for {
			f, err := readFrame(br)
			if err != nil {
				rerr = err
				return
			}
			switch f.op {
			case opText:
				lines = append(lines, string(f.payload))
			case opClose:
				if !gotClose {
					gotClose = true
					close(closeSeen)
					if !sentClose.Swap(true) {
						_ = send(opClose, closePayload) // the upstream's close, answered
					}
				}
			}
		}
	}()

	left := false
	leave := func() {
		if q.wsReset {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
		_ = conn.Close()
		left = true
	}
talk:
	for i := range q.wsMsgs {
		if q.wsLeave > 0 && i == q.wsLeave {
			leave()
			break
		}
		if send(opText, fmt.Appendf(nil, "msg %d", i)) != nil {
			break
		}
		select {
		case <-time.After(q.wsGap):
		case <-closeSeen:
			break talk
		case <-readDone:
			break talk
		}
	}
	if !left && !sentClose.Swap(true) {
		_ = send(opClose, closePayload)
	}
	if !left {
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	}
	<-readDone
	for _, l := range lines {
		o.readLine(strings.TrimSpace(l))
	}
	switch {
	case left:
		o.aborted = true
	case gotClose && errors.Is(rerr, io.EOF):
		o.whole = true // a close handshake, and the connection's clean end
	case gotClose:
		o.err = "after the close handshake: " + rerr.Error()
	default:
		o.err = fmt.Sprintf("tunnel cut without a close frame: %v", rerr)
	}
	return o
}
