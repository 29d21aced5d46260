package redlock

import "github.com/caddy-redlock/caddy-redlock/redlock/internal/transport"

// The Lua scripts. They run with EVALSHA under the digest Redis computed for them, and
// go again as EVAL on NOSCRIPT (after a restart or SCRIPT FLUSH), so each is sent in full
// about once per node (internal/transport/digest.go: no SHA-1 is computed in Go, for
// FIPS 140-only mode).
//
// Interoperability: the lock itself is exactly the string key prefix+key holding the value
// with a PX expiry, as any standard Redlock client (redsync, node-redlock, redis-py) writes it.
// Fencing counters and release channels live under other names (see names.go).

// acquireScript: KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] the writer-waiting mark,
// KEYS[4] the node's write sequence (advanced by every grant: writeSeqLua, rollback.go),
// KEYS[5] the node's data marker (read for the reply), KEYS[6] the bound the node keeps
// (the longest max_ttl announced: fencingLua reads it for the counter's expiry).
// ARGV[1] value, ARGV[2] ttl ms, ARGV[3] owner prefix, ARGV[4] "1" for fencing, ARGV[5]
// counter ttl ms, ARGV[6] this attempt's number (the value is owner prefix .. attempt),
// ARGV[7] how long a writer-waiting mark lives, ms (0: none, the writer will not wait),
// ARGV[8] "1" to read the node's eviction count for the reply (evictionsLua; absent
// means "0"), ARGV[9] the readers' turn a refused reader asks for, ms (readAcquireScript;
// 0 here); with fencing ARGV[10] the proposed token, ARGV[11] how far from the node's
// clock it may be (µs, either side), ARGV[12] the handoff reserve.
// The key is taken when absent or when it holds the value of an EARLIER attempt of the
// same Acquire call (a reply was lost or a round failed), so a retry is never blocked by
// its own leftovers, while a late release of that earlier attempt (which compares the
// full value) can never delete the new one. A later attempt's value is never taken over:
// an earlier round's SET that arrives late (on another connection) would otherwise
// replace the value a later, granted round holds, and that earlier round's cleanup would
// then delete it, freeing the node under the holder. Busy returns {0, PTTL}. A free key
// is taken with SET NX first (one call: the usual case); only a taken one is read. Every
// grant also returns the node's data marker (markerLua, dataloss.go) and, from a node
// that may evict, its eviction count (evictionsLua). The first try of a writer that may
// wait, without fencing, does without the script: a plain SET NX PX with the marker's GET
// behind it (sendRound, dataloss.go); a busy answer then has no PTTL, and a writer refused by
// readers leaves its mark from its second try (it retries at once, once subscribed).
//
// A key of another type under the lock's name (another client's lock, e.g. Redisson's
// hash) makes GET fail with WRONGTYPE: pcall turns that into "held by someone else", as
// in every script here. A node that answers is up, whatever it holds. A counter of
// another type (nobody else writes under our NUL-suffixed names) counts as missing and
// is overwritten: it starts from the clock.
//
// Shared readers (readAcquireScript) hold the lock name with sharedMarker: to this script
// the key is busy, and it marks a writer as waiting (KEYS[3], the owner prefix, for
// ARGV[7] ms) so that no new reader comes in meanwhile (readgroup.go, "Shared locks"). A
// writer that gets the key clears its own mark, from its second attempt on: before its
// first attempt it has left none, so the usual uncontended acquire does not look (a first
// attempt granted on a quorum may leave a mark where readers refused it; that expires in
// writerMarkTTL).
//
// Fencing (fencing.go): the token is the client's proposal when that is above the counter
// and within the lead of the node's clock (either side), else max(counter+1, node time
// in µs). So a counter lost in a restart or expired for disuse restarts near the clock,
// above every token issued before the quarantine; a client whose clock is wrong only
// loses the one-round fast path.
// The counter then keeps token + reserve, the reserve only while the token is within the
// lead of the clock, so that counters never run further ahead. Grants return
// {1, token, 1 if reserved, marker, eviction count or -1, write sequence or -1}; busy
// {0, PTTL}.
var acquireScript = newScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local cur = redis.pcall('GET', KEYS[1])
  if type(cur) == 'table' or not cur then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  if cur == '` + sharedMarkerLua + `' then
    if tonumber(ARGV[7]) > 0 then redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[7]) end
    return {0, redis.call('PTTL', KEYS[1])}
  end
  if string.sub(cur, 1, #ARGV[3]) ~= ARGV[3] or (tonumber(string.sub(cur, #ARGV[3] + 1)) or math.huge) >= tonumber(ARGV[6]) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if ARGV[6] ~= '1' and redis.pcall('GET', KEYS[3]) == ARGV[3] then
  redis.call('DEL', KEYS[3])
end
` + fencingLua + `
` + markerLua + `
` + evictionsLua + `
` + writeSeqLua + `
return {1, token, reserved, m, ev, sq}
`)

// writeSeqLua advances the node's write sequence (GET and SET, not INCR: the documented
// ACL line grants no INCR, and a script is atomic anyway) (the third key from the end: before the
// marker and the bound) into sq, -1 when the name is "" (a client with the check off:
// benchmarks only). Every script that writes what a holder relies on runs it, in the
// same atomic call as that write, so the two replicate together (rollback.go).
const writeSeqLua = `
local sq = -1
if KEYS[#KEYS - 2] ~= '' then
  sq = (tonumber(redis.call('GET', KEYS[#KEYS - 2])) or 0) + 1
  redis.call('SET', KEYS[#KEYS - 2], sq)
end`

// seqLastLua advances the write sequence when it is the last key ("" for none), for the
// scripts whose other keys are counted (extendScript, retakeScript).
const seqLastLua = `
if KEYS[#KEYS] ~= '' then redis.call('SET', KEYS[#KEYS], (tonumber(redis.call('GET', KEYS[#KEYS])) or 0) + 1) end`

// markerLua reads the node's data marker (the key before the last, dataloss.go) into m,
// "" when it has none, for a grant's reply.
const markerLua = `
local m = redis.pcall('GET', KEYS[#KEYS - 1])
if type(m) ~= 'string' then m = '' end`

// evictionsLua reads the node's eviction count (INFO's evicted_keys) into ev for a
// grant's reply when ARGV[8] is "1", else -1 (and -1 when INFO is refused or has no such
// field). The client asks it of nodes whose maxmemory-policy can evict (node.canEvict):
// an eviction there may take a lock and spare the marker, and a grant from a node that
// evicted since this client's last reading is no vote (grantHolds). Evictions happen
// before a command runs, never inside a script, so the count read here covers every
// eviction before this grant. It costs INFO's stats section (about 5µs of the node's CPU
// per grant, docs/performance.md), so nodes that cannot evict are not asked.
const evictionsLua = `
local ev = -1
if ARGV[8] == '1' then
  local info = redis.pcall('INFO', 'stats')
  if type(info) == 'string' then
    local at = string.find(info, 'evicted_keys:', 1, true)
    if at then ev = tonumber(string.match(info, '^%d+', at + 13)) or -1 end
  end
end`

// fencingLua draws the token of a grant (acquireScript and readAcquireScript; see there):
// ARGV[4] "1" for fencing, ARGV[5] counter ttl ms, ARGV[10] the proposal, ARGV[11] the
// lead, ARGV[12] the handoff reserve; KEYS[2] the counter, the last key the node's bound.
// It sets token and reserved. The counter's expiry is the client's counter ttl or twice
// the bound the node keeps, whichever is longer (counterTTLLua).
const fencingLua = `
local token, reserved = 0, 0
if ARGV[4] == '1' then
  local cttl = tonumber(ARGV[5])
  ` + counterTTLLua + `
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local lead = tonumber(ARGV[11])
  local cv = redis.pcall('GET', KEYS[2])
  local floor = ((type(cv) == 'string' and tonumber(cv)) or 0) + 1
  local p = tonumber(ARGV[10])
  if p >= floor and p >= now - lead and p <= now + lead then
    token = p
  else
    token = math.max(floor, now)
  end
  local stored = token
  if token <= now + lead then
    stored = token + tonumber(ARGV[12])
    reserved = 1
  end
  redis.call('SET', KEYS[2], string.format('%.0f', stored), 'PX', cttl)
end`

// maxBoundMsLua is maxBound in ms, for the scripts (TestMaxBoundMsLua keeps them equal).
const maxBoundMsLua = "86400000"

// counterTTLLua sets cttl, the expiry of a counter written now (ms): the writing client's
// counter ttl (the Lua variable cttl holds it on entry: ARGV[5] or the commit's ARGV[3]),
// or twice the bound the node keeps (the last key: the longest max_ttl any client
// announced to it, which every client announces before its first lock command on a
// connection), whichever is longer. A client with a small max_ttl that has not read a
// larger bound yet would otherwise let a counter lapse before the tokens of a client with
// a longer one are overtaken by the clocks (fencing.go, "Counter expiry"). A bound above
// maxBound is not believed (announceScript replaces it).
const counterTTLLua = `local nb = redis.pcall('GET', KEYS[#KEYS])
  nb = (type(nb) == 'string' and tonumber(nb)) or 0
  if nb > ` + maxBoundMsLua + ` then nb = 0 end
  if 2 * nb > cttl then cttl = 2 * nb end`

// sharedMarker is what the lock name holds while readers hold the key: no Redlock client
// writes it (it begins with NUL), so to all of them, ours and others', the key is busy.
// sharedMarkerLua is the same as a Lua string literal (Lua's \0 escape).
const (
	sharedMarker    = "\x00shared"
	sharedMarkerLua = `\0shared`
)

// channelSuffixLua is channelSuffix as a Lua string literal (TestReleaseNoticeOnTheKeysChannel).
const channelSuffixLua = `\0released`

// readAcquireScript takes the key shared (a reader). KEYS[1] lock, KEYS[2] counter,
// KEYS[3] writer-waiting mark, KEYS[4] the readers (a sorted set: value -> expiry, ms of
// the node's clock), KEYS[5] the readers' turn mark, KEYS[6] the write sequence, KEYS[7]
// the data marker, KEYS[8] the node's bound; ARGV and replies as acquireScript's. Busy, {0, PTTL}, while a writer
// holds the lock name or a writer waits (the mark) outside the readers' turn; else the
// reader's entry is added with its own expiry and the lock name holds sharedMarker until
// the last entry expires (so the name and the set lapse together, and a plain SET NX,
// anyone's, finds the key busy). Expired entries (crashed readers) are dropped first.
//
// Phases (readgroup.go, "Shared locks"): a reader refused marks readers as waiting (KEYS[5]
// holds, for ARGV[7] ms as a writer's mark, the longest turn the waiting readers asked
// for, ms: ARGV[9], waitMarkLua); a writer's release that finds that mark turns it into
// the readers' turn (KEYS[5] = "t", releaseScript) and leaves the lock name holding
// sharedMarker for as long, with no entry: writers are refused meanwhile (and mark
// themselves as waiting) while readers go in even past a writer's mark. The marks only
// delay; no grant rests on them.
var readAcquireScript = newScript(`
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'table' or (cur and cur ~= '` + sharedMarkerLua + `') then
  ` + waitMarkLua + `
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.pcall('GET', KEYS[3]) and redis.pcall('GET', KEYS[5]) ~= 't' then
  ` + waitMarkLua + `
  return {0, redis.call('PTTL', KEYS[3])}
end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ms)
redis.call('ZADD', KEYS[4], ms + tonumber(ARGV[2]), ARGV[1])
` + readersExpiryLua + `
` + fencingLua + `
` + markerLua + `
` + evictionsLua + `
` + writeSeqLua + `
return {1, token, reserved, m, ev, sq}
`)

// waitMarkLua marks readers as waiting (KEYS[5], for ARGV[7] ms unless that is 0: a
// last try) with the longest turn any waiting reader asked for (ARGV[9] ms): a reader
// of a distant or slow instance, whose release notice and round come later than the
// releasing writer's own rounds would allow, asks for a longer turn, and longer again
// for each turn it missed (Client.readersTurnAsk). A mark of an older version ("w") counts
// as no request.
const waitMarkLua = `if tonumber(ARGV[7]) > 0 then
    local asked = tonumber(redis.pcall('GET', KEYS[5])) or 0
    redis.call('SET', KEYS[5], math.max(asked, tonumber(ARGV[9]) or 0), 'PX', ARGV[7])
  end`

// readersExpiryLua gives the lock name (KEYS[1]) and the readers' set (KEYS[4]) the
// expiry of the last reader entry (ms: the node's clock), or deletes both when no entry
// is left. The lock name is touched only while it is free or holds sharedMarker.
const readersExpiryLua = `
local name = redis.pcall('GET', KEYS[1])
local ours = name == false or name == '` + sharedMarkerLua + `'
local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) > ms then
  local left = tonumber(last[2]) - ms
  if ours then redis.call('SET', KEYS[1], '` + sharedMarkerLua + `', 'PX', left) end
  redis.call('PEXPIRE', KEYS[4], left)
else
  if ours then redis.call('DEL', KEYS[1]) end
  redis.call('DEL', KEYS[4])
end`

// readReleaseScript gives a reader's entry back. KEYS[1..4] as readAcquireScript's; ARGV[1]
// value, ARGV[2] release channel, ARGV[3] the releasing client's id. The last reader out
// frees the lock name and notifies waiters (writers wait for that; readers wait only for
// writers). Returns as releaseScript does.
var readReleaseScript = newScript(`
if redis.pcall('ZREM', KEYS[4], ARGV[1]) ~= 1 then return 0 end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ms)
` + readersExpiryLua + `
if not redis.pcall('GET', KEYS[1]) then
  return 1 + redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
`)

// commitScript makes a fencing token durable before it is used: only while we still hold
// the key on this node, raise the counter to at least the token.
// KEYS[1] lock, KEYS[2] counter, KEYS[3] readers, KEYS[4] the write sequence (advanced
// when the counter is: writeSeqLua, rollback.go), KEYS[5] the node's bound; ARGV[1]
// value, ARGV[2] token, ARGV[3] counter ttl ms (or twice the bound: counterTTLLua),
// ARGV[4] "1" for a reader (its entry in the readers' set is what it holds).
var commitScript = newScript(`
if ARGV[4] == '1' then
  local sc = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
  local t = redis.call('TIME')
  if type(sc) ~= 'string' or tonumber(sc) <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 0 end
elseif redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local cv = redis.pcall('GET', KEYS[2])
local c = (type(cv) == 'string' and tonumber(cv)) or 0
local cttl = tonumber(ARGV[3])
` + counterTTLLua + `
if tonumber(ARGV[2]) > c then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', cttl)
  if KEYS[4] ~= '' then redis.call('SET', KEYS[4], (tonumber(redis.call('GET', KEYS[4])) or 0) + 1) end
else
  redis.call('PEXPIRE', KEYS[2], cttl)
end
return 1
`)

// extendScript renews any number of locks in one call. For n locks: ARGV[i] the value of
// lock i, ARGV[n+i] its ttl ms, ARGV[2n+i] "1" if it is a reader; KEYS[i] its lock name,
// and after the n names, the readers' set of each reader, in order. Per lock: 1 =
// extended, 2 = absent, 0 = held by someone else. A reader is extended while its entry
// is live and the name still holds sharedMarker; its entry's new expiry may lengthen the
// name's and the set's. The last key is the node's write sequence ("" for none), advanced
// once per call (seqLastLua, rollback.go): a renewal lost in a rollback shortens a lock.
// An absent key is not re-taken here: only a lock still renewed on a quorum may re-take
// the nodes it is missing from (retakeScript), or a force release (or any deletion of a
// majority) would be undone by the holder's next renewal.
var extendScript = newScript(`
local n = #ARGV / 3
local res = {}
local r = n
local ms
for i = 1, n do
  local k = KEYS[i]
  local cur = redis.pcall('GET', k)
  if ARGV[2 * n + i] == '1' then
    r = r + 1
    local rk = KEYS[r]
    if cur == '` + sharedMarkerLua + `' then
      if not ms then
        local t = redis.call('TIME')
        ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      local sc = redis.pcall('ZSCORE', rk, ARGV[i])
      if type(sc) == 'string' and tonumber(sc) > ms then
        local exp = ms + tonumber(ARGV[n + i])
        redis.call('ZADD', rk, 'XX', exp, ARGV[i])
        if redis.call('PTTL', k) < exp - ms then
          redis.call('PEXPIRE', k, exp - ms)
          redis.call('PEXPIRE', rk, exp - ms)
        end
        res[i] = 1
      else
        res[i] = 2
      end
    elseif not cur then
      res[i] = 2
    else
      res[i] = 0
    end
  elseif cur == ARGV[i] then
    redis.call('PEXPIRE', k, ARGV[n + i])
    res[i] = 1
  elseif not cur then
    res[i] = 2
  else
    res[i] = 0
  end
end
` + seqLastLua + `
return res
`)

// retakeScript puts locks back on a node that lost them (a restart without persistence)
// while a quorum still holds them: SET NX, so it never overwrites another holder.
// KEYS[i] lock, ARGV[i] value, ARGV[n+i] ttl ms for the n = #KEYS - 1 locks; the last
// key the node's write sequence ("" for none: seqLastLua, rollback.go). Returns how many
// were set.
var retakeScript = newScript(`
local n = #KEYS - 1
local set = 0
for i = 1, n do
  if redis.call('SET', KEYS[i], ARGV[i], 'NX', 'PX', ARGV[n + i]) then set = set + 1 end
end
` + seqLastLua + `
return set
`)

// releaseScript is compare-and-delete, then a notice to waiters.
// KEYS[1] lock; ARGV[1] value, ARGV[2] the releasing client's id (the notice payload: a
// client ignores its own notices, whose waiters it hands the baton to directly). The
// notice goes on the key's release channel: the lock's name and channelSuffix (names.go),
// made here rather than sent (every argument costs the node a little on every call),
// or, for a place of a limited key (whose waiters listen on the key's channel), ARGV[3].
// Returns 0 if the key did not hold the value, else 1 + the number of subscribers the
// notice reached (the releasing client's own subscription included).
// Optionally (never for a place) KEYS[2] the readers' turn mark, ARGV[3] the turn's
// length and ARGV[4] the longest turn the releasing client gives, ms: when readers marked
// themselves as waiting (readAcquireScript), the lock name is left holding sharedMarker,
// with no reader entry, for the turn, and the mark says it is the readers' turn: the
// readers woken by the notice go in before any writer (readgroup.go, "Shared locks"). The turn
// is ARGV[3], or the longest the waiting readers asked for (the mark's value) up to
// ARGV[4]. The marker holds nothing: it lapses, or the readers' scripts give it their
// entries' expiry. A lock taken with AcquireOptions.NoReaders does not look for the mark.
var releaseScript = newScript(`
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local ch = KEYS[1] .. '` + channelSuffixLua + `'
  if KEYS[2] then
    if tonumber(ARGV[3]) > 0 then
      local asked = redis.pcall('GET', KEYS[2])
      if type(asked) == 'string' and asked ~= 't' then
        local turn = math.max(tonumber(ARGV[3]), math.min(tonumber(asked) or 0, tonumber(ARGV[4]) or 0))
        redis.call('SET', KEYS[1], '` + sharedMarkerLua + `', 'PX', turn)
        redis.call('SET', KEYS[2], 't', 'PX', turn)
      end
    end
  elseif ARGV[3] then
    ch = ARGV[3]
  end
  return 1 + redis.call('PUBLISH', ch, ARGV[2])
end
return 0
`)

// Force release is the operator override: free the key whoever holds it, readers, a
// waiting writer's mark, the readers' turn and a limited key's places included. It takes
// two steps on each node, so that a step that lands late (held by a partition, or read
// by a paused node when it resumes) frees only what was there when the operator asked
// (force.go, "Force release and the holders of other clients"): forceReadScript reads what holds each name, and
// forceReleaseScript deletes exactly that, comparing values as a release does.
// Both take KEYS[1] lock, KEYS[2] writer-waiting mark, KEYS[3] readers' turn mark,
// KEYS[4] readers (as readersExpiryLua wants them), KEYS[5..] places.
//
// What a name held is said in one string: "" nothing, "s" followed by its value (a
// string), or "x" a key of another type (another client's lock: Redisson's hash), whose
// value the commands the ACL line grants cannot read.

// forceReadScript returns what the names hold: {lock, writer mark, turn mark, the number
// of reader entries, the entries..., then for each place held, its index (1-based, in
// KEYS[5..]) and what it holds}. The readers' entries are read only when the lock name
// holds sharedMarker (a user without the sorted-set commands can force other keys). An
// error other than WRONGTYPE (a command the user may not run) fails the script.
var forceReadScript = newScript(`
` + forceHeldLua + `
local out = {held(KEYS[1]), held(KEYS[2]), held(KEYS[3]), 0}
if out[1] == 's` + sharedMarkerLua + `' then
  local e = redis.call('ZRANGE', KEYS[4], 0, -1)
  out[4] = #e
  for i = 1, #e do out[#out + 1] = e[i] end
end
for i = 5, #KEYS do
  local p = held(KEYS[i])
  if p ~= '' then
    out[#out + 1] = i - 4
    out[#out + 1] = p
  end
end
return out
`)

// forceHeldLua defines held(k): what name k holds, in the force release's one string.
const forceHeldLua = `local function held(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    if string.find(tostring(v.err), 'WRONGTYPE', 1, true) then return 'x' end
    return redis.call('GET', k)
  end
  if not v then return '' end
  return 's' .. v
end`

// forceReleaseScript deletes what forceReadScript read, where it still is: each name
// only while it holds what was read (a key of another type while it still is one), and
// each reader entry read; a lock name holding sharedMarker then keeps the expiry of the
// entries left (readersExpiryLua: a later reader's entry keeps it) and goes with the
// last. KEYS as forceReadScript's, with only the places read as held; ARGV[1] release
// channel, ARGV[2] what the lock name held, ARGV[3] the writer mark, ARGV[4] the turn
// mark, ARGV[5] the number r of reader entries, ARGV[6..5+r] the entries, then what each
// place of KEYS[5..] held. Returns how many of the lock name (with its readers) and the
// places it deleted, and notifies waiters when that is any.
var forceReleaseScript = newScript(`
` + forceHeldLua + `
local function gone(k, was)
  if was ~= '' and held(k) == was then return redis.call('DEL', k) end
  return 0
end
local n = 0
local r = tonumber(ARGV[5])
if ARGV[2] == 's` + sharedMarkerLua + `' then
  local had = redis.pcall('GET', KEYS[1]) == '` + sharedMarkerLua + `'
  for i = 6, 5 + r do n = n + redis.call('ZREM', KEYS[4], ARGV[i]) end
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ms)
  ` + readersExpiryLua + `
  if n > 0 or (had and not redis.pcall('GET', KEYS[1])) then n = 1 end
else
  n = gone(KEYS[1], ARGV[2])
end
gone(KEYS[2], ARGV[3])
gone(KEYS[3], ARGV[4])
for i = 5, #KEYS do n = n + gone(KEYS[i], ARGV[i + 1 + r]) end
if n > 0 then redis.call('PUBLISH', ARGV[1], 'force') end
return n
`)

// announceScript keeps, under the prefix, the longest ttl any client of these nodes may
// use (voting.go) and the node's data marker (dataloss.go): KEYS[1] the bound key,
// KEYS[2] the marker key; ARGV[1] the announcing client's MaxTTL in ms, ARGV[2] how long
// that announcement (and the marker) lives in ms, ARGV[3] the largest bound believed
// (maxBound), ARGV[4] a new marker's mark (the client's first mark on its first hello
// to the node, else a random one: voting.go), used only when the node has none. The larger
// bound wins; the winner's announcement sets the expiry, so a bound outlives its last
// announcer by that much and then lapses (a client long gone no longer lengthens
// everyone's quarantine). A value no client of ours wrote (not a number, above maxBound,
// or without an expiry) is replaced. The marker is created as mark/run_id:clock, the
// process that made it and the node's clock in ms (run_id "" and clock 0 for a user not
// granted INFO or TIME: the permission probe names them), else kept alive; the clock
// stays last, so older clients still read the marker's age. KEYS[3], when given and not
// "", is the node's write sequence, read (never written) for the reply (rollback.go), and
// ARGV[5] the highest this client had read there when it sent the announce and ARGV[6]
// that reading's epoch, returned as they came, so the reply is judged against a reading
// that surely preceded it. Returns {bound now stored in ms, marker, node clock in ms,
// write sequence (0 none, -1 not asked), ARGV[5], ARGV[6]}.
// A plain string so it can go out as EVAL in a pipeline.
const announceScript = `
local cur = redis.pcall('GET', KEYS[1])
cur = (type(cur) == 'string' and tonumber(cur)) or 0
if cur > tonumber(ARGV[3]) or (cur > 0 and redis.call('PTTL', KEYS[1]) < 0) then cur = 0 end
local mine = tonumber(ARGV[1])
if mine >= cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  cur = mine
end
local t = redis.pcall('TIME')
local now = 0
if type(t) == 'table' and t[1] then now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
local m = redis.pcall('GET', KEYS[2])
if type(m) ~= 'string' then
  local info = redis.pcall('INFO', 'server')
  local rid = (type(info) == 'string' and string.match(info, 'run_id:(%x+)')) or ''
  m = ARGV[4] .. '/' .. rid .. ':' .. now
  redis.call('SET', KEYS[2], m, 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
local sq = -1
if KEYS[3] and KEYS[3] ~= '' then
  sq = redis.pcall('GET', KEYS[3])
  sq = (type(sq) == 'string' and tonumber(sq)) or 0
end
return {cur, m, now, sq, tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0}
`

// newScript makes a script run by digest (transport.Script).
func newScript(src string) *transport.Script { return transport.NewScript(src) }

// scripts are all the client's scripts run by digest, with what ACL hints say of them:
// their names and the Redis commands they run (the transport adds its permission
// probe). announceScript is not among them: it always goes as EVAL (node.hello). The
// releases are cleanups: behind a call refused with NOSCRIPT they run again after it
// (transport's batcher), so a release never stays ahead of the SET it cleans up.
var scripts = transport.NewScripts(
	acquireScript.About("acquire", "GET", "PTTL", "SET", "DEL", "TIME", "INFO"),
	readAcquireScript.About("shared acquire", "GET", "PTTL", "SET", "DEL", "TIME", "ZREMRANGEBYSCORE", "ZADD", "ZRANGE", "PEXPIRE", "INFO"),
	readReleaseScript.About("shared release", "GET", "SET", "DEL", "TIME", "ZREM", "ZREMRANGEBYSCORE", "ZRANGE", "PEXPIRE", "PUBLISH").AsCleanup(),
	commitScript.About("fencing commit", "GET", "SET", "PEXPIRE", "ZSCORE", "TIME"),
	extendScript.About("renewal", "GET", "PEXPIRE", "PTTL", "TIME", "ZSCORE", "ZADD"),
	retakeScript.About("re-take", "SET", "GET"),
	releaseScript.About("release", "GET", "DEL", "SET", "PUBLISH").AsCleanup(),
	forceReadScript.About("force release's read", "GET", "ZRANGE"),
	forceReleaseScript.About("force release", "GET", "DEL", "ZREM", "TIME", "ZREMRANGEBYSCORE", "ZRANGE", "SET", "PEXPIRE", "PUBLISH"),
)
