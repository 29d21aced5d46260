package caddyredlock

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The human-readable output of `caddy redlock`: aligned columns, durations as people
// read them. --json prints the admin API's answer instead.

// humanMS formats milliseconds: "850ms", "2.4s", "3m12s", "1h4m".
func humanMS(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
}

// dash shows an empty cell as "-", so columns stay readable.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func printLocks(w io.Writer, v locksJSON) error {
	fmt.Fprintf(w, "%d held, %d waiting, %d draining\n", v.Held, v.Waiting, v.Draining)
	if len(v.Locks) == 0 {
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "KEY\tMODE\tSTATE\tWAITED\tHELD\tVALIDITY\tRENEWALS\tWAITERS\tTOKEN\tREQUEST\tFROM\tNAME")
	for _, l := range v.Locks {
		held, validity, token := "-", "-", "-"
		if l.State != stateWaiting {
			held, validity = humanMS(l.HeldMS), humanMS(l.ValidityMS)
		}
		switch {
		case l.Tokens != "":
			token = l.Tokens
		case l.Token != 0:
			token = strconv.FormatInt(l.Token, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s %s\t%s\t%s\n", l.Key, dash(l.Mode), l.State, humanMS(l.WaitMS),
			held, validity, l.Renewals, l.Waiters, token, l.Method, l.URI, dash(l.RemoteAddr), dash(l.Name))
	}
	return tw.Flush()
}

func lockerTitle(l lockerJSON) string {
	return fmt.Sprintf("locker %s (%s, quorum %d)", l.Locker, l.Name, l.Quorum)
}

func printNodes(w io.Writer, v nodesJSON) error {
	if len(v.Lockers) == 0 {
		fmt.Fprintln(w, "no redlock handler configured")
		return nil
	}
	for i, l := range v.Lockers {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %d of %d nodes up\n", lockerTitle(l.lockerJSON), l.Up, len(l.Nodes))
		tw := newTable(w)
		fmt.Fprintln(tw, "NODE\tUP\tVOTING\tRTT\tQUARANTINE LEFT\tERRORS\tLAST ERROR")
		for _, n := range l.Nodes {
			rtt, quarantine := "-", "-"
			if n.Checked && n.Up {
				rtt = strconv.FormatFloat(n.LastRTTMS, 'f', 2, 64) + "ms"
			}
			if n.QuarantinedLeftMS > 0 {
				quarantine = humanMS(n.QuarantinedLeftMS)
			}
			up := yesNo(n.Up)
			if !n.Checked {
				up = "unchecked"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Address, up, yesNo(n.Voting), rtt, quarantine, n.Errors, dash(n.LastError))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func printKey(w io.Writer, v keyJSON) error {
	fmt.Fprintf(w, "key %s: %s\n", v.Key, v.Status)
	for _, l := range v.Lockers {
		fmt.Fprintf(w, "\n%s: %s, on %d of %d nodes", lockerTitle(l.lockerJSON), l.Status, l.PresentOn, len(l.Nodes))
		if l.QuorumHeld {
			fmt.Fprint(w, ", a quorum holds it")
		}
		fmt.Fprintf(w, "; %d waiting here\n", l.Waiters)
		for _, p := range l.Places {
			fmt.Fprintf(w, "place %d: on %d of %d nodes", p.Index, p.PresentOn, len(l.Nodes))
			if p.QuorumHeld {
				fmt.Fprint(w, ", held")
				if p.HeldHere {
					fmt.Fprint(w, " here")
				}
			}
			fmt.Fprintln(w)
		}
		if h := l.Holder; h != nil {
			fmt.Fprintf(w, "held here (%s) by %s %s from %s: held %s, validity %s, %d renewals", h.State, h.Method, h.URI,
				dash(h.RemoteAddr), humanMS(h.HeldMS), humanMS(h.ValidityMS), h.Renewals)
			if h.Token != 0 {
				fmt.Fprintf(w, ", token %d", h.Token)
			}
			fmt.Fprintln(w)
		} else if l.QuorumHeld {
			fmt.Fprintln(w, "held by another instance or client")
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "NODE\tPRESENT\tTTL LEFT\tHELD HERE\tERROR")
		for _, n := range l.Nodes {
			ttl := "-"
			switch {
			case n.PTTLMS < 0:
				ttl = "no expiry"
			case n.Present:
				ttl = humanMS(n.PTTLMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, yesNo(n.Present), ttl, yesNo(n.HeldHere), dash(n.Error))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func printRelease(w io.Writer, v releaseJSON) error {
	fmt.Fprintf(w, "key %s: %s (deleted on %s)\n", v.Key, v.Status, plural(v.DeletedOn, "node"))
	for _, l := range v.Lockers {
		fmt.Fprintf(w, "%s: %s deleted on %d of %d nodes, %d answered", lockerTitle(l.lockerJSON), l.RedisKey, l.DeletedOn, l.Nodes, l.Answered)
		if l.HeldHere {
			fmt.Fprint(w, "; this instance's request holding it was aborted")
			if l.Token != 0 {
				fmt.Fprintf(w, " (token %d)", l.Token)
			}
		}
		fmt.Fprintln(w)
		for _, e := range l.Errors {
			fmt.Fprintf(w, "  error: %s\n", e)
		}
	}
	return nil
}

func printHealth(w io.Writer, v healthJSON) error {
	verdict := "OK: every locker has a voting quorum"
	if !v.OK {
		verdict = "NO QUORUM: a locker cannot take locks"
	}
	fmt.Fprintln(w, verdict)
	if len(v.Lockers) == 0 {
		fmt.Fprintln(w, "no redlock handler configured")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "LOCKER\tSTATUS\tVOTING\tQUORUM\tNODES\tNOT VOTING")
	for _, l := range v.Lockers {
		status := "ok"
		if !l.OK {
			status = "NO QUORUM"
		}
		var bad []string
		for _, n := range l.NotVoting {
			why := "down"
			if n.Up {
				why = "quarantined " + humanMS(n.QuarantinedLeftMS)
			}
			bad = append(bad, n.Address+" ("+why+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", l.Name, status, l.Voting, l.Quorum, l.Nodes, dash(strings.Join(bad, ", ")))
	}
	return tw.Flush()
}
