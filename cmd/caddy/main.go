// Command caddy is Caddy with its standard modules plus caddy-redlock: the local
// equivalent of `xcaddy build --with github.com/caddy-redlock/caddy-redlock`.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-redlock/caddy-redlock"
)

func main() {
	caddycmd.Main()
}
