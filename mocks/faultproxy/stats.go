package faultproxy

import (
	"maps"
	"sync"
)

// CommandKey identifies commands by name and namespace in Stats.
type CommandKey struct {
	// Name is the command name, e.g. "insert".
	Name string
	// Namespace is "database.collection", or the database alone for a
	// database-level command.
	Namespace string
}

// Stats is a snapshot of the proxy's counters, for amplification figures
// (how many commands and documents the driver and writeguard sent for a
// given workload, and how many faults fired). The maps are copies owned by
// the caller; a missing key means zero.
type Stats struct {
	// Connections is the number of client connections accepted.
	Connections int64
	// Commands counts commands received from clients, by name (monitoring
	// and handshake hellos included).
	Commands map[string]int64
	// CommandsByNamespace counts commands by name and namespace.
	CommandsByNamespace map[CommandKey]int64
	// Documents counts statements received, by command name: insert
	// documents, update statements, delete statements, bulkWrite ops.
	Documents map[string]int64
	// Forwarded counts statements sent on to the server (or the null
	// backend), by command name: Documents minus the ones a fault
	// rejected or dropped.
	Forwarded map[string]int64
	// Faults counts faults fired, by kind. FaultValidation and
	// FaultDocument count rejected documents; the other kinds count
	// commands.
	Faults map[FaultKind]int64
	// Shards counts statements sent in child batches, by shard name
	// (sharded mode, and FailShard faults).
	Shards map[string]int64
	// ChildBatches counts the child batches sent (or failed by
	// FailShard), by shard name.
	ChildBatches map[string]int64
}

// Count returns the number of commands named name, all namespaces
// together.
func (s Stats) Count(name string) int64 { return s.Commands[name] }

// CountIn returns the number of commands named name on namespace ns.
func (s Stats) CountIn(name, ns string) int64 {
	return s.CommandsByNamespace[CommandKey{Name: name, Namespace: ns}]
}

type counters struct {
	mu          sync.Mutex
	connections int64
	commands    map[string]int64
	byNS        map[CommandKey]int64
	documents   map[string]int64
	forwarded   map[string]int64
	faults      map[FaultKind]int64
	shards      map[string]int64
	children    map[string]int64
}

func newCounters() *counters {
	c := &counters{}
	c.reset()
	return c
}

func (c *counters) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connections = 0
	c.commands = map[string]int64{}
	c.byNS = map[CommandKey]int64{}
	c.documents = map[string]int64{}
	c.forwarded = map[string]int64{}
	c.faults = map[FaultKind]int64{}
	c.shards = map[string]int64{}
	c.children = map[string]int64{}
}

func (c *counters) shard(name string, statements int) {
	c.mu.Lock()
	c.children[name]++
	c.shards[name] += int64(statements)
	c.mu.Unlock()
}

func (c *counters) connection() {
	c.mu.Lock()
	c.connections++
	c.mu.Unlock()
}

func (c *counters) command(cmd *Command, statements int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commands[cmd.Name]++
	c.byNS[CommandKey{Name: cmd.Name, Namespace: cmd.Namespace}]++
	if statements > 0 {
		c.documents[cmd.Name] += int64(statements)
	}
}

func (c *counters) forward(name string, statements int) {
	if statements == 0 {
		return
	}
	c.mu.Lock()
	c.forwarded[name] += int64(statements)
	c.mu.Unlock()
}

func (c *counters) fault(k FaultKind, n int) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.faults[k] += int64(n)
	c.mu.Unlock()
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Connections:         c.connections,
		Commands:            maps.Clone(c.commands),
		CommandsByNamespace: maps.Clone(c.byNS),
		Documents:           maps.Clone(c.documents),
		Forwarded:           maps.Clone(c.forwarded),
		Faults:              maps.Clone(c.faults),
		Shards:              maps.Clone(c.shards),
		ChildBatches:        maps.Clone(c.children),
	}
}
