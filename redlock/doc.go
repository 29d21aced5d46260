// Package redlock implements the Redlock distributed lock on N independent Redis masters,
// with renewal, release notices for waiters and optional fencing tokens. It knows nothing
// of HTTP or Caddy and can be used as a plain Go library:
//
//	c, err := redlock.New([]string{"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"}, redlock.Options{})
//	l, err := c.Acquire(ctx, "account:42", redlock.AcquireOptions{Wait: 5 * time.Second, Fencing: true})
//	if err != nil { ... a *redlock.BusyError, *redlock.UnavailableError or ctx.Err() ... }
//	defer l.Release(ctx)
//	l.KeepAlive(3*time.Second, time.Minute) // renew while working (ttl 10s by default)
//	ctx, cancel := l.Context(ctx)           // cancelled, with a *redlock.LostError, if the lock is lost
//	defer cancel()
//	err = work(ctx, l.Token())
//
// # Map of the package
//
// Where each rule lives (one home each):
//
//	client.go, options.go        Client, Options and their defaults and ranges; Close
//	acquire.go, round.go         Acquire: the local line, then rounds on all nodes; a round's tally
//	mode.go, handoff.go          what a lock was asked for; handing a released lock to a local waiter
//	state.go                     a lock's states and the only moves between them; keep
//	queue.go                     the local line per key, and its turn: a value spent once
//	lock.go, renew.go            a held lock: validity, Context, Release, HandOver; batched renewals
//	limit.go, multi.go           limit n (places), several keys (AcquireAll)
//	readgroup.go                 shared readers of one client sharing one entry
//	fencing.go                   fencing tokens in one round trip
//	voting.go, dataloss.go       which nodes vote (quarantineOf, a pure function); data-loss marker
//	force.go                     force release and its bookkeeping
//	operator.go                  Status and Inspect: what operators read
//	node.go                      one node as the voting rule sees it: hello/observe (run_id,
//	                             marker, bound), status; CheckNodeURL
//	nodes_call.go                onAll and releaseOnNodes: commands to every node, release tallies
//	notify.go                    release notices: who waits on which channel, waking them
//	scripts.go                   the Lua scripts, and the set run by digest (ACL names, cleanups)
//	errors.go, names.go          the error types (ConfigError: an alias); the names of everything in Redis
//	internal/transport/          the Redis side, no lock semantics: a Node per server (client,
//	                             TLS, URL parsing, health facts, Check), Reply, scripts by digest
//	                             (FIPS-safe, NOSCRIPT fallback), the batcher (Call), OnAll, pub/sub
//	                             subscriptions, ConfigError hints, the permission probe
//	                             (internal/transport/doc.go lists its files)
//
// A lock's life is one field, Lock.state (state.go), with its moves in one table:
// a round takes it (provisional: its Acquire has not kept it yet, and owns the key's
// turn meanwhile), Acquire keeps it (held: renewed by KeepAlive, watched through
// Context; keep moves the turn into it), Release or HandOver begin its end (releasing:
// no renewal from here), and it ends handed on (to a local waiter, which gets a new
// provisional Lock for the same value in Redis), released (deleted in Redis, or given up
// by abandon), or unreleased until the next Release when HandOver found no waiter after
// all. Whether it can still be trusted is the other field, Lock.cause: nil, then the
// first *LostError (expired, taken, vanished, max_hold, force released) or ErrReleased,
// the cause its Context reports. The key's turn in the local line is a value (queue.go,
// turn) that one owner at a time holds, and it is spent once: by pass (to the next
// waiter, or the line is freed) or by handTo (with the lock), so it goes on at most once
// per holder whatever order a release, a force release and a handoff run in. A lock a
// force release ends while provisional never got the turn: its Acquire keeps it and
// contends again.
//
// Lock order: a goroutine holding one of these mutexes takes only those listed after it,
// never one before. readGroups.mu, then queues.mu (which also guards every turn), then
// notifier.mu (a line's release notices); queues.mu and readGroups.mu, then
// Client.heldMu and Lock.mu (a handoff registers the next lock under queues.mu, and so
// does a reader joining its client's group);
// renewer.mu, then Lock.mu (the renewer reads a lock's state); Client.shutMu, then
// heldMu and bgMu. Lock.mu, heldMu, node.mu and round.mu are leaves: nothing is taken
// under them (a Lock's context is cancelled under Lock.mu, and context.AfterFunc
// callbacks run on their own goroutines). So are the transport's (transport.Node.mu,
// probeState.mu, batcher.mu, Subscription.mu): it calls back into redlock (Observe,
// Heard, a round's or a release's Deliver, a notice) with none of them held.
//
// # Protocol
//
// Acquire sends one command (the acquire script: SET key value NX PX ttl, which also lets
// a retry take over its own earlier attempt's value and reads the node's data marker; or,
// for a first try, the plain SET NX PX with the marker's GET behind it) to all nodes at
// once, each call bounded by node_timeout, and returns as soon as the outcome is known. The
// lock is held iff a quorum (N/2+1) granted it and validity = ttl - elapsed - drift > 0, with
// drift = ttl*drift_factor + 2ms and elapsed read from the monotonic clock. A failed round
// is released on every node that may hold our value, and the next try waits for a release
// notice or a jittered delay. Release is compare-and-delete on all nodes; extend is
// compare-and-pexpire on all nodes, re-taking nodes where the key vanished, and must reach
// a quorum within the current validity.
//
// # Safety argument for fencing tokens
//
// Claim: if holder A used token a and a later holder B of the same key got token b, then
// b > a.
//
// Each node keeps a counter per key. When a node grants a lock with fencing on, it takes
// the client's proposal p when p >= counter+1 and |p - now_µs| <= lead, else
// t = max(counter+1, now_µs); it sets counter to t (plus the handoff reserve, below) and
// returns t. The token is
// the maximum over the quorum G that granted (the votes counted). Before Acquire returns,
// a quorum C must keep counter >= token, and only while the key held A's value there:
//   - if every node of G returned the same t, C = G already (one round trip: fencing.go);
//   - else a commit script raises counter to at least the token on a quorum C, only on
//     nodes where the key still holds A's value.
//
// C and B's granting quorum G_B are both majorities, so they share a node x. On x,
// counter_x reached a while x held A's value; B's grant on x needed the key to be absent,
// so it ran later, when counter_x >= a already. B's grant set counter_x to at least a+1,
// and b = max over G_B >= counter_x > a. Pauses and expiry don't matter: the order on x is
// fixed by x itself (one script runs at a time). Every grant is above the node's counter,
// whichever way it was chosen.
//
// Local handoffs (handoff.go) hand the lock to the next waiter of the same Client with
// token+1, without a round trip. That stays inside the claim when every node of C keeps
// counter >= a+K, not a, where K (the reserve, HandoffLimit <= 64) bounds the handoffs in
// a row: the handed tokens a+1 .. a+K are above every earlier token, strictly increase,
// and stay below any later grant, which by the argument above is at least a+K+1. A lock
// is handed on only when every vote of its round kept the reserve (one round trip, the
// same token everywhere); after a commit it is not handed on.
//
// Restarts: if x restarted without its data between A's token reaching C and B's grant, counter_x
// is gone. Two guards: (1) x does not vote until every lock it may have held has lapsed
// (the voting rule, voting.go: a quarantine of the longest ttl any client announced to
// the nodes, plus drift, after the client saw the restart or after x's start), and (2) a
// missing counter starts from the node's clock in microseconds, which is larger than every
// token issued before the restart as long as (a) node clocks differ by less than the
// quarantine and (b) tokens never run ahead of the clocks. Counters also expire when
// unused, for the same reason (below): re-created, they start from the clock. Use AOF with
// appendfsync always where you can; the clock rule is the fallback, and the assumption
// (bounded clock skew between nodes) is stated in docs/safety.md.
//
// Why tokens stay close to the clocks (b): a node takes a proposal only within lead µs
// of its clock (lead <= 100ms and <= a quarter of the quarantine, fencing.go), and keeps
// the reserve K only when its token is within lead of its clock. So every counter is at
// most lead + K above the clock of the node that wrote it, plus one per grant made while
// it was further ahead; and a restarted (or expired) counter starts at least at
// now_µs - lead, which the quarantine puts above every earlier token (it is at least
// 4 x lead: a restarted node's clock has moved on by more than 2 x lead + K); a counter ahead of the clocks moves by those single steps only,
// which the clocks overtake (each grant of a key follows the previous holder's release,
// at least a round trip later). Commits raise counters to a token, never above it, and
// keep no reserve. Without these bounds a hot key granted faster than one grant per K µs
// would push its counters ahead by a reserve per grant, without end, and a client with a
// wrong clock could push them anywhere; a restarted node's clock would then start below
// tokens already issued. The condition docs/safety.md states: node clocks differ by less
// than the quarantine minus 2 x lead + K.
//
// Counter expiry: every script that writes a counter gives it an expiry E, the longer of
// 2 x the writing client's quarantine (counterTTL: about 2 x max_ttl) and 2 x the bound
// the node keeps (the longest max_ttl announced to it, read in the same script:
// counterTTLLua), so a node keeps counters only for keys used in the last E, never an
// hour of unique keys. Why E is long enough:
// let x be the shared node of the argument above, s the time (x's clock) of the last
// write of counter_x, which came at or after counter_x reached a. Redis expires the
// counter when x's clock reads s + E (it stores the expiry as a time of its own clock,
// so a step of x's clock moves both alike), and B's grant after that draws
// b >= now_x - lead >= s + E - lead. The token a was drawn no later than s, by a node
// whose clock then read at most skew more than x's read at s (skew: how far one node's
// clock may read ahead of another's, or of its own a little later, i.e. differences and
// backward steps alike), so a <= s + skew + lead + K (tokens
// stay within lead + K of the clocks, above; the single steps beyond are overtaken by
// the clocks well within E, during which the key saw no grant). So b > a whenever
// skew < E - 2 x lead - K, which the condition in docs/safety.md (skew < quarantine - 2 x lead - K)
// already implies, with a whole quarantine to spare: the expiry never is the weaker
// guard. A lock held longer than E (renewals do not touch the counter) changes nothing:
// B's grant still follows A's release, and s still follows a. Restarts and clock steps
// of x are covered as for the restart case.
//
// Clients with different max_ttl: the condition's quarantine and lead are those of the
// longest max_ttl in use, and a client with a short one writes a shorter E of its own.
// Had x taken E from the writer alone, a client that met the nodes before a longer bound
// was announced (it reads it at its next health check) would let counter_x lapse too
// soon: the tokens of the client with the long max_ttl may run a lead of 100ms ahead of
// the clocks, and the condition allows skew up to that client's quarantine. But every
// client announces its max_ttl on a connection before the first lock command it carries
// there, so x held a bound of at least the max_ttl of whoever drew a (or, if it lost it,
// x lost counter_x too: the restart case), and every later write of counter_x on x gets
// E >= 2 x that bound, which is at least that client's quarantine (2b >= b + drift(b)
// whenever the ttl outlasts its drift, which New requires). So b > a holds under the
// condition of the longest max_ttl whatever the writers' own (the announced bound
// lapses an hour after its last announcer stops, long after its locks and tokens;
// TestCounterExpiryFollowsTheLargestBoundOnTheNode). What still needs max_ttl alike is the
// restart quarantine of a client that has not read the bound yet (above).
//
// # Restart quarantine across clients
//
// Claim: a node x that lost its keys in a restart does not vote until every lock any
// client held on x before the restart has lapsed.
//
// Every client has a MaxTTL (it refuses locks with a longer ttl) and announces it on
// every new connection, before that connection carries any lock command, and on every
// health check; each node keeps the largest announced (announceScript). So when x
// granted a lock of ttl T to client A, x knew a bound >= T, and so did every node of A's
// majority. A lock's holder trusts it for at most ttl - drift after the start of its last
// successful round, which ran before x's restart. Client B holds x back for
// bound + drift(bound) after it saw the restart (run_id changed), or after x's start by
// its uptime (a client that met x after the restart), where bound is the largest of its
// own MaxTTL and the values it read from the nodes, recomputed whenever a vote is
// judged, never frozen. B has read A's announcement from the nodes unless A began to use
// the nodes less than a health interval before B's last reading and B's own quarantine
// ran out before its next one: docs/safety.md tells operators to set max_ttl alike on every
// client for that reason. A node restarted without data forgets the bound too, but the
// other nodes of A's majority keep it; only a majority restarting at once loses it, and
// that Redlock without persistence cannot survive in any case (see fresh starts in
// voting.go).
//
// # Data loss without a restart
//
// Claim: a node x that lost keys without a visible restart (FLUSHALL or FLUSHDB,
// eviction, a failover behind one address, a server whose INFO has no run_id) is held
// back like a restarted one, from the first health check of B that follows the loss.
//
// Each node keeps a data marker under the prefix (dataloss.go): a random value with x's
// clock when it was written, created by the first announce that finds none and kept
// alive by every announce of every client. A loss that takes the marker with it shows
// as a marker gone (re-created with another value) or changed at B's next reading; an
// eviction may spare the marker, but INFO's evicted_keys then moves. Either is a loss
// seen (QuarantineDataLoss): x does not vote for the quarantine after B saw it, exactly as
// after a restart, and is not even asked meanwhile. A client meeting x for the first
// time takes the marker's age as it takes the uptime: data begun less than a quarantine
// ago is young. The rule itself is one pure function of these facts and the time
// (quarantineOf, voting.go; TestQuarantineOf, TestObserveSeesDataLoss,
// TestFlushedNodeDoesNotVote). Between two health checks the acquires see it themselves:
// each grant carries x's marker as the acquire script read it, in the same atomic call,
// and a grant with the marker gone or changed since B's last reading is no vote and
// quarantines x at once (grantHolds; TestFlushWindowTwoHolders). A grant by x after
// the loss is therefore never counted by a client that read x's marker before it.
//
// The first try of a writer that may wait, without fencing, to a node that cannot evict
// is not the script but a plain SET NX PX with the marker's GET behind it, on the same
// connection and in the same pipeline; one GET serves every such SET of the pipeline
// (sendRound, transport's Command.Then). Claim: such a grant proves what a script's
// grant proves, that x had lost nothing since B's last reading of its marker when it
// granted the SET. A node is one server (proxies that spread one connection's commands
// over several servers are no node, as a Cluster is none), and a server runs the
// commands of one connection one at a time, in the order they were sent: the GET ran
// after the SET (TestThenRunsBehindItsCallsOncePerPipeline). A loss before the SET took
// the marker (a loss that spares it is an eviction, and a node that may evict gets the
// script, with its eviction count), so the later GET reads it gone or re-created: no
// vote, as with the script. A loss between the SET and the GET is seen the same way (no
// vote for a grant that was good: liveness lost, once). A health check of B between the
// two that reads the re-created marker has B see the loss itself, and grantHolds judges
// the grant against the hold-back of a loss seen and the marker in one step, in either
// order the replies come: no vote. A restart closes the connection, so the GET cannot
// run on the restarted server: the call fails, no vote. A loss after the GET is a loss
// after the grant, as with the script. TestFlushWindowTwoHolders runs both ways.
//
// Having seen the loss in a grant, B forgets x's marker (the next reading is a first
// sight, dated by its age) and has none to check x's grants against until it reads the
// marker again. So x does not vote until then, even past the quarantine (markerDue,
// voting.go): with max_ttl + drift shorter than the health interval the quarantine would
// end first, and a second loss of x in that window would go unseen
// (TestSecondFlushBeforeTheMarkerIsReadAgain). The reading then dates x's data by the
// marker's age: it was re-created after the loss, so x is young until a quarantine after
// that, and everything x lost had lapsed by then (a lock lost at t was granted before t
// with a ttl within the bound).
//
// Evictions between two health checks. Under memory pressure a node with an evicting
// maxmemory-policy (volatile-ttl, -lru, -lfu, allkeys-*) takes lock keys before the
// marker (lock keys expire sooner, and every health check touches the marker), so the
// marker check alone would let x, having evicted A's lock, grant the key to B until B's
// next health check. So a grant from a node that may evict (a maxmemory limit and a
// policy other than noeviction, as the last INFO read them: node.canEvict) also carries
// x's eviction count, read in the same atomic call (evictionsLua: Redis evicts before a
// command runs, never inside a script, so the count covers every eviction before the
// grant), and a count other than B's last reading of it is a loss seen: no vote, and x
// quarantined from now (grantHolds; TestEvictionSparingTheMarkerDoesNotLendAVote).
// Claim: a grant by x after an eviction counts for B only once every lock the eviction
// took has lapsed. The count only grows while x runs, and a reset (a restart, CONFIG
// RESETSTAT) is a change too, so two readings that agree saw no eviction between them.
// If the grant's count agrees with B's last reading (grants and health checks, in the
// order B took them in), that reading was taken after the eviction. Go back through B's
// readings to the first one taken after it: either the reading before that one disagreed
// with it, and B quarantined x when it took it in, after the eviction; or it is B's
// first reading, which cannot date the evictions it counts, and a node that may evict
// and has evicted is held back a quarantine from the first sight (observe). Either way x
// is held back from a moment after the eviction for a quarantine, by whose end every
// lock the eviction took has lapsed. The count costs the node INFO's
// stats section per grant (docs/performance.md), which is why nodes that cannot evict are
// not asked. Not covered: a node switched at runtime (CONFIG SET) to a policy that may
// evict is judged by its old one until the next health check reads the new one, so an
// eviction within that health interval is seen only then; and a node whose scripts cannot
// read the count (INFO refused inside scripts, no evicted_keys) is judged by its health
// checks alone (logged once: warnNoEvictions).
//
// A grant is judged in one step under the node's lock (grantHolds): the hold-back of a
// loss already seen and the marker check. In two steps, a health check seeing the loss
// between them would adopt the new marker after the first step had passed, and the
// second would then pass too. That grant would still have been safe (the same health
// check dates x's data by the new marker: young, and Client.votes refuses the grant, or
// older than a quarantine, and everything x lost has lapsed), but only by the young rule,
// which a fresh start lifts; one step needs no such argument.
//
// Run nodes with maxmemory-policy noeviction, and with AOF where you can.
//
// # Waiting
//
// Within one Client, waiters for one key form a FIFO; only the head contends in Redis.
// The head subscribes to the key's release channel on every node (one subscriber
// connection per node per Client) and waits until enough nodes confirmed the
// subscription that any majority includes one of them, so a release cannot slip between
// its try and its sleep. Release publishes on every node it deletes from.
//
// # Shared locks
//
// AcquireOptions.Shared takes a key as a reader. On each node, readers keep an entry each
// in a sorted set beside the lock name (value -> expiry on the node's clock), and while
// any entry lives the lock name itself holds sharedMarker with the expiry of the
// longest-lived entry (readAcquireScript); during a readers' turn (below) it holds
// sharedMarker with no entry, for the turn. A writer is an ordinary exclusive lock: the
// same SET NX PX on the lock name.
//
// Claim: a writer never holds a key while a reader does, across N masters. A reader holds
// when a majority R of nodes granted its entry within its validity; a writer when a
// majority W granted the lock name. R and W share a node x. On x, each grant is one
// atomic script: a reader is granted only while the name is free or holds the marker
// (no writer), and from then until the entry expires or is released the name holds the
// marker (every script that changes the entries sets the name's expiry to the last
// entry's, and only the last entry out deletes it), so a writer's SET NX there fails;
// a writer's grant makes the name hold its value, and a reader is refused while it does.
// So x granted at most one of them for any moment at which both would be valid: the
// validity of each is counted, as for the mutex, from before its round on the client's
// monotonic clock, minus drift, while the node's entry and the name's expiry run at
// least as long. Readers do not exclude each other: their entries are separate.
//
// A crashed reader's entry lapses after its ttl on each node (expired entries are dropped
// by every later script), so it holds up writers for one ttl, like a crashed writer.
// Restarts: a node that lost its entries is quarantined exactly as for the mutex
// (voting.go), since a reader's entries on a majority are what a writer's majority must
// meet. A renewal (extendScript) extends a reader only where its entry is still live and
// the name still holds the marker; readers are not re-taken on a node that lost them.
//
// Writers are not starved: a writer refused because readers hold the key leaves a mark
// (its owner prefix, for writerMarkTTL, renewed at each of its tries, cleared when it
// gets the key), and a reader is refused while a mark stands (outside the readers' turn,
// below). So the readers present when a writer came finish, no new ones start, and the
// writer gets the key; readers that came after it wait for its release notice. A writer
// that gives up leaves its mark until it lapses (at most writerMarkTTL).
//
// Phases, so that readers and writers alternate (a phase-fair reader-writer lock) across
// processes: a reader refused by a writer (its lock or its mark) marks readers as waiting
// (the turn key, for writerMarkTTL, renewed at each of its tries, holding the longest
// turn a waiting reader asked for); a writer's release that deletes its value and finds
// that mark leaves the lock name holding sharedMarker with no reader entry, and the mark
// saying "t", both for the readers' turn: the releasing client's own (readersTurn: 4 of
// its recent acquire rounds, 10ms to node_timeout), or the longer one asked for, up to 4
// of its node timeouts (readersTurnAsk, below).
// Meanwhile writers are refused (the name holds the marker: they mark themselves as
// waiting, and retry when the turn ends) and readers go in even past a writer's mark;
// each reader's grant gives the name its entry's expiry as usual. So the readers woken by
// the release go in as one batch before the next writer, whichever process it is in, and
// the next writer then goes before any later reader. Within a process (readgroup.go):
// while readers of a client wait for a key, a writer's release there goes to Redis
// rather than to that client's next writer, and that writer lets them go first (as for
// other clients' waiters); one release notice wakes every waiter of a process at once.
//
// The marks and the turn only delay; safety never rests on them. A reader's grant still
// needs the name free or holding the marker on that node, a writer's still needs SET NX
// (the turn's marker, holding no entry, only refuses writers, like a reader that leaves
// at once), and every argument above is about grants. A lost, lapsed or forced-away mark
// or turn costs ordering, never exclusion.
//
// A writer's wait is bounded: the readers inside when it came, plus, if it came during a
// turn, the rest of that turn and the readers that went in during it (their work and
// ttl bound each), plus about a round trip of local joiners (below); no reader that comes
// after its mark stands and the turn is over goes in before it. A writer that gets the key
// ends the phase; the next release starts a turn only if readers were refused meanwhile.
// A reader waits for the writer inside and, while it waits, its turn comes at that
// writer's release, if its release notice and its round land within the turn. The
// releasing client's own rounds say nothing of that: a reader of a distant or slower
// instance hears of the release later and its round takes longer, and with a turn sized
// by the writer alone it would miss every turn for as long as writers kept coming. So a
// refused reader asks for a turn of 4 of its own rounds (readersTurnAsk), doubled for
// each turn it missed (a try refused right after a release notice woke it), and the mark
// keeps the longest asked. Claim: a reader whose notice and round take less than the
// turn cap (4 node timeouts of the releasing client, 400ms by default) goes in at one of
// the first releases after its first refusal: each missed turn doubles its ask, so
// after k misses the turn is 2^k times its own 4 rounds, or the cap
// (TestDistantReaderGetsATurn). Not covered: a reader slower than the cap, and one whose
// release notices are lost (it then tries on its retry delay, which need not fall in a
// turn); their wait is bounded only by the writers' coming to an end. A writer's wait
// grows by at most the longer turn. Also not covered: a local handoff between two writers
// of one process does not go through Redis, so readers of another process may wait for
// up to HandoffLimit such handoffs (handoff.go), as before; and the release of a writer
// taken with AcquireOptions.NoReaders (a key its caller says nobody takes shared; the
// plugin sets it where no handler takes keys shared on those nodes and prefix) does not
// look for the mark at all, so readers of such a key wait for the writers' coming to
// an end.
//
// Other Redlock clients (redsync, node-redlock) see the marker as somebody's lock: their
// exclusive locks exclude our readers and writers both ways. They cannot take the key
// shared, and a writer of theirs leaves no mark (readers may then keep it from the key
// for as long as they overlap). A readers' turn delays their locks as any holder would,
// for at most the turn.
//
// Fencing: readers and writers draw tokens from the key's one counter by the same rule
// (fencingLua) and the same argument as above, so every holder's token is larger than
// the tokens of all holders that got the key before it, readers and writers alike;
// readers that hold the key together have distinct tokens, but for readers of one client
// sharing one entry (below), which share its token. A storage layer that rejects
// writes with a token below the largest it has seen therefore rejects a writer that was
// overtaken by any later holder.
//
// Local: readers have no local line (they would only wait for each other) and are never
// handed over. A reader that finds a reader of its own client holding the key (same ttl
// and fencing) shares that reader's entry for free (readgroup.go): the entry is held on
// a quorum at least until the validity of any reader that shares it (each comes from a
// grant or renewal of that entry), the last reader out releases it, and a group takes
// joiners only for about one round trip after its entry was taken (at most joinWindow)
// and none while a writer of its client waits, so that a waiting writer (whose mark only
// Redis sees) waits for the readers inside when it came plus at most that. Joiners share the
// entry's token. A force release of the key by the same client never misses a joiner: the
// join checks for force releases and registers the joiner in one step under queues.mu,
// where a force release numbers itself before it lists the holders it marks lost, so the
// joiner is either refused (it goes to Redis, after the deletes) or listed and marked
// lost (TestJoiningReaderCannotEscapeAForceRelease). Readers of a client waiting for a writer each go to Redis when woken (a
// reader joins only as it starts), and during a readers' turn that is where they go in. Readers wait for release notices like the head of a line, and this
// client wakes its own waiters when it releases (it ignores its own notices from Redis).
// A writer that will not wait (its last try) leaves no mark.
//
// # Limited keys
//
// AcquireOptions.Limit = n > 1 (limit.go): n places, each an ordinary exclusive lock
// under its own name. Claim: at most n holders at once. Each holder holds one place by a
// quorum of grants, and two holders of one place cannot both be valid (the mutex's
// argument, place by place); with n places, at most n. A counter of holders voted by
// majority would not do: with n = 2 on 3 nodes, three clients can each win 2 of the 3
// nodes' counters. The places' fencing tokens come from the key's one counter: distinct
// across the key, strictly increasing per place. Restarts, quarantine, renewal and force
// release are the mutex's (a force release deletes every place).
//
// A key's waiters of one client share one local line whatever their mode, but a lock is
// handed on only to a waiter that asked for the same mode, ttl and fencing (mode.go,
// suits). Claim: a limit request always holds one of the key's n places. It gets its lock
// from a round on a place, never from a handoff: places are not handed on (their holder
// leaves the line at once), and an exclusive lock of the same key (another route of the
// same client) is never handed to a limit waiter, which would then hold no place while
// other clients hold all n (TestHandoffNeverGivesALimitWaiterAnExclusiveLock). Likewise a
// lock taken as one of several keys is handed only to another AcquireAll waiting for
// that key, never to a single-key waiter, and the reverse (TestHandoffStaysWithinAMode).
//
// # Several keys
//
// AcquireAll (multi.go) takes sorted, distinct keys one by one, each an ordinary lock
// of the requested mode, releasing those taken when one fails. Claim: no deadlock among
// callers, whatever key sets they ask for. A caller holding keys waits only for a key
// larger than every key it holds; in a cycle of callers each waiting for a key the next
// holds, the keys waited for would strictly increase around the cycle, which cannot
// close. (The wait also bounds each call.) Safety per key is each lock's own; the set is
// lost when any of its locks is, which the caller watches.
//
// Claim: every lock AcquireAll returns is held, with the validity Lock.Info reports. The
// wait for a later key may outlast the ttl, so the keys already taken are renewed
// meanwhile (renewer.hold, the same batched renewals as KeepAlive) and the wait ends
// early when one of them is lost; a set with a lost lock is released whole and taken
// again while the wait lasts (TestAcquireAllKeepsEarlierKeysWhileWaitingLong,
// TestAcquireAllRetakesASetWhoseEarlierKeyWasLost). Its renewals stop when AcquireAll
// returns; the caller's KeepAlive continues from the last renewal.
package redlock
