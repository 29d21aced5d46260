// Package sim is a deterministic simulation of the lock core: the real redlock package
// and go-redis, inside a testing/synctest bubble, against simulated Redis nodes that run
// the client's real Lua scripts, over a simulated network, under faults drawn from a
// seed, judged by checkers at simulated instants: the conflicts a user would see, and the
// nodes' state itself (every trusted holder backed by a quorum, by the nodes' own clocks,
// at every instant its backing can shrink). docs/simulation.md says what it runs, what it
// finds and what it cannot see; `make sim` runs it (simrun).
//
// The loss budget it keeps within the assumptions (faults.go, plan): at most N - quorum
// nodes lose data (restart, FLUSHALL, failover, snapshot restart) within a window of a
// ttl, a health interval and 3 s; SIM_BEYOND draws more, and clocks past the drift bound
// or jumping, and counts those schedules' violations apart.
//
//	sim.go        Run: one schedule (clients, workload, liveness probe, idle and leak checks)
//	world.go      the world: nodes, links, deliveries through the event queue, node faults
//	net.go        the event queue and its loop; a client's simulated connection; dialing
//	faults.go     a schedule's parameters and fault plan, drawn from the seed; the fault
//	              programs (flushall-twice, young, lateForce, lateValue)
//	replication.go  replicas promoted behind a node's address, snapshot restarts behind a
//	              proxy, hidden run_ids; the failover program; undetectableLoss (drawn only under SIM_BEYOND)
//	workload.go   what the clients do: every mode, cancellations, force releases, GC pauses
//	check.go      the ledger: each mode's promise, fencing, force releases, handoff modes
//	backing.go    the state judge: every trusted holder backed on a quorum of the nodes
//	              (backing_test.go: its expiry instants are the nodes' own, to the µs)
//	redis.go      a simulated node: keyspace, commands, INFO, pub/sub (resp.go: RESP2)
//	lua.go        Lua as Redis 7 runs it (gopher-lua), for the client's scripts
//	runner_test.go, conformance_test.go   TestSim (seeds) and TestConformance (vs redis-server)
//	conformance_replication_test.go   the failover's assumptions vs a real replica
//	shrink_test.go  SIM_SHRINK: a failing schedule reduced to fewer faults and workers
//	seeds_test.go   TestSimSeeds: a seed per fix the simulation finds taken out
//	testdata/reverts/   one patch per fix, to take it out again (docs/simulation.md, the table)
package sim
