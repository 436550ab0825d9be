package e2e

// The truth oracle: every Outcome of every call is compared with what the
// target collection and the dead-letter collection actually hold, with one
// writer and with sixteen sharing one client and one Guarded (default
// retry budget), under a seeded schedule of transient faults of every
// kind: whole-command errors, partial application followed by an error of
// each category or by a dropped connection, lost replies (which clear the
// driver's connection pool under the other writers), write concern errors
// and per-document write conflicts, and poison documents (every insert
// command carrying one is rejected as a whole, 10334: the engine narrows
// the batch down and the poison document, alone, is dead-lettered). Only
// transient faults are injected besides, so no document may end failed,
// exhausted or unknown; schema failures, duplicates of seeded _ids and
// poison documents are the only non-written outcomes allowed. A second
// phase (truth_methods.go) runs the other write methods under the same
// kind of faults and checks every Outcome against the store.
//
//	go test -run TestTruthOracle ./cmd/writeguard/e2e/ -v
//	TRUTH_SEEDS=1,2,3 go test -run TestTruthOracle ./cmd/writeguard/e2e/

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
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
	truthDocs     = 1600
	truthBatch    = 40
	truthSeedDups = 20
)

// truthDefaultSeeds are the seeds CI runs: their schedules fire every
// fault kind the oracle needs (partial application with an error and with
// a dropped connection, lost replies, validation).
var truthDefaultSeeds = []int64{3, 4, 12}

// truthSeeds are the seeds to run (TRUTH_SEEDS=1,2,3 overrides the
// defaults).
func truthSeeds(t *testing.T) []int64 {
	s := os.Getenv("TRUTH_SEEDS")
	if s == "" {
		return truthDefaultSeeds
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("TRUTH_SEEDS=%q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}

func TestTruthOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("truth oracle: skipped with -short (it writes thousands of documents through the embedded server)")
	}
	for _, workers := range []int{1, 16} {
		for _, seed := range truthSeeds(t) {
			t.Run(fmt.Sprintf("workers=%d/seed=%d", workers, seed), func(t *testing.T) { truthRun(t, seed, workers) })
		}
	}
}

// truthScript injects only transient faults, on 15.5 % of the insert
// commands (the demo's rate is 15 %), plus one of each partial-write kind
// at a fixed occurrence (coverFaults): with 16 writers the number of
// commands varies from run to run, and a kind drawn only near the end of
// the random schedule could otherwise go unexercised.
func truthScript(ns string, seed int64) []faultproxy.ScriptItem {
	retryable := []string{"RetryableWriteError"}
	ce := func(code int32, name string, labels []string) faultproxy.CommandError {
		return faultproxy.CommandError{Code: code, CodeName: name, Message: name, Labels: labels}
	}
	items := []faultproxy.ScriptItem{
		faultproxy.Validator(ns, cbRequireQty),
		faultproxy.On("insert").In(ns).Always().Where(carriesPoison).Do(faultproxy.ErrorReply(ce(10334, "BSONObjectTooLarge", nil))),
	}
	items = append(items, coverFaults(func() *faultproxy.Rule { return faultproxy.On("insert").In(ns).Where(notPoison) },
		faultproxy.ApplyThenError(7, ce(11600, "InterruptedAtShutdown", nil)),
		faultproxy.ApplyThenClose(11),
		faultproxy.CloseAfterForward(),
	)...)
	return append(items, faultproxy.On("insert").In(ns).Always().Do(faultproxy.RandomSchedule(seed,
		faultproxy.Rate{P: 0.03, Fault: faultproxy.ErrorReply(ce(189, "PrimarySteppedDown", retryable))},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.ErrorReply(ce(112, "WriteConflict", retryable))},
		faultproxy.Rate{P: 0.015, Fault: faultproxy.ApplyThenError(7, ce(11600, "InterruptedAtShutdown", nil))},
		faultproxy.Rate{P: 0.015, Fault: faultproxy.ApplyThenError(13, ce(11602, "InterruptedDueToReplStateChange", retryable))},
		faultproxy.Rate{P: 0.005, Fault: faultproxy.ApplyThenError(3, ce(91, "ShutdownInProgress", retryable))},
		faultproxy.Rate{P: 0.005, Fault: faultproxy.ApplyThenError(21, ce(10107, "NotWritablePrimary", retryable))},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.ApplyThenClose(11)},
		faultproxy.Rate{P: 0.015, Fault: faultproxy.CloseAfterForward()},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.CloseBeforeForward()},
		faultproxy.Rate{P: 0.01, Fault: faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 6, CodeName: "HostUnreachable", Labels: retryable})},
		faultproxy.Rate{P: 0.03, Fault: faultproxy.RejectDocuments(func(doc bson.Raw) bool {
			v, err := doc.LookupErr("n")
			return err == nil && v.AsInt64()%9 == seed%9
		}, faultproxy.WriteError{Code: 112, Message: "WriteConflict"})},
	)))
}

type truthCall struct {
	id       int
	trace    []string // TRUTH_TRACE: the call's attempts
	ordered  bool
	bulk     bool
	inputs   []chaosInput
	outcomes []writeguard.Outcome
	err      error
}

func truthRun(t *testing.T, seed int64, workers int) {
	b := newCaseBed(t)
	const coll = "truth"
	ns := b.ns(coll)
	seedDocuments(b, coll, truthSeedDups)
	var calls []*truthCall
	var traceMu sync.Mutex
	tracer := hooks.Hooks{
		AttemptFinished: func(ctx context.Context, e *hooks.AttemptEnd) {
			if c, ok := ctx.Value(truthCallKey{}).(*truthCall); ok {
				traceMu.Lock()
				c.trace = append(c.trace, fmt.Sprintf("#%d %d docs: code %d %s (%d failures)", e.Attempt, e.Documents, e.Code, e.Class, e.Failures))
				traceMu.Unlock()
			}
		},
	}
	g := b.guard(coll,
		// The default budget; 8 attempts per document (default 5): with
		// 16 writers the faults of the random schedule fall on whichever
		// command comes next, and an ordered call with several rejections
		// sends many commands, so 5 faults on one document within 5
		// attempts happen now and then and end it exhausted, truthfully.
		// The oracle is about truth; 8 keeps that luck out of CI.
		writeguard.WithBackoff(policy.Backoff{Base: 5 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 8}),
		writeguard.WithConflictHandler(writeguard.ConflictSkip()),
		writeguard.WithHooks(tracer))
	b.script(truthScript(ns, seed)...)

	rng := rand.New(rand.NewPCG(uint64(seed), 0x7247))
	inputs := chaosInputs(rng, truthDocs, 0.03, 0.01, 0.5, truthSeedDups)
	poison := markPoison(rng, inputs, truthPoison)
	for i := 0; i < truthDocs; i += truthBatch {
		calls = append(calls, &truthCall{id: len(calls), ordered: rng.IntN(2) == 0, bulk: rng.IntN(3) == 0, inputs: inputs[i:min(i+truthBatch, truthDocs)]})
	}

	t0 := time.Now()
	concurrently(workers, calls, func(c *truthCall) { truthWrite(b.ctx, g, c) })
	elapsed := time.Since(t0)

	v := truthCheck(b, coll, g.dlqColl, calls, poison)
	st := b.proxy.Stats()
	t.Logf("truth oracle: seed %d, %d writers, %d documents (%d poison) in %d calls, %v: %s; untrue %d, lost %d, duplicated %d, failed-from-transient %d; faults %v; attempts %d, retries %d, budget refusals %d",
		seed, workers, truthDocs, len(poison), len(calls), elapsed.Round(time.Millisecond), v.counts(), len(v.untrue), v.lost, v.duplicated, v.transientFailures, st.Faults,
		len(g.rec.Attempts()), len(g.rec.Retries()), g.rec.BudgetExhausted())
	for _, u := range first(v.untrue, 20) {
		t.Errorf("untrue: %s", u)
	}
	for _, u := range first(v.unexpected, 20) {
		t.Errorf("unexpected under transient faults only: %s", u)
	}
	if v.total != truthDocs {
		t.Errorf("%d dispositions for %d documents", v.total, truthDocs)
	}
	for _, k := range []faultproxy.FaultKind{faultproxy.FaultApplyThenError, faultproxy.FaultApplyThenClose, faultproxy.FaultCloseAfterForward, faultproxy.FaultValidation} {
		if st.Faults[k] == 0 {
			t.Errorf("fault kind %s never fired: the schedule does not exercise it", k)
		}
	}
	truthMethods(t, b, seed, workers)
	truthHidden(t, seed, workers, false)
}

type truthCallKey struct{}

func truthWrite(ctx context.Context, g *cbGuard, c *truthCall) {
	ctx = context.WithValue(ctx, truthCallKey{}, c)
	n := len(c.inputs)
	if c.bulk {
		models := make([]mongo.WriteModel, n)
		for i, in := range c.inputs {
			models[i] = mongo.NewInsertOneModel().SetDocument(in.doc)
		}
		_, c.err = g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(c.ordered))
	} else {
		docs := make([]any, n)
		for i, in := range c.inputs {
			docs[i] = in.doc
		}
		_, c.err = g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(c.ordered))
	}
	c.outcomes = callOutcomes(c.err, n)
}

// callOutcomes returns the n Outcomes of a call's error: written for all
// when it is nil (a call whose inputs all end written or already_written
// returns nil; both are stored), the Report's when it has one per input,
// else NO_REPORT, maybe written, for all (which the oracle flags).
func callOutcomes(err error, n int) []writeguard.Outcome {
	out := make([]writeguard.Outcome, n)
	var r *writeguard.Report
	switch {
	case err == nil:
		for i := range out {
			out[i] = writeguard.Outcome{Index: i, Disposition: writeguard.Written}
		}
	case errors.As(err, &r) && len(r.Outcomes) == n:
		copy(out, r.Outcomes)
	default:
		for i := range out {
			out[i] = writeguard.Outcome{Index: i, Disposition: "NO_REPORT", MaybeWritten: true}
		}
	}
	return out
}

type truthVerdict struct {
	disp                                map[writeguard.Disposition]int
	untrue, unexpected                  []string
	lost, duplicated, transientFailures int
	total                               int
}

func (v *truthVerdict) counts() string {
	keys := make([]string, 0, len(v.disp))
	for d := range v.disp {
		keys = append(keys, string(d))
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s=%d", k, v.disp[writeguard.Disposition(k)]))
	}
	return strings.Join(out, " ")
}

func first(list []string, n int) []string {
	if len(list) > n {
		return append(list[:n:n], fmt.Sprintf("... and %d more", len(list)-n))
	}
	return list
}

// truthCheck compares every outcome with the store: written and
// already_written documents are stored once, with the content sent;
// dead_lettered ones are in the DLQ once and not stored; every other
// disposition was not stored by the call unless MaybeWritten says it may
// have been; not_attempted was never sent; and, the faults being
// transient, nothing ends failed, exhausted or unknown.
func truthCheck(b *caseBed, coll, dlqColl string, calls []*truthCall, poison map[int]bool) *truthVerdict {
	stored, storedP := map[int]int{}, map[int]string{}
	for _, d := range b.docs(coll) {
		if v, err := d.LookupErr("n"); err == nil {
			n := int(v.AsInt64())
			stored[n]++
			storedP[n] = d.Lookup("p").StringValue()
		}
	}
	dead := map[int]int{}
	for _, e := range b.dlq(dlqColl) {
		if v, err := e.Original.LookupErr("n"); err == nil {
			dead[int(v.AsInt64())] += e.Attempts
		}
	}
	v := &truthVerdict{disp: map[writeguard.Disposition]int{}}
	for _, c := range calls {
		for i, in := range c.inputs {
			o := c.outcomes[i]
			v.total++
			v.disp[o.Disposition]++
			s, q := stored[in.n], dead[in.n]
			describe := func(why string) string {
				last := "none"
				if f := o.Failure; f != nil {
					last = fmt.Sprintf("%d %s %s/%s", f.Code, f.CodeName, f.Shape, o.Class)
				}
				return fmt.Sprintf("n=%d kind=%d call %d ordered=%v bulk=%v: %s (maybe=%v attempts=%d, stored %d, dead-lettered %d, last failure %s): %s; err %v; call attempts: %s",
					in.n, in.kind, c.id, c.ordered, c.bulk, o.Disposition, o.MaybeWritten, o.Attempts, s, q, last, why, o.Err, strings.Join(c.trace, "; "))
			}
			bad := func(why string) { v.untrue = append(v.untrue, describe(why)) }
			unexpected := func(why string) { v.unexpected = append(v.unexpected, describe(why)) }
			if s > 1 || q > 1 {
				v.duplicated++
				bad("stored or dead-lettered more than once")
			}
			claims, lost := judgeOutcome(o, s, s, q, func() bool { return storedP[in.n] == chaosP(in.doc) })
			for _, why := range claims {
				bad(why)
			}
			if lost {
				v.lost++
			}
			switch o.Disposition {
			case writeguard.Failed, writeguard.Exhausted, writeguard.OutcomeUnknown, "NO_REPORT":
				v.transientFailures++
				unexpected("only transient faults were injected")
			}
			if in.kind == chaosInvalid && o.Disposition != writeguard.DeadLettered {
				unexpected("invalid document not dead-lettered")
			}
			if in.kind == chaosDup && o.Disposition != writeguard.ConflictSkipped {
				unexpected("duplicate of a seeded _id not conflict_skipped")
			}
			switch {
			case poison[in.n]:
				if o.Disposition != writeguard.DeadLettered {
					unexpected("poison document not dead-lettered")
				}
			case in.kind == chaosGood && !o.Disposition.Stored():
				unexpected("valid document not stored")
			}
		}
	}
	return v
}

// concurrently runs f on every item with the given number of workers and
// returns when all are done.
func concurrently[T any](workers int, items []T, f func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				f(it)
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}

// judgeOutcome is the truth oracles' one rule set: what an Outcome claims
// against what the collection and the DLQ hold. applied is how many times
// the input's write took effect (stored copies of an insert; 0 or 1 for an
// update or a delete), stored how many copies of an inserted document the
// collection holds (0 for other writes), queued its dead-letter entries,
// sameContent whether what is stored is what was sent (called only for a
// stored disposition with the write applied). It returns every untrue claim
// and whether one of them is a loss (reported stored or dead-lettered, and
// not there). A copy too many is the caller's duplicated check.
func judgeOutcome(o writeguard.Outcome, applied, stored, queued int, sameContent func() bool) (claims []string, lost bool) {
	switch d := o.Disposition; {
	case d.Stored():
		if applied == 0 {
			return []string{"reported applied, not applied"}, true
		}
		if !sameContent() {
			return []string{"stored content differs from the content sent"}, false
		}
	case d == writeguard.DeadLettered:
		if queued != 1 || stored != 0 {
			return []string{"reported dead-lettered, not in the DLQ once (or also stored)"}, true
		}
	case d == writeguard.NotAttempted:
		if o.Attempts != 0 || o.MaybeWritten || applied != 0 {
			return []string{"not_attempted but sent or applied"}, false
		}
	case d == writeguard.OutcomeUnknown:
		if !o.MaybeWritten {
			return []string{"unknown without MaybeWritten"}, false
		}
	default:
		if applied != 0 && !o.MaybeWritten {
			return []string{"reported not applied, but applied"}, false
		}
	}
	return nil, false
}
