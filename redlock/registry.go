package redlock

// This file keeps the locks a client holds, by key: a local handoff replaces the holder
// in place, and a closed client shuts down when its last lock is released.

// register adds l to the locks held, unless the client is shutting down (Close found no
// lock held): then nothing would renew or release l, and it reports false.
func (c *Client) register(l *Lock) bool {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.shutting {
		return false
	}
	c.held[l.key] = append(c.held[l.key], l)
	return true
}

// replaceHeld puts next in old's place (a local handoff: the same lock in Redis).
func (c *Client) replaceHeld(old, next *Lock) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	ls := c.held[old.key]
	for i, o := range ls {
		if o == old {
			ls[i] = next
			return
		}
	}
	c.held[old.key] = append(ls, next)
}

func (c *Client) unregister(l *Lock) {
	c.heldMu.Lock()
	ls := c.held[l.key]
	for i, o := range ls {
		if o == l {
			ls = append(ls[:i:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		delete(c.held, l.key)
	} else {
		c.held[l.key] = ls
	}
	last := len(c.held) == 0
	c.heldMu.Unlock()
	if last && c.closed.Load() {
		_ = c.shutdown() // Close was called while this lock was held
	}
}

// holding returns the lock this client holds on key, if any: the one taken last (a
// previous holder may still be on its way out; readers share the key).
func (c *Client) holding(key string) *Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if ls := c.held[key]; len(ls) > 0 {
		return ls[len(ls)-1]
	}
	return nil
}

// holders returns every lock this client holds on key.
func (c *Client) holders(key string) []*Lock {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	return append([]*Lock(nil), c.held[key]...)
}
