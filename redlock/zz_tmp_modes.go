package redlock

import "context"

// TEMPORARY until the limit-multi branch lands (deleted at merge).
func (c *Client) AcquireAll(ctx context.Context, keys []string, o AcquireOptions) ([]*Lock, error) {
	var out []*Lock
	for _, k := range keys {
		l, err := c.Acquire(ctx, k, o)
		if err != nil {
			for _, h := range out {
				_ = h.Release(ctx)
			}
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}
