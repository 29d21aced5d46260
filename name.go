package caddyredlock

import (
	"fmt"
	"regexp"
	"strings"
)

// A block's name (`name <label>`) labels its metrics, log lines, events and admin/CLI
// output. It is part of the locker's identity (lockerKey): two blocks with the same node
// set but different names get a locker each, so every locker, and every event it emits,
// has exactly one name. Names come only from the config, so the metrics' cardinality
// stays what the config says.

// maxNameLen bounds a name: it is a metrics label value and a table column.
const maxNameLen = 64

// validName: a letter or digit first, then letters, digits and . _ : / @ - (readable in
// a table, a log line and a PromQL matcher without quoting surprises).
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@-]*$`)

// checkName validates a configured name ("" is the default, derived from the node set).
func checkName(name string) error {
	switch {
	case name == "":
		return nil
	case len(name) > maxNameLen:
		return fmt.Errorf("name: at most %d characters, got %d", maxNameLen, len(name))
	case !validName.MatchString(name):
		return fmt.Errorf("name: %q: use letters, digits and . _ : / @ - (starting with a letter or digit)", name)
	}
	return nil
}

// defaultName is a locker's name when its block has none: the prefix and the node
// addresses (no passwords), stable across reloads as long as the node set is.
func defaultName(prefix string, addrs []string) string {
	return prefix + " @ " + strings.Join(addrs, ",")
}

// warnSharedName logs when another handler of h's config uses the same name on another
// locker (other nodes, prefix or timing): allowed, but their metrics add up under one
// label and their events and log lines look alike. Handlers of an older config (a reload
// in progress) are not compared: a reload may well move a name to new nodes.
func (h *Handler) warnSharedName() {
	mine := h.locker.pooled
	liveHandlers.mu.Lock()
	clash := false
	for o := range liveHandlers.m {
		if o != h && o.cfgDone == h.cfgDone && o.locker.pooled != mine && o.locker.pooled.name == mine.name {
			clash = true
			break
		}
	}
	liveHandlers.mu.Unlock()
	if clash {
		h.logger.Warn("redlock: another redlock block has the same name but other nodes, prefix or timing; their metrics add up under one name label")
	}
}

// label is the handler's name: its locker's (configured or default); "" before
// Provision attached one.
func (h *Handler) label() string {
	if h.locker == nil {
		return ""
	}
	return h.locker.pooled.name
}
