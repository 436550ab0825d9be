package e2e

// The chaos accounting test: thousands of documents written by concurrent
// workers through writeguard, the real driver and the fault proxy, under a
// seeded random schedule of every fault kind, then an account of every
// input document against the target collection, the dead-letter
// collection and the caller's reports. Nothing may be lost, nothing may be
// stored twice.
//
// Reproduce a failure with its seed (printed in the log and in every
// failure message):
//
//	go test -race -run TestChaosAccounting ./cmd/writeguard/e2e/ -chaos.seed=N
//	CHAOS_SEED=N go test -race -run TestChaosAccounting ./cmd/writeguard/e2e/
//
// The documents, their kinds and the ordered/unordered/BulkWrite mix are a
// function of the seed alone. So is the fault schedule as a sequence (the
// k-th insert command seen by the proxy gets the fault the seed draws for
// k), but with several workers which batch sends the k-th command depends
// on scheduling; -chaos.workers=1 (or CHAOS_WORKERS=1) makes a run replay
// exactly. CI runs the fixed default seed; CHAOS_RANDOM=1 adds a run with a
// time-based seed.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

var (
	chaosSeedFlag    = flag.Int64("chaos.seed", 0, "seed of TestChaosAccounting (0: CHAOS_SEED or the default)")
	chaosWorkersFlag = flag.Int("chaos.workers", 0, "workers of TestChaosAccounting (0: CHAOS_WORKERS or 3)")
)

// chaosDefaultSeed is the seed CI runs.
const chaosDefaultSeed int64 = 20261130

const (
	chaosDocs      = 3000
	chaosBatch     = 50
	chaosSeedDups  = 30 // pre-seeded documents whose _id some inputs reuse
	chaosInvalidP  = 0.03
	chaosDupP      = 0.01
	chaosExplicitP = 0.5 // inputs that bring their own _id
	chaosDeadlineP = 0.3 // batches written with a deadline
	chaosDeadline  = time.Second
)

// chaosKind is what an input document is made to be.
type chaosKind int

const (
	chaosGood    chaosKind = iota
	chaosInvalid           // no qty: the emulated validator rejects it (121)
	chaosDup               // _id of a pre-seeded document with other content (11000)
)

// chaosOp is how a batch is written.
type chaosOp int

const (
	chaosInsertManyOrdered chaosOp = iota
	chaosInsertManyUnordered
	chaosBulkOrdered
	chaosBulkUnordered
)

func (o chaosOp) String() string {
	return [...]string{"insertMany ordered", "insertMany unordered", "bulkWrite ordered", "bulkWrite unordered"}[o]
}

type chaosInput struct {
	n    int
	kind chaosKind
	doc  bson.D
}

type chaosBatchRun struct {
	op       chaosOp
	deadline time.Duration // 0: none
	inputs   []chaosInput
	outcomes []writeguard.Disposition
	maybe    []bool
	errs     []error // Outcome.Err
	err      error
}

func chaosSeeds(t *testing.T) []int64 {
	seed := chaosDefaultSeed
	if *chaosSeedFlag != 0 {
		seed = *chaosSeedFlag
	} else if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	seeds := []int64{seed}
	if os.Getenv("CHAOS_RANDOM") == "1" {
		seeds = append(seeds, time.Now().UnixNano())
	}
	return seeds
}

func chaosWorkers(t *testing.T) int {
	if *chaosWorkersFlag > 0 {
		return *chaosWorkersFlag
	}
	if s := os.Getenv("CHAOS_WORKERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("CHAOS_WORKERS=%q: want a positive number", s)
		}
		return v
	}
	return 3
}

func TestChaosAccounting(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos accounting: skipped with -short")
	}
	for _, seed := range chaosSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { chaosRun(t, seed, chaosWorkers(t)) })
	}
}

func chaosRun(t *testing.T, seed int64, workers int) {
	t.Logf("seed %d (reproduce: -chaos.seed=%d or CHAOS_SEED=%d; -chaos.workers=1 replays the fault schedule exactly), %d workers", seed, seed, seed, workers)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	leaks := cbLeakBaseline()
	t0 := time.Now()

	b := newCaseBed(t)
	const coll = "chaos"
	ns := b.ns(coll)
	seedDocuments(b, coll, chaosSeedDups)
	budget, err := policy.NewBudget(50, 0.1) // small: some retries are refused
	if err != nil {
		t.Fatal(err)
	}
	// Duplicates of the pre-seeded ids: skipped (handled, so an ordered
	// write goes on) for even seeds, reported as conflicts for odd ones.
	conflicts := writeguard.ConflictHandlerFunc(func(_ context.Context, c *writeguard.Conflict) (policy.Disposition, error) {
		var k int
		if id, err := c.Document.LookupErr("_id"); err == nil {
			_, _ = fmt.Sscanf(id.StringValue(), "seed-%d", &k)
		}
		if k%2 == 0 {
			return policy.ConflictSkipped, nil
		}
		return policy.Conflicted, nil
	})
	g := b.guard(coll,
		writeguard.WithBackoff(policy.Backoff{Base: 2 * time.Millisecond, Cap: 40 * time.Millisecond, MaxAttempts: 4, MaxElapsed: 20 * time.Second}),
		writeguard.WithBudget(budget),
		writeguard.WithConflictHandler(conflicts))
	dlqNS := b.ns(g.dlqColl)

	// The inputs.
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	inputs := chaosInputs(rng, chaosDocs, chaosInvalidP, chaosDupP, chaosExplicitP, chaosSeedDups)
	var batches []*chaosBatchRun
	for i := 0; i < chaosDocs; i += chaosBatch {
		br := &chaosBatchRun{op: chaosOp(rng.IntN(4)), inputs: inputs[i:min(i+chaosBatch, chaosDocs)]}
		if rng.Float64() < chaosDeadlineP {
			br.deadline = chaosDeadline
		}
		batches = append(batches, br)
	}

	// The faults: every kind, on the target's inserts; a few on the
	// read-backs and on the dead-letter writes.
	retryable := []string{"RetryableWriteError"}
	rejectN := uint64(seed) % 23
	b.script(
		faultproxy.Validator(ns, cbRequireQty),
		faultproxy.On("insert").In(ns).Always().Do(faultproxy.RandomSchedule(seed,
			faultproxy.Rate{P: 0.05, Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 112, CodeName: "WriteConflict", Labels: retryable})},
			faultproxy.Rate{P: 0.03, Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 11601, CodeName: "Interrupted", Labels: retryable})},
			faultproxy.Rate{P: 0.01, Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 189, CodeName: "PrimarySteppedDown", Labels: retryable})},
			faultproxy.Rate{P: 0.01, Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 8000, CodeName: "AtlasError", Message: "unclassified"})},
			faultproxy.Rate{P: 0.03, Fault: faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 64, CodeName: "WriteConcernTimeout", Message: "waiting for replication timed out", ErrInfo: cbD("wtimeout", true)})},
			faultproxy.Rate{P: 0.03, Fault: faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 6, CodeName: "HostUnreachable", Labels: retryable})},
			faultproxy.Rate{P: 0.04, Fault: faultproxy.CloseBeforeForward()},
			faultproxy.Rate{P: 0.05, Fault: faultproxy.CloseAfterForward()},
			faultproxy.Rate{P: 0.05, Fault: faultproxy.Delay(15 * time.Millisecond)},
			faultproxy.Rate{P: 0.01, Fault: faultproxy.Delay(chaosDeadline + 200*time.Millisecond)},
			faultproxy.Rate{P: 0.08, Fault: faultproxy.RejectDocuments(func(doc bson.Raw) bool {
				v, err := doc.LookupErr("n")
				return err == nil && uint64(v.AsInt64())%23 == rejectN
			}, faultproxy.WriteError{Code: 112, Message: "WriteConflict during the insert"})},
		)),
		faultproxy.On("find").In(ns).Always().Do(faultproxy.RandomSchedule(seed+1,
			faultproxy.Rate{P: 0.1, Fault: faultproxy.CloseBeforeForward()})),
		cbWriteRule(dlqNS).Always().Do(faultproxy.RandomSchedule(seed+2,
			faultproxy.Rate{P: 0.05, Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 112, CodeName: "WriteConflict", Labels: retryable})},
			faultproxy.Rate{P: 0.05, Fault: faultproxy.CloseAfterForward()})),
	)

	// The writes.
	concurrently(workers, batches, func(br *chaosBatchRun) { chaosWrite(b.ctx, g, br) })
	writeTime := time.Since(t0)

	// The account.
	stored := map[int]int{}
	storedDoc := map[int]bson.Raw{}
	seededLeft := 0
	for _, d := range b.docs(coll) {
		if v, err := d.LookupErr("n"); err == nil {
			n := int(v.AsInt64())
			stored[n]++
			storedDoc[n] = d
			continue
		}
		if _, err := d.LookupErr("seeded"); err == nil {
			seededLeft++
			continue
		}
		fail("unexpected document in the target: %v", d)
	}
	if seededLeft != chaosSeedDups {
		fail("%d pre-seeded documents left, want %d (a conflict overwrote one?)", seededLeft, chaosSeedDups)
	}
	dead := map[int]int{}
	for _, e := range b.dlq(g.dlqColl) {
		v, err := e.Original.LookupErr("n")
		if err != nil {
			fail("dead-letter entry without n: %v", e.Original)
			continue
		}
		dead[int(v.AsInt64())]++
		if e.Code != 121 {
			fail("dead-letter entry for n=%d has code %d, want 121 (only schema failures are dead-lettered)", v.AsInt64(), e.Code)
		}
	}

	disp := map[writeguard.Disposition]int{}
	var lost, dup, misplaced []string
	ambiguousDLQ := 0
	for _, br := range batches {
		for i, in := range br.inputs {
			d, maybe := br.outcomes[i], br.maybe[i]
			disp[d]++
			s, q := stored[in.n], dead[in.n]
			where := fmt.Sprintf("n=%d (%s, kind %d): %s, maybe=%v, stored %d, dead-lettered %d", in.n, br.op, in.kind, d, maybe, s, q)
			if br.errs[i] != nil {
				where += fmt.Sprintf(" (outcome error: %v)", br.errs[i])
			}
			switch {
			case s > 1 || q > 1 || s+q > 1:
				dup = append(dup, where)
				continue
			case d.Stored():
				if s != 1 {
					lost = append(lost, where)
				}
			case d == writeguard.DeadLettered:
				if q != 1 {
					lost = append(lost, where)
				}
			case d == writeguard.DeadLetterFailed && chaosAmbiguous(br.errs[i]):
				// The sink's write was cut by a lost reply or the deadline:
				// it may have been stored (then exactly once, checked
				// above); the document is in the report either way.
				ambiguousDLQ++
				if s != 0 {
					misplaced = append(misplaced, where)
				}
			case d == writeguard.OutcomeUnknown || maybe:
				// In the report as not (known to be) written; it may be in
				// the target, then exactly once (checked above).
				if q != 0 {
					misplaced = append(misplaced, where)
				}
			default: // conflict, failed, exhausted, not_attempted, dead_letter_failed
				if s != 0 || q != 0 {
					misplaced = append(misplaced, where)
				}
			}
			if d == chaosNoReport {
				misplaced = append(misplaced, where+fmt.Sprintf(": the call failed without a *writeguard.Report: %v", br.err))
			}
			if s == 1 {
				if got, want := storedDoc[in.n].Lookup("p").StringValue(), chaosP(in.doc); got != want {
					misplaced = append(misplaced, where+fmt.Sprintf(": stored p %q, sent %q", got, want))
				}
			}
			if d == writeguard.DeadLettered && in.kind != chaosInvalid {
				misplaced = append(misplaced, where+": dead-lettered but valid")
			}
			if in.kind == chaosInvalid && (d.Stored() || s != 0) {
				misplaced = append(misplaced, where+": invalid but written")
			}
			if in.kind == chaosDup && (d.Stored() || d == writeguard.DeadLettered || s != 0) {
				misplaced = append(misplaced, where+": reuses the _id of a stored document, cannot be stored nor dead-lettered")
			}
		}
	}
	for n, c := range stored {
		if n < 0 || n >= chaosDocs {
			fail("stored document with n=%d (×%d) that is no input", n, c)
		}
	}
	report := func(what string, list []string) {
		if len(list) == 0 {
			return
		}
		if len(list) > 20 {
			list = append(list[:20], fmt.Sprintf("... and %d more", len(list)-20))
		}
		fail("%s:\n  %s", what, strings.Join(list, "\n  "))
	}
	report("LOST (reported stored or dead-lettered, but absent)", lost)
	report("DUPLICATED (more than one copy in the target and the DLQ)", dup)
	report("MISPLACED (disposition and store disagree)", misplaced)

	st := b.proxy.Stats()
	keys := make([]string, 0, len(disp))
	for d := range disp {
		keys = append(keys, string(d))
	}
	sort.Strings(keys)
	var ds []string
	for _, k := range keys {
		ds = append(ds, fmt.Sprintf("%s=%d", k, disp[writeguard.Disposition(k)]))
	}
	t.Logf("seed %d: %d documents in %d batches (%d workers) written in %v", seed, chaosDocs, len(batches), workers, writeTime.Round(time.Millisecond))
	t.Logf("dispositions: %s", strings.Join(ds, " "))
	t.Logf("target: %d input documents stored (+%d seeded); DLQ: %d entries; dead_letter_failed after an ambiguous sink error: %d", len(stored), seededLeft, len(dead), ambiguousDLQ)
	t.Logf("faults fired: %v", st.Faults)
	t.Logf("commands: insert %d on the target (%d documents sent, %d forwarded), find %d, DLQ writes %d; writeguard attempts %d, retries %d, budget refusals %d",
		st.CountIn("insert", ns), st.Documents["insert"], st.Forwarded["insert"], st.CountIn("find", ns), b.cmds.Writes(dlqNS),
		len(g.rec.Attempts()), len(g.rec.Retries()), g.rec.BudgetExhausted())
	for _, k := range []faultproxy.FaultKind{faultproxy.FaultErrorReply, faultproxy.FaultWriteConcernError, faultproxy.FaultCloseBeforeForward,
		faultproxy.FaultCloseAfterForward, faultproxy.FaultDelay, faultproxy.FaultValidation, faultproxy.FaultDocument} {
		if st.Faults[k] == 0 && seed == chaosDefaultSeed {
			fail("fault kind %s never fired: the schedule does not exercise it", k)
		}
	}
	total := 0
	for _, c := range disp {
		total += c
	}
	if total != len(inputs) {
		fail("%d dispositions for %d inputs", total, len(inputs))
	}

	b.close()
	goleak.VerifyNone(t, leaks)
	t.Logf("total %v", time.Since(t0).Round(time.Millisecond))
}

// chaosNoReport marks the inputs of a call that failed without a
// *writeguard.Report (one outcome per input).
const chaosNoReport writeguard.Disposition = "NO_REPORT"

// chaosAmbiguous reports whether a dead-letter sink error leaves the
// envelope's fate unknown: a network error or a timeout (the context's
// deadline included) after the write was sent.
func chaosAmbiguous(err error) bool {
	return err != nil && (mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
}

func chaosP(d bson.D) string {
	for _, e := range d {
		if e.Key == "p" {
			return e.Value.(string)
		}
	}
	return ""
}

// chaosWrite writes one batch and records one disposition per input.
func chaosWrite(ctx context.Context, g *cbGuard, br *chaosBatchRun) {
	n := len(br.inputs)
	br.outcomes = make([]writeguard.Disposition, n)
	br.maybe = make([]bool, n)
	br.errs = make([]error, n)
	var err error
	if br.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, br.deadline)
		defer cancel()
	}
	switch br.op {
	case chaosInsertManyOrdered, chaosInsertManyUnordered:
		docs := make([]any, n)
		for i, in := range br.inputs {
			docs[i] = in.doc
		}
		_, err = g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(br.op == chaosInsertManyOrdered))
	default:
		models := make([]mongo.WriteModel, n)
		for i, in := range br.inputs {
			models[i] = mongo.NewInsertOneModel().SetDocument(in.doc)
		}
		_, err = g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(br.op == chaosBulkOrdered))
	}
	br.err = err
	if err == nil {
		for i := range br.outcomes {
			br.outcomes[i] = writeguard.Written
		}
		return
	}
	var r *writeguard.Report
	if !errors.As(err, &r) || len(r.Outcomes) != n {
		// Not a report: a broken caller contract (failed below). Account
		// every input as possibly written, so that the invariant still
		// checks duplicates and DLQ entries.
		for i := range br.outcomes {
			br.outcomes[i], br.maybe[i] = chaosNoReport, true
		}
		return
	}
	for i, o := range r.Outcomes {
		br.outcomes[i], br.maybe[i], br.errs[i] = o.Disposition, o.MaybeWritten, o.Err
	}
}

// seedDocuments stores n documents {_id: "seed-<k>", seeded: true} in coll:
// the _ids that duplicate inputs reuse.
func seedDocuments(b *caseBed, coll string, n int) {
	var docs []any
	for k := 0; k < n; k++ {
		docs = append(docs, cbD("_id", fmt.Sprintf("seed-%d", k), "seeded", true))
	}
	b.seed(coll, docs...)
}

// chaosInputs draws n input documents from rng: invalid ones (no qty: the
// emulated validator rejects them) with probability invalidP, duplicates
// of one of the seedDups seeded _ids with probability dupP, and of the
// others a share explicitP with an _id of their own (the rest get one
// from writeguard). Each carries its input number n and a payload p.
func chaosInputs(rng *rand.Rand, n int, invalidP, dupP, explicitP float64, seedDups int) []chaosInput {
	inputs := make([]chaosInput, n)
	for i := range inputs {
		in := chaosInput{n: i}
		switch x := rng.Float64(); {
		case x < invalidP:
			in.kind = chaosInvalid
		case x < invalidP+dupP:
			in.kind = chaosDup
		}
		var d bson.D
		switch {
		case in.kind == chaosDup:
			d = cbD("_id", fmt.Sprintf("seed-%d", rng.IntN(seedDups)))
		case rng.Float64() < explicitP:
			d = cbD("_id", fmt.Sprintf("doc-%d", i))
		}
		d = append(d, cbD("n", int32(i), "p", fmt.Sprintf("payload-%d-%x", i, rng.Uint32()))...)
		if in.kind != chaosInvalid {
			d = append(d, bson.E{Key: "qty", Value: int32(1 + rng.IntN(9))})
		}
		in.doc = d
		inputs[i] = in
	}
	return inputs
}
