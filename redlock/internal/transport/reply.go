package transport

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Reply is one command's answer: its value (as go-redis decodes RESP2: int64, string,
// []any, nil) and its error. It is a small value: passing it costs no allocation.
type Reply struct {
	val  any
	err  error
	then *Reply // the reply of the command's Then, nil without one
}

// errNoThen is Then's error for a command sent without a Then.
var errNoThen = errors.New("redlock: no reply to a Then: none was sent")

// Then is the reply of the command sent behind this one (Command.Then).
func (r Reply) Then() Reply {
	if r.then == nil {
		return Reply{err: errNoThen}
	}
	return *r.then
}

// NewReply makes a Reply (tests build synthetic replies with it).
func NewReply(val any, err error) Reply { return Reply{val: val, err: err} }

// replyOf copies what go-redis read for cmd.
func replyOf(cmd *redis.Cmd) Reply { return Reply{val: cmd.Val(), err: cmd.Err()} }

// Err is the command's error: a Redis error reply, a connection failure, a
// *ConfigError, or the nil reply (IsNil).
func (r Reply) Err() error { return r.err }

// Val is the value, nil with an error.
func (r Reply) Val() any { return r.val }

// IsNil reports whether the node answered the nil reply (GET of a missing key).
func (r Reply) IsNil() bool { return errors.Is(r.err, redis.Nil) }

// Int64 reads an integer reply (or a string holding one).
func (r Reply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	return toInt64(r.val)
}

// Text reads a string reply.
func (r Reply) Text() (string, error) {
	if r.err != nil {
		return "", r.err
	}
	return toString(r.val)
}

// Slice reads an array reply.
func (r Reply) Slice() ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	s, ok := r.val.([]any)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected type=%T for Slice", r.val)
	}
	return s, nil
}

// Int64Slice reads an array of integers.
func (r Reply) Int64Slice() ([]int64, error) {
	s, err := r.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(s))
	for i, v := range s {
		if out[i], err = toInt64(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StringSlice reads an array of strings.
func (r Reply) StringSlice() ([]string, error) {
	s, err := r.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(s))
	for i, v := range s {
		if out[i], err = toString(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// toInt64 and toString convert as go-redis's Cmd does (the messages too).
func toInt64(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redis: unexpected type=%T for Int64", v)
}

func toString(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("redis: unexpected type=%T for String", v)
}
