// Package redact hides secrets in node URLs before they reach an error, a log line or the
// admin API. It is the one home of that rule for the plugin and the redlock package.
package redact

import "strings"

// URL replaces the user info of a URL (it may hold a password) with "xxxxx".
func URL(raw string) string {
	scheme := strings.Index(raw, "://")
	at := strings.LastIndexByte(raw, '@')
	if scheme < 0 || at < scheme {
		return raw
	}
	return raw[:scheme+3] + "xxxxx" + raw[at:]
}
