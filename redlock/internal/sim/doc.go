// Package sim is a deterministic simulation of the lock core: the real redlock package
// and go-redis, inside a testing/synctest bubble, against simulated Redis nodes that run
// the client's real Lua scripts, over a simulated network, under faults drawn from a
// seed, judged by checkers at simulated instants. docs/simulation.md says what it runs,
// what it finds and what it cannot see; `make sim` runs it (simrun).
//
//	sim.go        Run: one schedule (clients, workload, liveness probe, idle and leak checks)
//	world.go      the world: nodes, links, deliveries through the event queue, node faults
//	net.go        the event queue and its loop; a client's simulated connection; dialing
//	faults.go     a schedule's parameters and fault plan, drawn from the seed; the fault
//	              programs (flushall-twice, young, lateForce, lateValue)
//	workload.go   what the clients do: every mode, cancellations, force releases, GC pauses
//	check.go      the ledger: each mode's promise, fencing, force releases, handoff modes
//	redis.go      a simulated node: keyspace, commands, INFO, pub/sub (resp.go: RESP2)
//	lua.go        Lua as Redis 7 runs it (gopher-lua), for the client's scripts
//	runner_test.go, conformance_test.go   TestSim (seeds) and TestConformance (vs redis-server)
//	seeds_test.go   TestSimSeeds: a seed per fix the simulation finds taken out
//	testdata/reverts/   one patch per fix, to take it out again (docs/simulation.md, the table)
package sim
