package redlock

import (
	"errors"
	"strings"
	"time"
)

// Keys in Redis: the lock is prefix+key (plain, for interoperability). The fencing counter
// and the release channel append a NUL-separated suffix; keys may not contain NUL, so no
// lock key can ever collide with another key's counter or channel.
const (
	counterSuffix = "\x00fence"
	channelSuffix = "\x00released"
	// Shared locks only (readgroup.go, "Shared locks"): the readers' set, the mark of a
	// writer waiting for the readers to leave, and the mark of readers waiting for a
	// writer (then the readers' turn after its release).
	readersSuffix = "\x00readers"
	writerSuffix  = "\x00writer"
	turnSuffix    = "\x00readturn"
	// boundName follows the prefix directly: no key is empty, so no lock, counter or
	// channel name can equal it.
	boundName = "\x00max_ttl"
)

func validateKey(key string) error {
	if key == "" {
		return errors.New("redlock: empty key")
	}
	if strings.IndexByte(key, 0) >= 0 {
		return errors.New("redlock: key contains a NUL byte")
	}
	return nil
}

// names is where a lock lives in Redis. shared: the lock is a reader's entry in the
// readers' set, not the value of the lock name.
type names struct {
	lock, counter, channel, readers, writer, turn string
	shared                                        bool
}

func (c *Client) names(key string) names {
	lk := c.opt.Prefix + key
	return names{lock: lk, counter: lk + counterSuffix, channel: lk + channelSuffix,
		readers: lk + readersSuffix, writer: lk + writerSuffix, turn: lk + turnSuffix}
}

// probeName is the permission probe's key and channel (transport's probe.go): under the
// prefix, NUL-separated from every lock key (keys cannot contain NUL).
func (c *Client) probeName() string { return c.opt.Prefix + "\x00probe" }

// boundKey is where the nodes keep the longest ttl any client may use (voting.go).
func (c *Client) boundKey() string { return c.boundK }

// boundExpiry is how long a MaxTTL announcement lives on a node: far longer than the
// health interval that renews it, and than any lock it covers.
func boundExpiry(maxTTL time.Duration) time.Duration { return 2*maxTTL + time.Hour }
