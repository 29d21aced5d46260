package redlock

import (
	"errors"
	"strings"
)

// Keys in Redis: the lock is prefix+key (plain, for interoperability). The fencing counter
// and the release channel append a NUL-separated suffix; keys may not contain NUL, so no
// lock key can ever collide with another key's counter or channel.
const (
	counterSuffix = "\x00fence"
	channelSuffix = "\x00released"
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

type names struct{ lock, counter, channel string }

func (c *Client) names(key string) names {
	lk := c.opt.Prefix + key
	return names{lock: lk, counter: lk + counterSuffix, channel: lk + channelSuffix}
}
