package caddyredlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// `caddy redlock ...`: a client of the admin routes (admin.go, health.go). It finds the
// admin endpoint exactly as `caddy reload` and `caddy stop` do (--address, else the
// admin address of --config/--adapter, else Caddy's default) and sends its requests with
// Caddy's own AdminAPIRequest, so unix socket admin addresses work the same way.
//
// Exit codes: 0 ok, 1 health without a voting quorum, 2 errors (admin unreachable, bad
// arguments, an error answer). Output comes from the admin API, which never holds a lock
// value or a password.

// Exit codes of `caddy redlock`.
const (
	exitOK       = 0
	exitNoQuorum = 1
	exitError    = 2
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "redlock",
		Usage: "locks|nodes|key <key>|release <key>|health [--address <interface>] [--config <path> [--adapter <name>]] [--json]",
		Short: "Shows the redlock locks and Redis nodes of a running Caddy, force-releases a key, checks health",
		Long: `
Talks to the redlock routes of a running Caddy's admin API (/redlock/...).

  caddy redlock locks            held, waiting and draining locks of that instance
  caddy redlock nodes            each locker's Redis nodes: up, voting, rtt, quarantine, errors
  caddy redlock key <key>        one key across the nodes (the key as "locks" shows it)
  caddy redlock release <key>    force release on every node; aborts a local holder
  caddy redlock health           exit 0 when every locker has a voting quorum, 1 when not

A key with characters a terminal would act on (CR, LF, ESC, TAB, ...) is shown Go-quoted,
"k:\r\n"; give it to key and release in that form (quoted again for the shell).

The admin address is found like "caddy reload" finds it: --address if given, else the
admin address in --config (adapted with --adapter), else Caddy's default. --json prints
the admin API's answer as is. Exit status 2 on errors (admin unreachable, bad arguments).
`,
		CobraFunc: func(cmd *cobra.Command) {
			pf := cmd.PersistentFlags()
			pf.StringP("config", "c", "", "Configuration file to read the admin address from, if --address is not used")
			pf.StringP("adapter", "a", "", "Name of config adapter to apply (when --config is used)")
			pf.String("address", "", "The address of the admin API endpoint, if not the default")
			pf.Bool("json", false, "Print the admin API's JSON answer instead of a table")
			// Without a subcommand: the help. An unknown one is an error (exit 2), not the
			// help with exit 0 that cobra would give, so scripts notice a typo.
			cmd.RunE = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return c.Help()
				}
				return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) {
					return exitError, fmt.Errorf("caddy redlock: unknown command %q: want locks, nodes, key, release or health", args[0])
				})(c, args)
			}
			for _, sc := range redlockSubcommands {
				cmd.AddCommand(&cobra.Command{
					Use:   sc.use,
					Short: sc.short,
					RunE:  caddycmd.WrapCommandFuncForCobra(sc.run),
				})
			}
		},
	})
}

var redlockSubcommands = []struct {
	use, short string
	run        caddycmd.CommandFunc
}{
	{"locks", "Lists the locks held, awaited and draining in that instance", cmdLocks},
	{"nodes", "Lists each locker's Redis nodes", cmdNodes},
	{"key <key>", "Shows one key across the Redis nodes", cmdKey},
	{"release <key>", "Force-releases a key on every node (aborts a local holder)", cmdRelease},
	{"health", "Exit 0 when every locker has a voting quorum, 1 when not", cmdHealth},
}

// adminCall is one request to the admin API: where it went and what came back.
type adminCall struct {
	addr   string
	status int
	body   []byte
}

// callAdmin sends method path to the admin API the flags point at. A 503 from the health
// route is an answer, not an error: okStatus lists the error statuses to hand back.
func callAdmin(fl caddycmd.Flags, method, path string, okStatus ...int) (*adminCall, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin API address: %w", err)
	}
	resp, err := caddycmd.AdminAPIRequest(addr, method, path, nil, nil)
	if err != nil {
		// AdminAPIRequest turns an error status into "caddy responded with error: HTTP
		// <code>: <body>"; take back the statuses the caller reads as answers.
		for _, code := range okStatus {
			prefix := fmt.Sprintf("caddy responded with error: HTTP %d: ", code)
			if body, ok := strings.CutPrefix(err.Error(), prefix); ok {
				return &adminCall{addr: addr, status: code, body: []byte(body)}, nil
			}
		}
		if !printable(err.Error()) { // the answer may quote a key: shown, as in the tables
			err = errors.New(shown(err.Error()))
		}
		return nil, fmt.Errorf("admin API at %s: %s %s: %w", addr, method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %s %s: reading the answer: %w", addr, method, path, err)
	}
	return &adminCall{addr: addr, status: resp.StatusCode, body: body}, nil
}

// decode parses the answer into v, naming the route when it is not what was expected
// (an older plugin, or not a redlock admin endpoint at all).
func (c *adminCall) decode(path string, v any) error {
	if err := json.Unmarshal(c.body, v); err != nil {
		return fmt.Errorf("admin API at %s: %s: unexpected answer: %w", c.addr, path, err)
	}
	return nil
}

// run is the common shape of every subcommand: call, then print raw JSON or a table.
func run(fl caddycmd.Flags, method, path string, table func(c *adminCall, w io.Writer) error) (int, error) {
	c, err := callAdmin(fl, method, path)
	if err != nil {
		return exitError, err
	}
	if fl.Bool("json") {
		_, err = os.Stdout.Write(terminalJSON(c.body))
	} else {
		err = table(c, os.Stdout)
	}
	if err != nil {
		return exitError, err
	}
	return exitOK, nil
}

func cmdLocks(fl caddycmd.Flags) (int, error) {
	if err := wantArgs(fl, 0, "locks"); err != nil {
		return exitError, err
	}
	return run(fl, http.MethodGet, "/redlock/locks", func(c *adminCall, w io.Writer) error {
		var v locksJSON
		if err := c.decode("/redlock/locks", &v); err != nil {
			return err
		}
		return printLocks(w, v)
	})
}

func cmdNodes(fl caddycmd.Flags) (int, error) {
	if err := wantArgs(fl, 0, "nodes"); err != nil {
		return exitError, err
	}
	return run(fl, http.MethodGet, "/redlock/nodes", func(c *adminCall, w io.Writer) error {
		var v nodesJSON
		if err := c.decode("/redlock/nodes", &v); err != nil {
			return err
		}
		return printNodes(w, v)
	})
}

func cmdKey(fl caddycmd.Flags) (int, error) {
	if err := wantArgs(fl, 1, "key <key>"); err != nil {
		return exitError, err
	}
	return run(fl, http.MethodGet, "/redlock/keys?key="+url.QueryEscape(keyArg(fl.Arg(0))), func(c *adminCall, w io.Writer) error {
		var v keyJSON
		if err := c.decode("/redlock/keys", &v); err != nil {
			return err
		}
		return printKey(w, v)
	})
}

func cmdRelease(fl caddycmd.Flags) (int, error) {
	if err := wantArgs(fl, 1, "release <key>"); err != nil {
		return exitError, err
	}
	return run(fl, http.MethodDelete, "/redlock/keys?key="+url.QueryEscape(keyArg(fl.Arg(0))), func(c *adminCall, w io.Writer) error {
		var v releaseJSON
		if err := c.decode("/redlock/keys", &v); err != nil {
			return err
		}
		return printRelease(w, v)
	})
}

// cmdHealth exits 1 when a locker lacks a voting quorum. The admin route answers 503
// then, which is the answer here, not an error.
func cmdHealth(fl caddycmd.Flags) (int, error) {
	if err := wantArgs(fl, 0, "health"); err != nil {
		return exitError, err
	}
	c, err := callAdmin(fl, http.MethodGet, "/redlock/health", http.StatusServiceUnavailable)
	if err != nil {
		return exitError, err
	}
	var v healthJSON
	if err := c.decode("/redlock/health", &v); err != nil {
		return exitError, err
	}
	if fl.Bool("json") {
		_, err = os.Stdout.Write(terminalJSON(c.body))
	} else {
		err = printHealth(os.Stdout, v)
	}
	if err != nil {
		return exitError, err
	}
	if !v.OK {
		// A non-nil error is what makes Caddy's command runner exit with 1.
		return exitNoQuorum, errors.New("redlock: no voting quorum on every locker (see above)")
	}
	return exitOK, nil
}

// wantArgs checks the number of positional arguments.
func wantArgs(fl caddycmd.Flags, n int, usage string) error {
	if fl.NArg() != n {
		return fmt.Errorf("usage: caddy redlock %s: got %d arguments", usage, fl.NArg())
	}
	return nil
}

// nodesJSON is the answer of GET /redlock/nodes.
type nodesJSON struct {
	Lockers []lockerNodesJSON `json:"lockers"`
}
