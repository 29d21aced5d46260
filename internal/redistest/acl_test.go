package redistest

import (
	"slices"
	"testing"
)

// The documented ACL line, filled in, is a command the server takes, and the user it
// makes can log in.
func TestDocsACLSetUser(t *testing.T) {
	args := DocsACLSetUser(t, "u", "pw")
	if len(args) < 4 || args[0] != "ACL" || args[1] != "SETUSER" || args[2] != "u" || !slices.Contains(args, ">pw") {
		t.Fatalf("DocsACLSetUser = %q", args)
	}
	s := StartN(t, 1)[0]
	if r, err := s.Command(args...); err != nil || r != "OK" {
		t.Fatalf("%q = %q, %v", args, r, err)
	}
	if r, err := s.Command("AUTH", "u", "pw"); err != nil || r != "OK" {
		t.Fatalf("AUTH as the documented user = %q, %v", r, err)
	}
}
