package sim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Lua scripting as Redis 7.0 does it, for the commands and conversions the client's
// scripts use: KEYS and ARGV, redis.call and redis.pcall (errors raised or returned as
// {err=...}), redis.sha1hex, the reply conversions both ways (nil bulk <-> false,
// status <-> {ok=...}, numbers truncated to integers, arrays up to the first nil), and
// numbers handed to commands written as Lua 5.1 writes them (%.14g).

// protos caches compiled scripts by digest, process-wide: compiling is the costly part,
// and a compiled proto is read-only.
var protos sync.Map // sha -> *lua.FunctionProto

// sources keeps each compiled script's text by digest, and each text the client's
// digests' request hashed (on whichever node it went to): traces name scripts by it, and
// TestConformance replays the scripts a schedule may not have sent (a fencing commit).
var sources sync.Map // sha -> string

func compile(sha, src string) (*lua.FunctionProto, error) {
	if p, ok := protos.Load(sha); ok {
		return p.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "@user_script")
	if err != nil {
		return nil, err
	}
	p, err := lua.Compile(chunk, "@user_script")
	if err != nil {
		return nil, err
	}
	// A main chunk in Lua 5.1 is vararg without the compatibility table arg (lparser.c:
	// VARARG_ISVARARG only); gopher-lua would build arg on every call.
	p.IsVarArg &^= lua.VarArgNeedsArg
	protos.Store(sha, p)
	sources.Store(sha, src)
	return p, nil
}

// newLua makes the node's interpreter: the libraries Redis opens that the scripts use,
// and the redis table.
func (s *Server) newLua() *lua.LState {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 64, RegistrySize: 1024})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	r := L.NewTable()
	r.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return s.luaCall(L, true) }))
	r.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return s.luaCall(L, false) }))
	r.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		text := L.CheckString(1)
		sha := sha1hex(text)
		sources.Store(sha, text) // the digests' request hashes every script's text
		L.Push(lua.LString(sha))
		return 1
	}))
	r.RawSetString("error_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.CreateTable(0, 1)
		t.RawSetString("err", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	r.RawSetString("status_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	r.RawSetString("log", L.NewFunction(func(*lua.LState) int { return 0 }))
	r.RawSetString("LOG_WARNING", lua.LNumber(3))
	L.SetGlobal("redis", r)
	return L
}

// eval is EVAL script|sha numkeys key... arg...
func (s *Server) eval(bySHA bool, a []string) reply {
	if len(a) < 2 {
		return errArgs(map[bool]string{true: "EVALSHA", false: "EVAL"}[bySHA])
	}
	nk, err := strconv.Atoi(a[1])
	if err != nil {
		return errReply("ERR value is not an integer or out of range")
	}
	if nk < 0 {
		return errReply("ERR Number of keys can't be negative")
	}
	if nk > len(a)-2 {
		return errReply("ERR Number of keys can't be greater than number of args")
	}
	var sha string
	var proto *lua.FunctionProto
	if bySHA {
		sha = strings.ToLower(a[0])
		p, ok := protos.Load(sha)
		if !s.scripts[sha] || !ok {
			return errReply("NOSCRIPT No matching script. Please use EVAL.")
		}
		proto = p.(*lua.FunctionProto)
	} else {
		sha = sha1hex(a[0])
		if proto, err = compile(sha, a[0]); err != nil {
			return errReply("ERR Error compiling script (new function): user_script:" + err.Error())
		}
		s.scripts[sha] = true
	}
	if s.lua == nil {
		s.lua = s.newLua()
		s.fns = map[*lua.FunctionProto]*lua.LFunction{}
	}
	L := s.lua
	keys, argv := L.CreateTable(nk, 0), L.CreateTable(len(a)-2-nk, 0)
	for i, k := range a[2 : 2+nk] {
		keys.RawSetInt(i+1, lua.LString(k))
	}
	for i, v := range a[2+nk:] {
		argv.RawSetInt(i+1, lua.LString(v))
	}
	L.SetGlobal("KEYS", keys)
	L.SetGlobal("ARGV", argv)
	fn := s.fns[proto]
	if fn == nil {
		fn = L.NewFunctionFromProto(proto) // no upvalues: one closure per node serves every call
		s.fns[proto] = fn
	}
	s.nowMS = s.clockUS() / 1000
	s.inScript = true
	defer func() { s.inScript = false }()
	top := L.GetTop()
	L.Push(fn)
	if err := L.PCall(0, 1, nil); err != nil {
		L.SetTop(top)
		msg := err.Error()
		if ae, ok := err.(*lua.ApiError); ok {
			if t, ok := ae.Object.(*lua.LTable); ok {
				if e, ok := t.RawGetString("err").(lua.LString); ok {
					msg = string(e)
				}
			}
		}
		if !strings.Contains(msg, " ") || !isErrCode(msg[:strings.IndexByte(msg, ' ')]) {
			msg = "ERR " + msg
		}
		return errReply(msg + " script: " + sha)
	}
	ret := L.Get(-1)
	L.SetTop(top)
	return fromLua(ret)
}

// isErrCode says whether w is an error code as Redis writes them (ERR, WRONGTYPE, ...).
func isErrCode(w string) bool {
	if w == "" {
		return false
	}
	for _, r := range w {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// luaCall is redis.call (raise) and redis.pcall (return the error).
func (s *Server) luaCall(L *lua.LState, raise bool) int {
	n := L.GetTop()
	if n == 0 {
		L.RaiseError("Please specify at least one argument for this redis lib call")
	}
	args := make([]string, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = string(v)
		case lua.LNumber:
			args[i-1] = luaNumber(float64(v))
		default:
			return s.luaErr(L, raise, "ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	switch strings.ToUpper(args[0]) {
	case "EVAL", "EVALSHA", "SCRIPT", "SUBSCRIBE", "UNSUBSCRIBE", "FLUSHALL", "FLUSHDB":
		return s.luaErr(L, raise, "ERR This Redis command is not allowed from script")
	}
	r := s.command(args, true)
	if r.isErr() {
		return s.luaErr(L, raise, r.s)
	}
	L.Push(toLua(L, r))
	return 1
}

func (s *Server) luaErr(L *lua.LState, raise bool, msg string) int {
	t := L.CreateTable(0, 1)
	t.RawSetString("err", lua.LString(msg))
	if raise {
		L.Error(t, 1)
		return 0
	}
	L.Push(t)
	return 1
}

// luaNumber writes a number as Lua 5.1 does (LUAI_NUMFFORMAT "%.14g").
func luaNumber(f float64) string {
	if f == float64(int64(f)) && f > -1e14 && f < 1e14 {
		return strconv.FormatInt(int64(f), 10) // what %.14g writes for these, without fmt
	}
	return fmt.Sprintf("%.14g", f)
}

// toLua converts a command's reply for a script.
func toLua(L *lua.LState, r reply) lua.LValue {
	switch r.kind {
	case 0:
		return lua.LFalse
	case ':':
		return lua.LNumber(r.i)
	case '$':
		return lua.LString(r.s)
	case '+':
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(r.s))
		return t
	case '-':
		t := L.CreateTable(0, 1)
		t.RawSetString("err", lua.LString(r.s))
		return t
	}
	t := L.CreateTable(len(r.arr), 0)
	for i, e := range r.arr {
		t.RawSetInt(i+1, toLua(L, e))
	}
	return t
}

// fromLua converts a script's return value to its reply.
func fromLua(v lua.LValue) reply {
	switch v := v.(type) {
	case lua.LString:
		return bulk(string(v))
	case lua.LNumber:
		return integer(int64(v))
	case lua.LBool:
		if v {
			return integer(1)
		}
		return nilReply
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			return errReply(string(e))
		}
		if o, ok := v.RawGetString("ok").(lua.LString); ok {
			return reply{kind: '+', s: string(o)}
		}
		out := []reply{}
		for i := 1; ; i++ {
			e := v.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			out = append(out, fromLua(e))
		}
		return array(out...)
	}
	return nilReply
}
