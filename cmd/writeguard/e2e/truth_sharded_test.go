package e2e

// The truth oracle on the sharded bed: the proxy presents the embedded
// FerretDB as a mongos in front of two shards (faultproxy.WithSharded)
// and announces small limits (maxWriteBatchSize 8, maxMessageSizeBytes
// 32 KiB, maxBsonObjectSize 8 KiB), so that the driver splits calls into
// several commands and mongos splits each command into child batches.
// One writer and sixteen write InsertMany calls and mixed BulkWrite calls
// (inserts, $inc updates of counters, $inc upserts, deletes; a quarter of
// the BulkWrites are marked idempotent with writeguard.WithIdempotent and
// then carry $set updates and $set upserts instead of $inc), under a
// seeded schedule of faults that includes shard failures after partial
// application (faultproxy.FailShard: one write error per statement of the
// shard's batch, code 6, 9001, 11602, 91 or 189) besides today's kinds.
//
// Every Outcome is checked against the store:
//
//   - untrue: a disposition the store contradicts (a model reported not
//     applied, without MaybeWritten, that is applied; not_attempted but
//     applied; unknown without MaybeWritten);
//   - lost: reported stored (written, already_written,
//     written_unconfirmed) or dead-lettered, but not applied;
//   - duplicated: an inserted document stored (or dead-lettered) twice;
//   - double-applied: a non-idempotent update applied more than once.
//
// Each $inc adds 4^i to its counter, i being the model's own digit on
// that counter (at most 24 models a counter), so the stored value gives
// the exact number of times each model was applied (0 to 3, in base 4): a
// model reported applied must count 1; one reported not applied, 0 (or,
// with MaybeWritten, 0 or 1); never 2. A $inc upsert creates its own
// document with v: 1 and counts v. A $set update sets a field of its own
// (applied: present), a delete removes a document of its own (applied:
// absent).
//
//	go test -run TestTruthOracleSharded ./cmd/writeguard/e2e/ -v
//	TRUTH_SEEDS=1,2,3 go test -run TestTruthOracleSharded ./cmd/writeguard/e2e/

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

const (
	shTruthCalls      = 40
	shTruthBatch      = 40
	shTruthCounters   = 48
	shTruthPerCounter = 24 // 4^24 < 2^63
)

// shTruthLimits are the handshake limits of the sharded bed.
var shTruthLimits = faultproxy.Limits{MaxWriteBatchSize: 8, MaxMessageSizeBytes: 32 * 1024, MaxBsonObjectSize: 8 * 1024}

func TestTruthOracleSharded(t *testing.T) {
	if testing.Short() {
		t.Skip("truth oracle (sharded): skipped with -short (it writes thousands of documents through the embedded server)")
	}
	seeds, calls := truthSeeds(t), shTruthCalls
	if dlRace {
		// The race build's SQLite runs tens of times slower, and the
		// sharded bed sends several commands per call: one seed, half
		// the calls (every check still applies: coverFaults makes each
		// asserted fault kind fire in any run).
		seeds, calls = seeds[:1], shTruthCalls/2
	}
	for _, workers := range []int{1, 16} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("workers=%d/seed=%d", workers, seed), func(t *testing.T) { shTruthRun(t, seed, workers, calls) })
		}
	}
}

// shModelKind is what one input of a call is.
type shModelKind int

const (
	shInsert    shModelKind = iota
	shInc                   // $inc of a counter: non-idempotent
	shIncUpsert             // $inc upsert of a document of its own: non-idempotent
	shSet                   // $set of a field of its own: idempotent
	shSetUpsert             // $set upsert of a document of its own: idempotent
	shDelete                // delete of a document of its own
)

func (k shModelKind) String() string {
	return [...]string{"insert", "inc", "inc_upsert", "set", "set_upsert", "delete"}[k]
}

// shInput is one input (document or model) of a call.
type shInput struct {
	kind    shModelKind
	ins     chaosInput // shInsert
	id      string     // the _id the model targets (not shInsert)
	counter int        // shInc: the counter, and the model's base-4 digit on it
	digit   int
	field   string // shSet: the field it sets
}

type shCall struct {
	id         int
	bulk       bool
	ordered    bool
	idempotent bool
	inputs     []shInput
	outcomes   []writeguard.Outcome
	err        error
	trace      []string
}

// shTruthScript is the sharded bed's fault schedule, on the target's
// insert, update and delete commands: 16.5 % of them get a fault; 6.5 %
// are shard failures after partial application. coverFaults adds one of
// each kind the oracle asserts on at a fixed occurrence.
func shTruthScript(ns string, seed int64) []faultproxy.ScriptItem {
	retryable := []string{"RetryableWriteError"}
	ce := func(code int32, name string, labels []string) faultproxy.CommandError {
		return faultproxy.CommandError{Code: code, CodeName: name, Message: name, Labels: labels}
	}
	shard := func(batch, applied int, code int32, name, cause string) faultproxy.Fault {
		return faultproxy.FailShard(batch, applied, faultproxy.CommandError{Code: code, CodeName: name, Message: cause})
	}
	items := append([]faultproxy.ScriptItem{faultproxy.Validator(ns, cbRequireQty)},
		coverFaults(func() *faultproxy.Rule { return cbWriteRule(ns) },
			shard(0, 1, 6, "HostUnreachable", "Connection reset by peer"),
			faultproxy.ApplyThenError(2, ce(11600, "InterruptedAtShutdown", nil)),
			faultproxy.CloseAfterForward(),
		)...)
	return append(items, cbWriteRule(ns).Always().Do(faultproxy.RandomSchedule(seed,
		faultproxy.Rate{P: 0.015, Fault: shard(0, 1, 6, "HostUnreachable", "Connection reset by peer")},
		faultproxy.Rate{P: 0.015, Fault: shard(1, 2, 9001, "SocketException", "Broken pipe")},
		faultproxy.Rate{P: 0.015, Fault: shard(1, 0, 11602, "InterruptedDueToReplStateChange", "operation was interrupted")},
		faultproxy.Rate{P: 0.01, Fault: shard(2, 3, 91, "ShutdownInProgress", "The server is in quiesce mode and will shut down")},
		faultproxy.Rate{P: 0.01, Fault: shard(3, 100, 189, "PrimarySteppedDown", "Primary stepped down while waiting for replication")},
		faultproxy.Rate{P: 0.02, Fault: faultproxy.ErrorReply(ce(189, "PrimarySteppedDown", retryable))},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.ApplyThenError(2, ce(11600, "InterruptedAtShutdown", nil))},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.ApplyThenClose(3)},
		faultproxy.Rate{P: 0.015, Fault: faultproxy.CloseAfterForward()},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.CloseBeforeForward()},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 6, CodeName: "HostUnreachable", Labels: retryable})},
		faultproxy.Rate{P: 0.025, Fault: faultproxy.RejectDocuments(func(doc bson.Raw) bool {
			v, err := doc.LookupErr("n")
			return err == nil && v.AsInt64()%9 == seed%9
		}, faultproxy.WriteError{Code: 112, Message: "WriteConflict"})},
	)))
}

// shTruthCallsFor draws the calls of a run from seed.
func shTruthCallsFor(seed int64, nCalls int) (calls []*shCall, inserts []chaosInput) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5a4d))
	inserts = chaosInputs(rng, nCalls*shTruthBatch, 0.03, 0.01, 0.5, truthSeedDups)
	for i := range inserts {
		if inserts[i].kind == chaosGood && rng.IntN(10) == 0 {
			// Large documents: calls split by maxMessageSizeBytes too.
			inserts[i].doc = append(inserts[i].doc, bson.E{Key: "pad", Value: strings.Repeat("x", 2500+rng.IntN(2500))})
		}
	}
	digits := make([]int, shTruthCounters)
	next, model := 0, 0
	for c := range nCalls {
		call := &shCall{id: c, bulk: rng.IntN(3) != 0, ordered: rng.IntN(2) == 0}
		call.idempotent = call.bulk && rng.IntN(4) == 0
		for range shTruthBatch {
			in := shInput{kind: shInsert}
			if call.bulk {
				switch x := rng.Float64(); {
				case x < 0.5:
				case x < 0.75:
					in.kind = shInc
				case x < 0.85:
					in.kind = shIncUpsert
				default:
					in.kind = shDelete
				}
				if call.idempotent && in.kind == shInc {
					in.kind = shSet
				}
				if call.idempotent && in.kind == shIncUpsert {
					in.kind = shSetUpsert
				}
			}
			model++
			switch in.kind {
			case shInsert:
				in.ins = inserts[next]
				next++
			case shInc:
				k := rng.IntN(shTruthCounters)
				for n := 0; digits[k] >= shTruthPerCounter && n < shTruthCounters; n++ {
					k = (k + 1) % shTruthCounters
				}
				if digits[k] >= shTruthPerCounter {
					in.kind, in.ins = shInsert, inserts[next]
					next++
					break
				}
				in.id, in.counter, in.digit = fmt.Sprintf("ctr-%d", k), k, digits[k]
				digits[k]++
			case shSet:
				in.id, in.field = fmt.Sprintf("set-%d", rng.IntN(shTruthCounters)), fmt.Sprintf("m%d", model)
			case shIncUpsert, shSetUpsert:
				in.id = fmt.Sprintf("up-%d", model)
			case shDelete:
				in.id = fmt.Sprintf("del-%d", model)
			}
			call.inputs = append(call.inputs, in)
		}
		calls = append(calls, call)
	}
	return calls, inserts[:next]
}

func (in shInput) model() mongo.WriteModel {
	id := bson.D{{Key: "_id", Value: in.id}}
	switch in.kind {
	case shInc:
		return mongo.NewUpdateOneModel().SetFilter(id).SetUpdate(cbD("$inc", cbD("v", int64(1)<<(2*in.digit))))
	case shIncUpsert:
		return mongo.NewUpdateOneModel().SetFilter(id).SetUpdate(cbD("$inc", cbD("v", int64(1)))).SetUpsert(true)
	case shSet:
		return mongo.NewUpdateOneModel().SetFilter(id).SetUpdate(cbD("$set", cbD(in.field, true)))
	case shSetUpsert:
		return mongo.NewUpdateOneModel().SetFilter(id).SetUpdate(cbD("$set", cbD("v", int64(1)))).SetUpsert(true)
	case shDelete:
		return mongo.NewDeleteOneModel().SetFilter(id)
	}
	return mongo.NewInsertOneModel().SetDocument(in.ins.doc)
}

func shTruthRun(t *testing.T, seed int64, workers, nCalls int) {
	b := newCaseBed(t, cbProxyOptions(faultproxy.WithSharded(faultproxy.Sharding{}), faultproxy.WithLimits(shTruthLimits)))
	const coll = "truth"
	ns := b.ns(coll)
	calls, _ := shTruthCallsFor(seed, nCalls)

	// The documents the models act on: counters at 0, the $set targets,
	// one document per delete, and the seeded _ids duplicates reuse.
	seedDocuments(b, coll, truthSeedDups)
	var seeded []any
	for k := range shTruthCounters {
		seeded = append(seeded, cbD("_id", fmt.Sprintf("ctr-%d", k), "v", int64(0)), cbD("_id", fmt.Sprintf("set-%d", k)))
	}
	for _, c := range calls {
		for _, in := range c.inputs {
			if in.kind == shDelete {
				seeded = append(seeded, cbD("_id", in.id))
			}
		}
	}
	b.seed(coll, seeded...)

	var traceMu sync.Mutex
	tracer := hooks.Hooks{
		AttemptFinished: func(ctx context.Context, e *hooks.AttemptEnd) {
			if c, ok := ctx.Value(truthCallKey{}).(*shCall); ok {
				traceMu.Lock()
				c.trace = append(c.trace, fmt.Sprintf("#%d %d docs: code %d %s (%d failures)", e.Attempt, e.Documents, e.Code, e.Class, e.Failures))
				traceMu.Unlock()
			}
		},
	}
	g := b.guard(coll,
		writeguard.WithBackoff(policy.Backoff{Base: 5 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 8}),
		writeguard.WithConflictHandler(writeguard.ConflictSkip()),
		writeguard.WithHooks(tracer))
	b.script(shTruthScript(ns, seed)...)

	t0 := time.Now()
	concurrently(workers, calls, func(c *shCall) { shTruthWrite(b.ctx, g, c) })
	elapsed := time.Since(t0)

	v := shTruthCheck(b, coll, g.dlqColl, calls)
	st := b.proxy.Stats()
	t.Logf("truth oracle (sharded): seed %d, %d writers: %s; untrue %d, lost %d, duplicated %d, double-applied %d",
		seed, workers, v.counts(), len(v.untrue), v.lost, v.duplicated, v.doubleApplied)
	t.Logf("  %d inputs in %d calls, %v; faults %v; client write commands %d (insert %d, update %d, delete %d), child batches %v; attempts %d, retries %d, budget refusals %d; unexpected %d",
		v.total, len(calls), elapsed.Round(time.Millisecond), st.Faults, st.Count("insert")+st.Count("update")+st.Count("delete"),
		st.Count("insert"), st.Count("update"), st.Count("delete"), st.ChildBatches,
		len(g.rec.Attempts()), len(g.rec.Retries()), g.rec.BudgetExhausted(), len(v.unexpected))
	for _, u := range first(v.untrue, 20) {
		t.Errorf("untrue: %s", u)
	}
	for _, u := range first(v.unexpected, 20) {
		t.Errorf("unexpected: %s", u)
	}
	if v.total != nCalls*shTruthBatch {
		t.Errorf("%d dispositions for %d inputs", v.total, nCalls*shTruthBatch)
	}
	if len(st.ChildBatches) < 2 {
		t.Errorf("child batches %v: the writes did not spread over two shards", st.ChildBatches)
	}
	if n := st.Count("insert") + st.Count("update") + st.Count("delete"); n < int64(2*len(calls)) {
		t.Errorf("%d write commands for %d calls: the limits did not make the calls split", n, len(calls))
	}
	for _, k := range []faultproxy.FaultKind{faultproxy.FaultShard, faultproxy.FaultApplyThenError, faultproxy.FaultCloseAfterForward, faultproxy.FaultValidation} {
		if st.Faults[k] == 0 {
			t.Errorf("fault kind %s never fired: the schedule does not exercise it", k)
		}
	}
	truthHidden(t, seed, workers, true)
}

func shTruthWrite(ctx context.Context, g *cbGuard, c *shCall) {
	ctx = context.WithValue(ctx, truthCallKey{}, c)
	n := len(c.inputs)
	if c.bulk {
		if c.idempotent {
			ctx = writeguard.WithIdempotent(ctx)
		}
		models := make([]mongo.WriteModel, n)
		for i, in := range c.inputs {
			models[i] = in.model()
		}
		_, c.err = g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(c.ordered))
	} else {
		docs := make([]any, n)
		for i, in := range c.inputs {
			docs[i] = in.ins.doc
		}
		_, c.err = g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(c.ordered))
	}
	c.outcomes = callOutcomes(c.err, n)
}

type shVerdict struct {
	truthVerdict
	doubleApplied int
}

// shTruthCheck compares every outcome with the store (see the top of this
// file).
func shTruthCheck(b *caseBed, coll, dlqColl string, calls []*shCall) *shVerdict {
	stored, storedP := map[int]int{}, map[int]string{}
	byID := map[string]bson.Raw{}
	for _, d := range b.docs(coll) {
		if v, err := d.LookupErr("n"); err == nil {
			n := int(v.AsInt64())
			stored[n]++
			storedP[n] = d.Lookup("p").StringValue()
			continue
		}
		if id, ok := d.Lookup("_id").StringValueOK(); ok {
			if _, dup := byID[id]; dup {
				b.t.Errorf("two documents with _id %q", id)
			}
			byID[id] = d
		}
	}
	dead := map[int]int{}
	for _, e := range b.dlq(dlqColl) {
		if v, err := e.Original.LookupErr("n"); err == nil {
			dead[int(v.AsInt64())] += e.Attempts
		}
	}
	v := &shVerdict{truthVerdict: truthVerdict{disp: map[writeguard.Disposition]int{}}}
	for _, c := range calls {
		for i, in := range c.inputs {
			o := c.outcomes[i]
			v.total++
			v.disp[o.Disposition]++
			applied, s, q := 0, 0, 0
			switch in.kind {
			case shInsert:
				s, q = stored[in.ins.n], dead[in.ins.n]
				applied = s
			case shInc:
				if d, ok := byID[in.id]; ok {
					applied = int(d.Lookup("v").AsInt64()>>(2*in.digit)) & 3
				}
			case shIncUpsert:
				if d, ok := byID[in.id]; ok {
					applied = int(d.Lookup("v").AsInt64())
				}
			case shSetUpsert:
				if _, ok := byID[in.id]; ok {
					applied = 1
				}
			case shSet:
				if d, ok := byID[in.id]; ok {
					if _, err := d.LookupErr(in.field); err == nil {
						applied = 1
					}
				}
			case shDelete:
				if _, ok := byID[in.id]; !ok {
					applied = 1
				}
			}
			describe := func(why string) string {
				last := "none"
				if f := o.Failure; f != nil {
					last = fmt.Sprintf("%d %s %s/%s", f.Code, f.CodeName, f.Shape, o.Class)
				}
				what := in.kind.String() + " " + in.id
				if in.kind == shInsert {
					what = fmt.Sprintf("insert n=%d kind=%d", in.ins.n, in.ins.kind)
				}
				return fmt.Sprintf("%s (input %d of call %d, bulk=%v ordered=%v idempotent=%v): %s (maybe=%v attempts=%d, applied %d, dead-lettered %d, last failure %s): %s; err %v; call attempts: %s",
					what, i, c.id, c.bulk, c.ordered, c.idempotent, o.Disposition, o.MaybeWritten, o.Attempts, applied, q, last, why, o.Err, strings.Join(c.trace, "; "))
			}
			bad := func(why string) { v.untrue = append(v.untrue, describe(why)) }
			unexpected := func(why string) { v.unexpected = append(v.unexpected, describe(why)) }
			if s > 1 || q > 1 {
				v.duplicated++
				bad("stored or dead-lettered more than once")
			}
			if applied > 1 && in.kind != shInsert {
				if in.kind == shInc || in.kind == shIncUpsert {
					v.doubleApplied++
					bad(fmt.Sprintf("non-idempotent update applied %d times", applied))
				}
			}
			claims, lost := judgeOutcome(o, applied, s, q, func() bool {
				return in.kind != shInsert || storedP[in.ins.n] == chaosP(in.ins.doc)
			})
			for _, why := range claims {
				bad(why)
			}
			if lost {
				v.lost++
			}
			if in.kind != shInsert {
				continue
			}
			if c.bulk && c.ordered && !c.idempotent && o.Disposition == writeguard.NotAttempted {
				// An ordered call may stop after a non-idempotent update
				// whose fate it cannot learn (unknown): the inserts after
				// it are then never sent, truthfully (checked above).
				continue
			}
			// Inserts are resolved by re-sending and reading back: under
			// transient faults each ends where its content says.
			switch o.Disposition {
			case writeguard.Failed, writeguard.Exhausted, writeguard.OutcomeUnknown, "NO_REPORT":
				v.transientFailures++
				unexpected("insert not resolved although every fault is transient")
			}
			if in.ins.kind == chaosInvalid && o.Disposition != writeguard.DeadLettered {
				unexpected("invalid document not dead-lettered")
			}
			if in.ins.kind == chaosDup && o.Disposition != writeguard.ConflictSkipped {
				unexpected("duplicate of a seeded _id not conflict_skipped")
			}
			if in.ins.kind == chaosGood && !o.Disposition.Stored() {
				unexpected("valid document not stored")
			}
		}
	}
	return v
}
