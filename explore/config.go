package main

// The config builder: a case's site as a Caddyfile block, and a batch's Caddyfile (the
// global options and every case's site, each on its own port). Caddy's own adapter turns
// it into JSON (caddy.go).

import (
	"fmt"
	"strings"
)

// env is what the builder needs of the world: the nodes, the upstream, the admin address.
type env struct {
	redis     string // "redis url url ..."
	up, up2   string // the upstream's two HTTP listeners
	fcgi      string
	deadPort  string // an address where nothing listens (never dialled)
	adminAddr string
	logFile   string
	storage   string
	tmp       string // a directory for template pages
}

// redlockBlock is one redlock block of c.
func (c *caseSpec) redlockBlock(e *env, b block, indent string) string {
	var lines []string
	add := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	add("%s", e.redis)
	add("prefix e:")
	key := len(lines)
	switch b.keys {
	case keyID:
		add("key x:{path.0}:{path.1}")
	case keyCapture:
		add("path /{ln}/{id}/* x:{ln}:{id}")
	case keyAll:
		add("key x:{path.0}:all")
	case keyIDAndAll:
		add("key x:{path.0}:{path.1} x:{path.0}:all")
	case keyOther:
		add("key y:{path.0}:{path.1}")
	case keyApart:
		add("key z:{path.0}:{path.1}")
	}
	lines[key] = c.viaKey(lines[key]) // keyvia.go (a capture is redlock's own: unchanged)
	add("ttl %s", caseTTL)
	add("wait %s", caseWait)
	mode, limit := c.modeOf(b)
	switch mode {
	case modeShared:
		add("shared GET")
	case modeLimit:
		add("limit %d", limit)
	}
	if c.lock.fencing {
		add("fencing")
	}
	if c.lock.dryRun || b.dryRun {
		add("dry_run")
	}
	if c.lock.maxHold || b.maxHold {
		add("max_hold %s", maxHoldTime)
	}
	if c.lock.bypass {
		add("on_unavailable bypass")
	}
	return indent + "redlock {\n" + indent + "\t" + strings.Join(lines, "\n"+indent+"\t") + "\n" + indent + "}\n"
}

// modeOf is a block's mode and limit: its own where the mix gives it one, else the case's.
func (c *caseSpec) modeOf(b block) (string, int) {
	if b.mode != "" {
		return b.mode, b.limit
	}
	return c.lock.mode, c.lock.limit
}

// blockAt returns the case's block at where, if any.
func (c *caseSpec) blockAt(where string) (block, bool) {
	for _, b := range c.blocks {
		if b.where == where {
			return b, true
		}
	}
	return block{}, false
}

// proxy is a reverse_proxy to the upstream with a role and extra subdirectives.
func proxy(to, role string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "reverse_proxy %s {\n\theader_up X-Role %s\n", to, role)
	for _, x := range extra {
		fmt.Fprintf(&b, "\t%s\n", strings.ReplaceAll(x, "\n", "\n\t"))
	}
	b.WriteString("}\n")
	return b.String()
}

// indent adds prefix to every non-empty line of s.
func indent(s, prefix string) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range ls {
		if l != "" {
			ls[i] = prefix + l
		}
	}
	return strings.Join(ls, "\n") + "\n"
}

// errorRoute is what an error route (handle_errors, intercept's handle_response,
// handle_response) runs: the case's error block, if any, and a proxy for the role.
func (c *caseSpec) errorRoute(e *env, role, work string, extra ...string) string {
	var s string
	if b, ok := c.blockAt("error"); ok {
		s += c.redlockBlock(e, b, "")
	}
	if c.mix != "" && work != "" {
		work = "{http.request.header.X-Work-Err}" // the request's own (fixMixRequests)
	}
	if work != "" {
		extra = append(extra, "header_up -X-Work-First", "header_up X-Work \""+work+"\"")
	}
	if c.mix == mixFastCGIErr {
		// A FastCGI application (mix.go): only the served block's watch can refuse its writes.
		return s + proxy(e.fcgi, role, append(extra, "flush_interval -1", "transport fastcgi")...)
	}
	return s + proxy(e.up, role, extra...)
}

// site is the case's site block, served on port.
func (c *caseSpec) site(e *env, port int, generation int) string {
	up := e.up
	if c.ending == endNoDial {
		up = e.deadPort
	}
	timeout := func() string {
		if c.ending == endTimeout || c.shape == shapeRetry {
			return fmt.Sprintf("transport http {\n\tresponse_header_timeout %s\n}", hdrTimeout)
		}
		return ""
	}
	var route, after, before string
	outer, _ := c.blockAt("outer")
	route += c.redlockBlock(e, outer, "")
	switch c.shape {
	case shapeProxy, shapeRewrite:
		route += proxy(up, "work", timeout())
	case shapeFileServer:
		// No request's file exists under the root: file_server passes each one on to the
		// proxy, inside the lock (newshapes.go).
		before += "root * " + e.tmp + "\ntry_files {path} {path}/index.html\n"
		route += "file_server {\n\tpass_thru\n}\n" + proxy(up, "work", timeout())
	case shapeCopyResponse:
		route += proxy(up, "work", "@ok status 2xx", "handle_response @ok {\n\tcopy_response\n}", timeout())
	case shapeForwardAuth:
		if c.authInside {
			route += forwardAuth(e)
		} else {
			before += forwardAuth(e)
		}
		route += proxy(up, "work", timeout())
	case shapeWebsocket:
		route += c.wsProxy(up)
	case shapeStream, shapeEncode:
		route += proxy(up, "work", "flush_interval -1", timeout())
	case shapeNested:
		inner, _ := c.blockAt("inner")
		route += c.redlockBlock(e, inner, "")
		route += proxy(up, "work", timeout())
	case shapeRetry:
		policy := "lb_retries 1"
		if c.seed%2 == 0 {
			policy = "lb_try_duration 1s\n\tlb_try_interval 50ms"
		}
		route += proxy(up+" "+e.up2, "work", "lb_policy round_robin", policy, timeout())
	case shapeHandleResponse:
		// The work is the second hop, a proxy nested in the first's handle_response; with
		// retries of its own when the case draws them (nestedRetry).
		var retry []string
		if c.nestedRetry {
			retry = []string{"lb_retries 1", fmt.Sprintf("transport http {\n\tresponse_header_timeout %s\n}", hdrTimeout)}
		}
		inner := indent(c.errorRoute(e, "work", "", retry...), "\t")
		route += proxy(up, "hop", "header_up X-Work accel", "@accel header X-Accel-Redirect *",
			"handle_response @accel {\n"+inner+"}")
	case shapeFastCGI:
		fc := "transport fastcgi"
		if c.ending == endTimeout {
			fc += fmt.Sprintf(" {\n\tread_timeout %s\n}", hdrTimeout)
		}
		to := e.fcgi
		if c.ending == endNoDial {
			to = e.deadPort
		}
		route += proxy(to, "work", "flush_interval -1", fc)
	case shapeSubrouteErrors:
		// The locked route fails with a client error (404, no body) and the subroute's own
		// error routes (patchJSON moves them there) proxy the work.
		route += "error 404\n"
		after = "handle_errors 404 {\n" + indent(c.errorRoute(e, "error", ""), "\t") + "}\n"
	case shapeHandleErrors:
		route += proxy(up, "work", timeout())
		after = "handle_errors 502 504 {\n" + indent(c.errorRoute(e, "error", "d=120ms,stream"), "\t") + "}\n"
	case shapeIntercept:
		// intercept around the lock (as Caddy's directive order puts it in a site; in a
		// route the written order counts): its routes run once the handler has returned.
		route = "intercept {\n\t@failed status 5xx\n\thandle_response @failed {\n" +
			indent(c.errorRoute(e, "intercept", "d=120ms,stream"), "\t\t") + "\t}\n}\n" + route
		route += proxy(up, "work", "header_up X-Work \"{http.request.header.X-Work},fail500\"", timeout())
	case shapeTemplates:
		// The client's page includes <path>/inc: a virtual request through the locked
		// route, whose next fails (404) and whose error route proxies the work.
		inc := "@inc path */inc\nhandle @inc {\n" + indent(c.redlockBlock(e, outer, ""), "\t") + "\terror 404\n}\n"
		page := "handle {\n\troot * " + e.tmp + "\n\trewrite * /page.html\n\ttemplates\n\tfile_server\n}\n"
		route = inc + page
		after = "handle_errors 404 {\n" + indent(proxy(up, "error", "header_up -X-Work-First"), "\t") + "}\n"
	}
	before += c.viaHandlers()
	if c.bodyMax {
		before += fmt.Sprintf("request_body {\n\tmax_size %d\n}\n", bodyMax)
	}
	if c.shape == shapeRewrite {
		before += "rewrite * {path}/rw\n"
	}
	if c.shape == shapeEncode {
		before += "encode gzip\n"
	}
	return fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\theader X-Generation %d\n%s\troute {\n%s\t}\n%s}\n",
		port, generation, indent(before, "\t"), indent(route, "\t\t"), indent(after, "\t"))
}

// caddyfile is a batch's whole Caddyfile.
func caddyfile(e *env, cases []*caseSpec, ports []int, generation int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{
	admin %s
	persist_config off
	auto_https off
	grace_period 200ms
	storage file_system %s
	servers {
		protocols h1 h2c
	}
	log {
		output file %s
		level WARN
	}
}
`, e.adminAddr, e.storage, e.logFile)
	for i, c := range cases {
		b.WriteString(c.site(e, ports[i], generation))
	}
	return b.String()
}

// templatePage is the page the templates shape serves: it includes <path>/inc.
const templatePage = `<p>{{httpInclude (printf "%s/inc" .OriginalReq.URL.Path)}}</p>`
