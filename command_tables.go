package caddyredlock

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The human-readable output of `caddy redlock`: aligned columns, durations as people
// read them. --json prints the admin API's answer instead.
//
// Every text from the admin API goes through shown: keys come from requests (a decoded
// {query.k} may hold CR, LF, ESC, TAB), errors from Redis nodes, so raw they could forge
// table rows or send escape sequences to the operator's terminal.

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

// shown is s for a terminal: as it is when every rune prints and it does not start with a
// double quote, else Go-quoted ("k:\r\n\x1b[2J"), so no byte of it moves the cursor,
// starts an escape sequence, splits a column or forges a row (control characters, DEL,
// C1 controls, invalid UTF-8, format characters such as U+202E). The quoted form is
// never ambiguous (a value starting with a quote is quoted too), and `caddy redlock key`
// and `release` take it back (keyArg), so a key stays usable as the table shows it.
func shown(s string) string {
	if s == "" || (s[0] != '"' && printable(s)) {
		return s
	}
	return strconv.Quote(s)
}

// printable reports whether every rune of s is valid and printable (a space included).
func printable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return false
			}
		}
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// terminalJSON is a JSON answer with the runes a terminal may act on that encoding/json
// leaves raw (DEL, C1 controls, format characters such as U+202E; invalid UTF-8) written
// as \u escapes: the same JSON value. Raw C0 controls cannot be inside a JSON string, so
// the newlines and tabs left are the answer's own layout.
func terminalJSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r < 0x7f || (strconv.IsPrint(r) && !(r == utf8.RuneError && n == 1)) {
			if out != nil {
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	if out == nil {
		return b
	}
	return out
}

// keyArg is a key given on the command line: the quoted form shown prints is read back.
func keyArg(s string) string {
	if strings.HasPrefix(s, `"`) {
		if k, err := strconv.Unquote(s); err == nil {
			return k
		}
	}
	return s
}

// shownKeys is the key cell of a lock: each key shown, joined by a space.
func shownKeys(key string, several []string) string {
	if len(several) == 0 {
		return shown(key)
	}
	out := make([]string, len(several))
	for i, k := range several {
		out[i] = shown(k)
	}
	return strings.Join(out, " ")
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
	fmt.Fprintf(w, "%d held, %d waiting, %d draining, %d releasing\n", v.Held, v.Waiting, v.Draining, v.Releasing)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s %s\t%s\t%s\n", shownKeys(l.Key, l.Keys), dash(shown(l.Mode)),
			shown(string(l.State)), humanMS(l.WaitMS), held, validity, l.Renewals, l.Waiters, shown(token), shown(l.Method), shown(l.URI),
			dash(shown(l.RemoteAddr)), dash(shown(l.Name)))
	}
	return tw.Flush()
}

func lockerTitle(l lockerJSON) string {
	return fmt.Sprintf("locker %s (%s, quorum %d)", shown(l.Locker), shown(l.Name), l.Quorum)
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", shown(n.Address), up, yesNo(n.Voting), rtt, quarantine, n.Errors,
				dash(shown(n.LastError)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func printKey(w io.Writer, v keyJSON) error {
	fmt.Fprintf(w, "key %s: %s\n", shown(v.Key), shown(v.Status))
	for _, l := range v.Lockers {
		fmt.Fprintf(w, "\n%s: %s, on %d of %d nodes", lockerTitle(l.lockerJSON), shown(l.Status), l.PresentOn, len(l.Nodes))
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
			fmt.Fprintf(w, "held here (%s) by %s %s from %s: held %s, validity %s, %d renewals", shown(string(h.State)), shown(h.Method),
				shown(h.URI), dash(shown(h.RemoteAddr)), humanMS(h.HeldMS), humanMS(h.ValidityMS), h.Renewals)
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", shown(n.Node), yesNo(n.Present), ttl, yesNo(n.HeldHere), dash(shown(n.Error)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func printRelease(w io.Writer, v releaseJSON) error {
	fmt.Fprintf(w, "key %s: %s (deleted on %s)\n", shown(v.Key), shown(v.Status), plural(v.DeletedOn, "node"))
	for _, l := range v.Lockers {
		fmt.Fprintf(w, "%s: %s deleted on %d of %d nodes, %d answered", lockerTitle(l.lockerJSON), shown(l.RedisKey), l.DeletedOn, l.Nodes,
			l.Answered)
		if l.HeldHere {
			fmt.Fprint(w, "; this instance's request holding it was aborted")
			if l.Token != 0 {
				fmt.Fprintf(w, " (token %d)", l.Token)
			}
		}
		fmt.Fprintln(w)
		for _, e := range l.Errors {
			fmt.Fprintf(w, "  error: %s\n", shown(e))
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
			bad = append(bad, shown(n.Address)+" ("+why+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", shown(l.Name), status, l.Voting, l.Quorum, l.Nodes, dash(strings.Join(bad, ", ")))
	}
	return tw.Flush()
}
