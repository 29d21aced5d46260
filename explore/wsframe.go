package main

// A minimal RFC 6455 codec for the websocket shape (websocket.go): the handshake's
// accept key and single-frame messages (text, close), masked from the client. Hand-rolled
// rather than golang.org/x/net/websocket (x/net is in go.mod) so that the explorer's
// client and upstream control exactly how a tunnel ends, which is what the lock judges
// by: a close handshake, a FIN without one, a reset (SO_LINGER 0).

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
)

const (
	opText  = 0x1
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// wsGUID is RFC 6455's fixed suffix of the accept key.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

func wsKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// wsFrame is one frame read: its opcode and (unmasked) payload.
type wsFrame struct {
	op      byte
	payload []byte
}

// errFrameTooLong: the explorer's messages are short; anything longer is a broken stream.
var errFrameTooLong = errors.New("websocket frame over 64 KiB")

// readFrame reads one frame (FIN assumed: the explorer never fragments).
func readFrame(r *bufio.Reader) (wsFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return wsFrame{}, err
	}
	f := wsFrame{op: h[0] & 0x0f}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return f, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return f, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 64<<10 {
		return f, errFrameTooLong
	}
	var mask [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, mask[:]); err != nil {
			return f, err
		}
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return f, err
	}
	if masked {
		for i := range f.payload {
			f.payload[i] ^= mask[i%4]
		}
	}
	return f, nil
}

// frame encodes one final frame; a client's is masked (RFC 6455 5.3).
func frame(op byte, payload []byte, client bool) []byte {
	b := []byte{0x80 | op}
	m := byte(0)
	if client {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !client {
		return append(b, payload...)
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	b = append(b, mask[:]...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	return b
}

// closePayload is a close frame's body: status 1000, normal closure.
var closePayload = []byte{0x03, 0xe8}
