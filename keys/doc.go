// Package keys turns request paths into distributed-lock keys.
//
// It has three parts, each in its own file:
//
//   - path templates (template.go, keytemplate.go): a pattern such as
//     "/accounts/{id}/*" selects requests and captures path segments, and a
//     key template such as "acct:{id}" says which lock they take;
//   - path normalization (normalize.go): variants of one resource's path map
//     to a single canonical path, so they cannot take two different locks;
//   - key bounding (bound.go): keys stay short in Redis yet distinct;
//   - path placeholders (pathvars.go): Caddy's placeholders derived from the
//     path, rendered from the normalized path.
//
// # Path patterns
//
// A pattern starts with "/" and consists of segments separated by single
// slashes. A segment is one of
//
//   - a literal, matched byte for byte (case-sensitively; with case folding
//     on, write literals in lower case);
//   - "{name}", a capture of exactly one whole segment, with name matching
//     [A-Za-z_][A-Za-z0-9_]*; names are unique within a pattern;
//   - "*", allowed only as the last segment, matching the rest of the path
//     (zero or more segments).
//
// Without "*" a pattern matches paths with exactly its number of segments.
// "/" alone matches only the root. Empty segments, "." and "..", control
// characters, invalid UTF-8, and braces or "*" inside a literal are refused.
// Capture names that are Caddyfile placeholder shorthands (host, path, query,
// method, uri, ...) are refused because the Caddyfile adapter would expand
// them before this package sees them; so are the bare stems of the
// shorthand families (header, cookie, labels, re, vars, rp, resp, err,
// file_match), which would read as placeholders. Names that merely start
// with a stem ("header_id", "path_id") are allowed: the adapter only expands
// "{stem.something}", and capture names contain no dot.
//
// # Key templates
//
// A key template is any string. "{name}" naming a capture of its pattern
// refers to the captured segment; every other "{...}" is a Caddy
// placeholder, left for Caddy's replacer. A bare identifier in braces that
// is not a capture is an error, because in JSON config it would stay a
// literal "{x}" (give non-capture placeholders a dotted name). Braces
// escaped as "\{" are literal text, as in Caddy. The default key template
// is the pattern without a trailing "*" and without a trailing slash:
// "/accounts/{id}/*" keys on "/accounts/{id}", and "/*" on "/".
//
// [Template.KeyTemplate] rewrites each capture reference {name} to
// {http.redlock.param.name} so that a single pass of Caddy's replacer
// renders the key; a captured value such as "{http.request.header.X}" is
// then inserted literally and never expanded as a placeholder.
//
// # Normalization rule
//
// [NormalizePath] takes the request's decoded path (Go's url.URL.Path) and
// returns the canonical path used for both matching and keying:
//
//  1. The path must be valid UTF-8 and must not contain a control character
//     (a byte below 0x20, such as NUL, CR or LF, or the byte 0x7f);
//     otherwise it is an error wrapping [ErrInvalidPath] and the request
//     should be answered with 400 Bad Request.
//  2. Percent-decoding is applied exactly once, by using the decoded path:
//     "%61" is "a", "%2e" is ".", and an encoded slash "%2F" is a segment
//     separator like "/". A doubly encoded "%252F" stays the literal text
//     "%2F" inside its segment.
//  3. The path is split at "/". Empty segments (from "//", a leading or a
//     trailing slash) and "." segments are dropped; ".." removes the
//     previous segment and is dropped at the root, so the result never goes
//     above "/". A path without a leading slash is treated as if it had one.
//  4. The remaining segments are joined as "/" + seg1 + "/" + seg2 ...; with
//     no segments the result is "/". So the result starts with "/", has no
//     empty, "." or ".." segment, and no trailing slash except for the root.
//  5. With case folding on, the result is lowercased with strings.ToLower
//     (Unicode lowercasing, not full case folding: "ß" and "SS" differ).
//
// Nothing else is changed: no Unicode normalization (NFC and NFD forms of
// one name differ), no backslash handling, no query string. The function
// is idempotent.
//
// # Path placeholders
//
// Caddy renders {http.request.uri.path.N}, .dir, .file, {http.request.uri}
// and the rest of the "http.request.uri" family, and the original request's
// "http.request.orig_uri" family, from the raw path, in which one resource
// has many spellings. [PathPlaceholder] says which path a placeholder name
// is derived from (none, the request's, the original request's), and
// refuses a name of those families that Caddy v2.11.9 does not render;
// [RenderPathPlaceholder] gives what Caddy renders for a request whose path
// is the normalized one. The query placeholders of both families are not
// derived from the path: the query string is not normalized.
//
// # Key bounding
//
// [Bound] keeps a key of at most [MaxKeyLen] bytes as it is. A longer key
// becomes its first 64 bytes (cut back to a UTF-8 boundary) followed by
// "#sha256:" and the hex SHA-256 of the whole key, at most 136 bytes. A
// short key that already contains "#sha256:" is hashed the same way, so a
// short key can never equal the bounded form of a different long key.
package keys
