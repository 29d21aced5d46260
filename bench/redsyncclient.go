package main

import (
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// newRedsync builds a redsync instance over one go-redis client per URL, at go-redis and
// redsync defaults (what a redsync user gets out of the box).
func newRedsync(urls []string) (*redsync.Redsync, func()) {
	var clients []*redis.Client
	var pools []redsyncredis.Pool
	for _, u := range urls {
		opt, err := redis.ParseURL(u)
		if err != nil {
			panic(err)
		}
		c := redis.NewClient(opt)
		clients = append(clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	return redsync.New(pools...), func() {
		for _, c := range clients {
			c.Close()
		}
	}
}
