package keys

// This file holds copies of the Caddyfile adapter's placeholder shorthands
// (Caddy v2.11.9, caddyconfig/httpcaddyfile/shorthands.go): Caddy does not
// export them as a table, and this package imports no Caddy. Copy them again
// on a Caddy upgrade: TestShorthandsMatchCaddy reads Caddy's file from the module
// cache and fails when they differ.

// caddyfileShorthands maps each Caddyfile placeholder shorthand that is a
// valid capture name to what the Caddyfile adapter expands it to. Copied
// from placeholderShorthands (entries such as "{%uri}" or "{?query}" are
// left out: they can never be capture names).
var caddyfileShorthands = map[string]string{
	"host":                              "http.request.host",
	"hostport":                          "http.request.hostport",
	"port":                              "http.request.port",
	"orig_method":                       "http.request.orig_method",
	"orig_uri":                          "http.request.orig_uri",
	"orig_path":                         "http.request.orig_uri.path",
	"orig_dir":                          "http.request.orig_uri.path.dir",
	"orig_file":                         "http.request.orig_uri.path.file",
	"orig_query":                        "http.request.orig_uri.query",
	"method":                            "http.request.method",
	"uri":                               "http.request.uri",
	"path":                              "http.request.uri.path",
	"dir":                               "http.request.uri.path.dir",
	"file":                              "http.request.uri.path.file",
	"query":                             "http.request.uri.query",
	"remote":                            "http.request.remote",
	"remote_host":                       "http.request.remote.host",
	"remote_port":                       "http.request.remote.port",
	"scheme":                            "http.request.scheme",
	"uuid":                              "http.request.uuid",
	"tls_cipher":                        "http.request.tls.cipher_suite",
	"tls_version":                       "http.request.tls.version",
	"tls_client_fingerprint":            "http.request.tls.client.fingerprint",
	"tls_client_issuer":                 "http.request.tls.client.issuer",
	"tls_client_serial":                 "http.request.tls.client.serial",
	"tls_client_subject":                "http.request.tls.client.subject",
	"tls_client_certificate_pem":        "http.request.tls.client.certificate_pem",
	"tls_client_certificate_der_base64": "http.request.tls.client.certificate_der_base64",
	"upstream_hostport":                 "http.reverse_proxy.upstream.hostport",
	"client_ip":                         "http.vars.client_ip",
}

// caddyfileShorthandStems are the stems of the Caddyfile's regexp
// shorthands "{stem.x}" (same file). The adapter only expands them with a
// dot, which capture names cannot contain, so only the bare stem is
// reserved, to avoid a capture that reads like a placeholder.
var caddyfileShorthandStems = map[string]string{
	"header":     "http.request.header.*",
	"cookie":     "http.request.cookie.*",
	"labels":     "http.request.host.labels.*",
	"path":       "http.request.uri.path.*",
	"file":       "http.request.uri.path.file.*",
	"query":      "http.request.uri.query.*",
	"re":         "http.regexp.*",
	"vars":       "http.vars.*",
	"rp":         "http.reverse_proxy.*",
	"resp":       "http.intercept.*",
	"err":        "http.error.*",
	"file_match": "http.matchers.file.*",
}

// shorthandProblem says why name cannot be a capture name, or returns "".
func shorthandProblem(name string) string {
	if exp, ok := caddyfileShorthands[name]; ok {
		return "is a Caddyfile placeholder shorthand: the Caddyfile adapter would expand {" +
			name + "} to {" + exp + "} before the pattern is parsed"
	}
	if exp, ok := caddyfileShorthandStems[name]; ok {
		return "is reserved: the Caddyfile uses {" + name + ".x} as a shorthand for {" +
			exp + "}, so {" + name + "} would read as a placeholder"
	}
	return ""
}

// expandedShorthand returns the shorthand that the Caddyfile adapter
// expanded to s (e.g. "path" for "http.request.uri.path"), or "".
func expandedShorthand(s string) string {
	for short, exp := range caddyfileShorthands {
		if exp == s {
			return short
		}
	}
	return ""
}
