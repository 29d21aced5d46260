package sim

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// RESP2, the node's side: requests in (arrays of bulk strings, or inline commands),
// replies out.

// reply is one RESP2 reply.
type reply struct {
	kind byte // '+' status, '-' error, ':' integer, '$' bulk, '*' array; 0: the nil bulk
	s    string
	i    int64
	arr  []reply
}

var (
	nilReply = reply{}
	okReply  = reply{kind: '+', s: "OK"}
)

func bulk(s string) reply     { return reply{kind: '$', s: s} }
func integer(i int64) reply   { return reply{kind: ':', i: i} }
func errReply(s string) reply { return reply{kind: '-', s: s} }
func array(a ...reply) reply  { return reply{kind: '*', arr: a} }

func (r reply) isErr() bool { return r.kind == '-' }

// append writes r to b in RESP2.
func (r reply) append(b []byte) []byte {
	switch r.kind {
	case 0:
		return append(b, "$-1\r\n"...)
	case '+', '-':
		b = append(b, r.kind)
		b = append(b, r.s...)
		return append(b, "\r\n"...)
	case ':':
		b = append(b, ':')
		b = strconv.AppendInt(b, r.i, 10)
		return append(b, "\r\n"...)
	case '$':
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(r.s)), 10)
		b = append(b, "\r\n"...)
		b = append(b, r.s...)
		return append(b, "\r\n"...)
	case '*':
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(len(r.arr)), 10)
		b = append(b, "\r\n"...)
		for _, e := range r.arr {
			b = e.append(b)
		}
		return b
	}
	panic(fmt.Sprintf("sim: reply kind %q", r.kind))
}

// String renders r for traces and the conformance test.
func (r reply) String() string {
	switch r.kind {
	case 0:
		return "(nil)"
	case '+':
		return "+" + r.s
	case '-':
		return "-" + r.s
	case ':':
		return strconv.FormatInt(r.i, 10)
	case '$':
		return strconv.Quote(r.s)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range r.arr {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.String())
	}
	b.WriteByte(']')
	return b.String()
}

var errIncomplete = errors.New("incomplete")

// parseRequest reads one request from b: its arguments and how many bytes it took, or
// errIncomplete.
func parseRequest(b []byte) ([]string, int, error) {
	if len(b) == 0 {
		return nil, 0, errIncomplete
	}
	if b[0] != '*' {
		// Inline command.
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return nil, 0, errIncomplete
		}
		return stringsFields(string(b[:i])), i + 2, nil
	}
	n, pos, err := parseLen(b, 1)
	if err != nil {
		return nil, 0, err
	}
	// The arguments' bounds first, then one string of the whole request that they all
	// slice: one allocation per request, not one per argument.
	bounds := make([][2]int, 0, n)
	for range n {
		if pos >= len(b) {
			return nil, 0, errIncomplete
		}
		if b[pos] != '$' {
			return nil, 0, fmt.Errorf("protocol error: expected '$', got %q", b[pos])
		}
		l, p, err := parseLen(b, pos+1)
		if err != nil {
			return nil, 0, err
		}
		if p+l+2 > len(b) {
			return nil, 0, errIncomplete
		}
		bounds = append(bounds, [2]int{p, p + l})
		pos = p + l + 2
	}
	whole := string(b[:pos])
	args := make([]string, n)
	for i, bd := range bounds {
		args[i] = whole[bd[0]:bd[1]]
	}
	return args, pos, nil
}

// parseLen reads a decimal length terminated by CRLF at b[i:].
func parseLen(b []byte, i int) (int, int, error) {
	j := bytes.Index(b[i:], []byte("\r\n"))
	if j < 0 {
		return 0, 0, errIncomplete
	}
	n, err := strconv.Atoi(string(b[i : i+j]))
	if err != nil {
		return 0, 0, fmt.Errorf("protocol error: bad length %q", b[i:i+j])
	}
	return n, i + j + 2, nil
}

func stringsFields(s string) []string {
	var out []string
	for _, f := range bytes.Fields([]byte(s)) {
		out = append(out, string(f))
	}
	return out
}
