package e2e

// The oracle's hidden-attempt phase (issue 28 item 7), on the replica-set
// bed (faultproxy.WithReplicaSet) and on the sharded bed
// (faultproxy.WithSharded), with the driver's retryable writes on and a
// deadline on every call: a write applied and its reply lost, then the
// driver's own retry cut by the deadline before it is sent, refused by a
// pool clear, answered 462 labelled NoWritesPerformed, or answered 217; a
// multi update refused on its 2nd document (121, 11000) after writing the
// first; on the sharded bed a child batch whose second update moves its
// shard key (72 copies) and a findAndModify whose shard reply mongos lost
// (6, 89, 9001 after the shard ran it). Each call writes documents of its
// own, and every $inc adds 1 to a counter c of its own documents, so the
// store tells how many times each write was applied. It counts untrue,
// lost, duplicated and double-applied (a non-idempotent update applied
// twice), and prints the unknown and read-back counts (find commands on
// the target through the guarded client).
//
// TRUTH_MONITOR=off (default), on or both: run it without the wire monitor,
// with it (wireMonitor), or both.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

const (
	hiddenCalls    = 48
	hiddenDeadline = 500 * time.Millisecond
)

// truthMonitorModes reads TRUTH_MONITOR: the wire monitor off, on, or
// both (off first).
func truthMonitorModes(t *testing.T) []bool {
	switch m := os.Getenv("TRUTH_MONITOR"); m {
	case "", "off":
		return []bool{false}
	case "on":
		return []bool{true}
	case "both":
		return []bool{false, true}
	default:
		t.Fatalf("TRUTH_MONITOR=%q: want off, on or both", m)
	}
	return nil
}

type hiddenKind int

const (
	hUpdateOne hiddenKind = iota
	hInsertOne
	hUpdateMany
	hFindAndModify
	hBulk // sharded bed: three $inc UpdateOne models on documents of their own
)

func (k hiddenKind) String() string {
	return [...]string{"updateOne", "insertOne", "updateMany", "findOneAndUpdate", "bulkWrite"}[k]
}

type hiddenCall struct {
	i        int
	kind     hiddenKind
	ordered  bool
	ids      []string // the documents the call's inputs write (one per input)
	outcomes []writeguard.Outcome
	err      error
	trace    []string // writeguard's attempts (AttemptFinished)
}

// hiddenScript is the phase's schedule: the retries of the lost replies
// first, then one of each hidden-attempt fate at a fixed occurrence
// (coverFaults) and a seeded schedule.
func hiddenScript(h *faultproxy.HiddenAttempts, ns string, seed int64, sharded bool) []faultproxy.ScriptItem {
	single := func(name string) func() *faultproxy.Rule {
		return func() *faultproxy.Rule {
			return faultproxy.On(name).In(ns).Where(func(c *faultproxy.Command) bool {
				return len(c.Statements()) == 1 && !cmdMulti(c) && !h.IsRetry(c)
			})
		}
	}
	lost := func(f faultproxy.RetryFate) faultproxy.Fault { return h.ReplyLost(f) }
	// One of each fate on the first single-statement commands (few calls
	// send one: coverFaults' every third occurrence would miss some).
	cover := func(rule func() *faultproxy.Rule, faults ...faultproxy.Fault) []faultproxy.ScriptItem {
		out := make([]faultproxy.ScriptItem, len(faults))
		for i, f := range faults {
			out[i] = rule().Nth(i + 1).Do(f)
		}
		return out
	}
	items := []faultproxy.ScriptItem{h.Retries()}
	items = append(items, cover(single("update"), lost(faultproxy.RetryCutByDeadline), lost(faultproxy.RetryOverloaded),
		lost(faultproxy.RetryIncompleteHistory))...)
	// The pool clear cuts every writer off until its call's deadline:
	// late, so that the other faults meet the calls first.
	items = append(items, single("update")().Nth(6).Do(lost(faultproxy.RetryPoolCleared)))
	items = append(items, cover(single("insert"), lost(faultproxy.RetryCutByDeadline), lost(faultproxy.RetryIncompleteHistory))...)
	items = append(items,
		faultproxy.On("update").In(ns).Where(cmdMulti).Always().Do(faultproxy.RandomSchedule(seed,
			faultproxy.Rate{P: 0.4, Fault: faultproxy.RefuseMultiAt(2, faultproxy.WriteError{Code: 121, Message: "Document failed validation"})},
			faultproxy.Rate{P: 0.3, Fault: faultproxy.RefuseMultiAt(2, faultproxy.WriteError{Code: 11000, Message: "E11000 duplicate key error", KeyPattern: cbD("u", 1), KeyValue: cbD("u", 1)})})))
	fam := []faultproxy.Rate{{P: 0.15, Fault: lost(faultproxy.RetryCutByDeadline)}, {P: 0.1, Fault: lost(faultproxy.RetryIncompleteHistory)}}
	if sharded {
		fam = append(fam, faultproxy.Rate{P: 0.1, Fault: faultproxy.ShardReplyLost(6)}, faultproxy.Rate{P: 0.1, Fault: faultproxy.ShardReplyLost(89)},
			faultproxy.Rate{P: 0.1, Fault: faultproxy.ShardReplyLost(9001)})
		batch := func() *faultproxy.Rule {
			return faultproxy.On("update").In(ns).Where(func(c *faultproxy.Command) bool { return len(c.Statements()) > 1 })
		}
		items = append(items, batch().Do(faultproxy.ShardKeyMove(0)),
			batch().Always().Do(faultproxy.RandomSchedule(seed, faultproxy.Rate{P: 0.5, Fault: faultproxy.ShardKeyMove(0)})),
			faultproxy.On("findAndModify").In(ns).Where(func(c *faultproxy.Command) bool { return !h.IsRetry(c) }).Do(faultproxy.ShardReplyLost(89)))
	}
	items = append(items, faultproxy.On("findAndModify").In(ns).Always().Do(faultproxy.RandomSchedule(seed+1, fam...)))
	for k, name := range []string{"update", "insert"} {
		items = append(items, single(name)().Always().Do(faultproxy.RandomSchedule(seed*7+int64(k),
			faultproxy.Rate{P: 0.06, Fault: lost(faultproxy.RetryCutByDeadline)},
			faultproxy.Rate{P: 0.02, Fault: lost(faultproxy.RetryPoolCleared)},
			faultproxy.Rate{P: 0.06, Fault: lost(faultproxy.RetryOverloaded)},
			faultproxy.Rate{P: 0.06, Fault: lost(faultproxy.RetryIncompleteHistory)})))
	}
	return items
}

func cmdMulti(c *faultproxy.Command) bool {
	for _, st := range c.Statements() {
		if m, ok := st.Lookup("multi").BooleanOK(); ok && m {
			return true
		}
	}
	return false
}

// hiddenCallsFor draws the phase's calls.
func hiddenCallsFor(seed int64, sharded bool) []*hiddenCall {
	kinds := []hiddenKind{hUpdateOne, hInsertOne, hUpdateMany, hFindAndModify}
	if sharded {
		kinds = append(kinds, hBulk)
	}
	var calls []*hiddenCall
	for i := range hiddenCalls {
		c := &hiddenCall{i: i, kind: kinds[(i+int(seed))%len(kinds)], ordered: (i/len(kinds))%2 == 0}
		switch c.kind {
		case hUpdateMany:
			c.ids = []string{fmt.Sprintf("m-%d", i)} // and m-<i>-2, the same g
		case hBulk:
			c.ids = []string{fmt.Sprintf("b-%d-0", i), fmt.Sprintf("b-%d-1", i), fmt.Sprintf("b-%d-2", i)}
		default:
			c.ids = []string{fmt.Sprintf("h-%d", i)}
		}
		calls = append(calls, c)
	}
	return calls
}

func hiddenWrite(ctx context.Context, g *writeguard.Guarded, c *hiddenCall) {
	ctx = context.WithValue(ctx, truthCallKey{}, c)
	ctx, cancel := context.WithTimeout(ctx, hiddenDeadline)
	defer cancel()
	// Each update also sets w to its input's id, so that its dead-letter
	// envelope names it (hiddenCheck's queued).
	inc := cbD("$inc", cbD("c", int64(1)), "$set", cbD("w", c.ids[0]))
	switch c.kind {
	case hUpdateOne:
		_, c.err = g.UpdateOne(ctx, cbD("_id", c.ids[0]), inc)
	case hInsertOne:
		_, c.err = g.InsertOne(ctx, cbD("_id", c.ids[0], "qty", 1))
	case hUpdateMany:
		_, c.err = g.UpdateMany(ctx, cbD("g", c.i), inc)
	case hFindAndModify:
		if c.err = g.FindOneAndUpdate(ctx, cbD("_id", c.ids[0]), inc).Err(); errors.Is(c.err, mongo.ErrNoDocuments) {
			c.err = nil
		}
	case hBulk:
		models := make([]mongo.WriteModel, len(c.ids))
		for k, id := range c.ids {
			models[k] = mongo.NewUpdateOneModel().SetFilter(cbD("_id", id)).SetUpdate(cbD("$inc", cbD("c", int64(1)), "$set", cbD("w", id)))
		}
		_, c.err = g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(c.ordered))
	}
	c.outcomes = callOutcomes(c.err, len(c.ids))
}

type hiddenVerdict struct {
	disp                                     map[string]int
	untrue                                   []string
	lost, duplicated, doubleApplied, unknown int
}

// truthHidden runs the phase for each TRUTH_MONITOR mode.
func truthHidden(t *testing.T, seed int64, workers int, sharded bool) {
	if dlRace && seed != truthSeeds(t)[0] {
		// The race build's SQLite runs tens of times slower: the first
		// seed only (every fate still fires: the schedule covers each).
		return
	}
	for _, mon := range truthMonitorModes(t) {
		truthHiddenRun(t, seed, workers, sharded, mon)
	}
}

func truthHiddenRun(t *testing.T, seed int64, workers int, sharded, monitor bool) {
	opts := []cbOption{cbRetryWrites(), cbClientOptions(func(o *options.ClientOptions) {
		m := faultproxy.HoldUntilDeadline(o.Monitor)
		if monitor {
			m = wireMonitor(m)
		}
		o.SetMonitor(m)
	})}
	prefix := "truth oracle:"
	if sharded {
		opts = append(opts, cbProxyOptions(faultproxy.WithSharded(faultproxy.Sharding{}), faultproxy.WithLimits(shTruthLimits)))
		prefix = "truth oracle (sharded):"
	} else {
		opts = append(opts, cbReplicaSet())
	}
	b := newCaseBed(t, opts...)
	if b.server == nil {
		t.Logf("%s hidden attempts: skipped on %s (the faults need the bed's proxy)", prefix, b.backend())
		return
	}
	const coll = "hidden"
	ns := b.ns(coll)
	calls := hiddenCallsFor(seed, sharded)
	var seeded []any
	for _, c := range calls {
		switch c.kind {
		case hInsertOne:
		case hUpdateMany:
			seeded = append(seeded, cbD("_id", c.ids[0], "g", c.i, "c", int64(0)), cbD("_id", c.ids[0]+"-2", "g", c.i, "c", int64(0)))
		default:
			for _, id := range c.ids {
				seeded = append(seeded, cbD("_id", id, "g", c.i, "c", int64(0)))
			}
		}
	}
	b.seed(coll, seeded...)
	h := faultproxy.NewHiddenAttempts(b.proxy)
	var traceMu sync.Mutex
	tracer := hooks.Hooks{AttemptFinished: func(ctx context.Context, e *hooks.AttemptEnd) {
		if c, ok := ctx.Value(truthCallKey{}).(*hiddenCall); ok {
			traceMu.Lock()
			c.trace = append(c.trace, fmt.Sprintf("#%d: code %d %s", e.Attempt, e.Code, e.Class))
			traceMu.Unlock()
		}
	}}
	g := b.guard(coll, writeguard.WithBackoff(policy.Backoff{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond, MaxAttempts: 8}),
		writeguard.WithHooks(tracer))
	b.script(hiddenScript(h, ns, seed, sharded)...)

	t0 := time.Now()
	concurrently(workers, calls, func(c *hiddenCall) { hiddenWrite(b.ctx, g.Guarded, c) })
	elapsed := time.Since(t0)
	readBack := b.cmds.N("find", ns)

	v := hiddenCheck(b, coll, g.dlqColl, calls)
	lost, retries := h.Counts()
	st := b.proxy.Stats()
	mode := "off"
	if monitor {
		mode = "on"
	}
	var keys []string
	for k, n := range v.disp {
		keys = append(keys, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(keys)
	t.Logf("%s hidden attempts, seed %d, %d writers, monitor %s: %s; untrue %d, lost %d, duplicated %d, double-applied %d; unknown %d, read back %d",
		prefix, seed, workers, mode, strings.Join(keys, " "), len(v.untrue), v.lost, v.duplicated, v.doubleApplied, v.unknown, readBack)
	t.Logf("  %d calls, %v; replies lost %v, retries answered %v; faults %v", len(calls), elapsed.Round(time.Millisecond), lost, retries, st.Faults)
	for _, u := range first(v.untrue, 20) {
		t.Errorf("hidden attempts (monitor %s): untrue: %s", mode, u)
	}
	for _, f := range []faultproxy.RetryFate{faultproxy.RetryCutByDeadline, faultproxy.RetryPoolCleared, faultproxy.RetryOverloaded, faultproxy.RetryIncompleteHistory} {
		if lost[f] == 0 {
			t.Errorf("hidden attempts: fate %s never fired", f)
		}
	}
	if st.Faults[faultproxy.FaultMultiRefused] == 0 {
		t.Errorf("hidden attempts: no multi update was refused midway")
	}
	if sharded && (st.Faults[faultproxy.FaultShard] == 0 || st.Faults[faultproxy.FaultApplyThenError] == 0) {
		t.Errorf("hidden attempts: no shard key move (72 copies) or no findAndModify shard reply lost: faults %v", st.Faults)
	}
}

// hiddenCheck compares every outcome with the store: c counts the
// applications of each call's $inc (1 for a stored insert).
func hiddenCheck(b *caseBed, coll, dlqColl string, calls []*hiddenCall) *hiddenVerdict {
	applied := map[string]int{}
	for _, d := range b.docs(coll) {
		id := d.Lookup("_id").StringValue()
		if c, err := d.LookupErr("c"); err == nil {
			applied[id] = int(c.AsInt64())
		} else {
			applied[id]++ // an insert of the phase
		}
	}
	dead := b.docs(dlqColl)
	queued := func(id string) int {
		n := 0
		for _, d := range dead {
			if bytes.Contains(d, append([]byte(id), 0)) {
				n++
			}
		}
		return n
	}
	v := &hiddenVerdict{disp: map[string]int{}}
	var mu sync.Mutex
	for _, c := range calls {
		for k, id := range c.ids {
			o := c.outcomes[k]
			n := applied[id]
			if c.kind == hUpdateMany {
				n = max(n, applied[id+"-2"])
			}
			stored := 0
			if c.kind == hInsertOne {
				stored = n
			}
			q := queued(id)
			mu.Lock()
			v.disp[c.kind.String()+":"+string(o.Disposition)]++
			if o.Disposition == writeguard.OutcomeUnknown {
				v.unknown++
			}
			bad := func(why string) {
				last := "none"
				if f := o.Failure; f != nil {
					last = fmt.Sprintf("%d %s %s/%s", f.Code, f.CodeName, f.Shape, o.Class)
				}
				v.untrue = append(v.untrue, fmt.Sprintf("%s %s (call %d, ordered=%v): %s maybe=%v attempts=%d reason=%s, applied %d, dead-lettered %d, last failure %s: %s; err %v; writeguard attempts: %s",
					c.kind, id, c.i, c.ordered, o.Disposition, o.MaybeWritten, o.Attempts, o.Reason, n, q, last, why, c.err, strings.Join(c.trace, "; ")))
			}
			if c.kind == hInsertOne && (n > 1 || q > 1) {
				v.duplicated++
				bad("stored or dead-lettered more than once")
			}
			if c.kind != hInsertOne && n > 1 {
				v.doubleApplied++
				bad(fmt.Sprintf("non-idempotent update applied %d times", n))
			}
			if c.kind != hInsertOne && o.Disposition == writeguard.DeadLettered && n > 0 && !o.MaybeWritten {
				bad("dead-lettered as not applied, but applied")
			}
			claims, isLost := judgeOutcome(o, n, stored, q, func() bool { return true })
			for _, why := range claims {
				bad(why)
			}
			if isLost {
				v.lost++
			}
			mu.Unlock()
		}
	}
	return v
}
