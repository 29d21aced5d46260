// Package redact hides secrets in node URLs before they reach an error, a log line or the
// admin API. It is the one home of that rule for the plugin and the redlock package.
package redact

import "strings"

// URL replaces the user info of a URL (it may hold a password) with "xxxxx". Without a
// scheme, everything before the last "@" is user info ("default:pw@host:6379"), so that a
// URL missing its scheme does not show its password either.
func URL(raw string) string {
	scheme := strings.Index(raw, "://")
	at := strings.LastIndexByte(raw, '@')
	switch {
	case at < 0:
		return raw
	case scheme < 0 || at < scheme:
		return "xxxxx" + raw[at:]
	}
	return raw[:scheme+3] + "xxxxx" + raw[at:]
}
