package caddyredlock

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostileText has what a decoded {query.k} or a hostile node's error can carry: CR, LF,
// TAB, ESC with a sequence, DEL, a C1 control (CSI), a bidi override, invalid UTF-8.
const hostileText = "k:\r\nforged\trow\x1b[2J\x7f\u009b\u202e\xff"

// setText sets every string the printers may read in v (exported fields, through
// embedded structs, slices given two elements, pointers allocated) to s.
func setText(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			v.SetString(s)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			setText(v.Field(i), s)
		}
	case reflect.Slice:
		if v.CanSet() && v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		}
		for i := range v.Len() {
			setText(v.Index(i), s)
		}
	case reflect.Pointer:
		if v.CanSet() && v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		if !v.IsNil() {
			setText(v.Elem(), s)
		}
	}
}

// unsafeForTerminal returns the first byte or rune of out a terminal could act on
// (anything unprintable but the newline), or "".
func unsafeForTerminal(out string) string {
	for i, r := range out {
		if r == '\n' {
			continue
		}
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(out[i:]); n == 1 {
				return strconv.Quote(out[i : i+1])
			}
		}
		if !strconv.IsPrint(r) {
			return strconv.QuoteRune(r)
		}
	}
	return ""
}

// Every table of `caddy redlock` shows every text of the admin API's answer quoted when it
// holds anything a terminal would act on: with hostile text in every string field, the
// output has no such byte and exactly as many lines as with plain text.
func TestTablesEscapeControlCharacters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     any
		print func(w *bytes.Buffer, v any) error
	}{
		{"locks", &locksJSON{}, func(w *bytes.Buffer, v any) error { return printLocks(w, *v.(*locksJSON)) }},
		{"nodes", &nodesJSON{}, func(w *bytes.Buffer, v any) error { return printNodes(w, *v.(*nodesJSON)) }},
		{"key", &keyJSON{}, func(w *bytes.Buffer, v any) error { return printKey(w, *v.(*keyJSON)) }},
		{"release", &releaseJSON{}, func(w *bytes.Buffer, v any) error { return printRelease(w, *v.(*releaseJSON)) }},
		{"health", &healthJSON{}, func(w *bytes.Buffer, v any) error { return printHealth(w, *v.(*healthJSON)) }},
	} {
		lines := map[string]int{}
		for _, text := range []string{"plain", hostileText} {
			v := reflect.New(reflect.TypeOf(tc.v).Elem())
			setText(v, text)
			var out bytes.Buffer
			if err := tc.print(&out, v.Interface()); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			lines[text] = strings.Count(out.String(), "\n")
			if text == "plain" {
				if !strings.Contains(out.String(), "plain") {
					t.Fatalf("%s: the plain text is not printed:\n%s", tc.name, out.String())
				}
				continue
			}
			if bad := unsafeForTerminal(out.String()); bad != "" {
				t.Errorf("%s: prints %s raw:\n%q", tc.name, bad, out.String())
			}
			if !strings.Contains(out.String(), strconv.Quote(hostileText)) {
				t.Errorf("%s: the text is not shown quoted:\n%s", tc.name, out.String())
			}
		}
		if lines["plain"] != lines[hostileText] {
			t.Errorf("%s: %d lines with plain text, %d with control characters", tc.name, lines["plain"], lines[hostileText])
		}
	}
}

// shown leaves printable text alone and quotes the rest; keyArg reads the quoted form back.
func TestShownAndKeyArg(t *testing.T) {
	for in, want := range map[string]string{
		"":               "",
		"/doc":           "/doc",
		"acct:é 42":      "acct:é 42",
		`a\nb`:           `a\nb`,
		"a\nb":           `"a\nb"`,
		"\x1b[31m":       `"\x1b[31m"`,
		"a\tb":           `"a\tb"`,
		"\u202eevil":     `"\u202eevil"`,
		"\xff":           `"\xff"`,
		`"quoted"`:       `"\"quoted\""`,
		"k\x00slot0":     `"k\x00slot0"`,
		"x\u009b2J\x7fy": `"x\u009b2J\x7fy"`,
	} {
		got := shown(in)
		if got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
		if back := keyArg(got); back != in {
			t.Errorf("keyArg(%s) = %q, want %q", got, back, in)
		}
	}
}

// --json: the same JSON value, with nothing a terminal would act on.
func TestTerminalJSON(t *testing.T) {
	in, err := json.MarshalIndent(map[string]any{"key": hostileText + "\U000e0001", "n": 1}, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	out := terminalJSON(in)
	if bad := unsafeForTerminal(strings.ReplaceAll(string(out), "\t", " ")); bad != "" {
		t.Errorf("prints %s raw: %s", bad, out)
	}
	var a, b any
	if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("not the same JSON:\n%s\n%s", in, out)
	}
	if plain := []byte(`{"key": "/doc é"}`); !bytes.Equal(terminalJSON(plain), plain) {
		t.Errorf("plain JSON changed: %s", terminalJSON(plain))
	}
}
