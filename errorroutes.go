package caddyredlock

import (
	"net/http"
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// This file answers one question for endrule.go: may error routes run for an error the
// handler returns? Caddy runs two kinds once a handler's error goes up: the server's
// handle_errors routes, and the errors routes of any subroute the handler sits in (JSON
// `subroute` with `errors`), which run inside the subroute's ServeHTTP, after the
// handler has returned. Either may proxy the request again to the locked upstream, so
// the locks must stay held until the request ends (round 5, hole 6: a subroute's errors
// routes were not seen, a bodiless 4xx released the key at once and two fallbacks ran
// together).
//
// The handler cannot see which subroutes surround it, so it asks whether the server has
// a subroute with errors routes anywhere in its routes (its handle_errors routes
// included): then any error waits. The provisioned route tree is walked once per server
// and handler (cached: both live as long as their config), following every route list a
// handler keeps in an exported field (subroutes, reverse_proxy's and intercept's
// handle_response routes, third-party handlers' alike). A walk that cannot finish says
// yes: it errs on the side of waiting.

// hasErrorRoutes reports whether error routes may run for the request's error (true
// when that cannot be told).
func (h *Handler) hasErrorRoutes(r *http.Request) bool {
	srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return true
	}
	if srv.Errors != nil && len(srv.Errors.Routes) > 0 {
		return true
	}
	if h.errorRoutes == nil { // a handler not provisioned by Caddy (tests)
		return true
	}
	if v, ok := h.errorRoutes.Load(srv); ok {
		return v.(bool)
	}
	w := routeWalk{seen: map[uintptr]bool{}}
	has := w.routes(reflect.ValueOf(srv.Routes), 0) || w.incomplete
	h.errorRoutes.Store(srv, has)
	return has
}

// routeWalk looks for a subroute with errors routes in a provisioned route tree.
type routeWalk struct {
	seen       map[uintptr]bool // pointers visited (no cycle is walked twice)
	steps      int
	incomplete bool // the walk gave up (too deep or too large)
}

// Bounds of the walk: far beyond any real config's nesting.
const (
	walkDepth = 24
	walkSteps = 100000
)

var (
	subrouteType  = reflect.TypeFor[*caddyhttp.Subroute]()
	routeListType = reflect.TypeFor[caddyhttp.RouteList]()
)

// routes walks v, a value that may hold route lists, and reports whether a subroute
// with errors routes is among them.
func (w *routeWalk) routes(v reflect.Value, depth int) bool {
	w.steps++
	if depth > walkDepth || w.steps > walkSteps {
		w.incomplete = true
		return false
	}
	if v.Type() == subrouteType && !v.IsNil() {
		if sr := v.Interface().(*caddyhttp.Subroute); sr.Errors != nil && len(sr.Errors.Routes) > 0 {
			return true
		}
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return false
		}
		if v.Kind() == reflect.Pointer {
			if w.seen[v.Pointer()] {
				return false
			}
			w.seen[v.Pointer()] = true
		}
		return w.routes(v.Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		if !mayHoldRoutes(v.Type().Elem()) {
			return false
		}
		for i := range v.Len() {
			if w.routes(v.Index(i), depth+1) {
				return true
			}
		}
	case reflect.Map:
		if !mayHoldRoutes(v.Type().Elem()) {
			return false
		}
		for it := v.MapRange(); it.Next(); {
			if w.routes(it.Value(), depth+1) {
				return true
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && mayHoldRoutes(f.Type) && w.routes(v.Field(i), depth+1) {
				return true
			}
		}
	}
	return false
}

// mayHoldRoutes reports whether a value of type t may lead to a route list: interfaces
// (a handler module), route lists, and the types of modules (a package path with a
// domain: not the standard library's connections, certificates and locks).
func mayHoldRoutes(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Interface, t == routeListType.Elem():
		return true
	case t.Kind() != reflect.Struct:
		return false
	}
	first, _, _ := strings.Cut(t.PkgPath(), "/")
	return strings.Contains(first, ".")
}
