package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/policy"
)

var (
	allClasses = []policy.Class{policy.Unknown, policy.Transient, policy.Throttled, policy.Invalid, policy.Conflict, policy.Configuration}
	allProofs  = []policy.Proof{policy.NotApplied, policy.Applied, policy.AppliedUnconfirmed, policy.MaybeApplied, policy.NotSent}
	allKinds   = []engine.Kind{engine.KindInsert, engine.KindUpdate, engine.KindReplace, engine.KindDelete}
	bools      = []bool{false, true}
)

// everyFacts calls f with every combination of Route's facts (classes x
// proofs x kinds x whole-command x upsert x idempotent x ever-maybe x
// unconfirmed x upsert runs spent or not): 7,680 cases.
func everyFacts(f func(engine.Facts)) int {
	n := 0
	for _, c := range allClasses {
		for _, p := range allProofs {
			for _, k := range allKinds {
				for _, whole := range bools {
					for _, up := range bools {
						for _, idem := range bools {
							for _, maybe := range bools {
								for _, unconf := range bools {
									for _, runs := range []int{0, 2} {
										n++
										f(engine.Facts{Class: c, Proof: p, Kind: k, WholeCommand: whole, Upsert: up, Idempotent: idem,
											EverMaybe: maybe || unconf, Unconfirmed: unconf, UpsertRuns: runs, MaxUpsertRuns: 2})
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return n
}

// The routing table, exhaustively: every rule of the issue "every
// disposition true" is checked on every combination of facts.
func TestRouteExhaustive(t *testing.T) {
	n := everyFacts(func(f engine.Facts) {
		d := engine.Route(f)
		name := fmt.Sprintf("%+v -> %s %s (%s)", f, d.Action, d.Disposition, d.Rule)
		resendable := f.Kind == engine.KindInsert || f.Idempotent
		maybe := f.EverMaybe || f.Proof == policy.MaybeApplied

		// A whole-command failure is never a verdict on the documents.
		if f.WholeCommand && (d.Action == engine.DeadLetter || d.Action == engine.HandleConflict) {
			t.Errorf("whole-command failure dead-lettered or sent to the conflict handler: %s", name)
		}
		// Only the retryable classes are retried (and upsert races, and
		// write concern errors of retryable classes).
		if d.Action == engine.Retry && !f.Class.Retryable() && !(f.Class == policy.Conflict && f.Upsert && !f.WholeCommand) {
			t.Errorf("non-retryable class retried: %s", name)
		}
		// A model that may have been applied is re-sent only when that is
		// idempotent (inserts, or marked).
		if d.Action == engine.Retry && maybe && !resendable {
			t.Errorf("non-idempotent model re-sent after an ambiguous attempt: %s", name)
		}
		if d.Action != engine.Settle {
			if d.Action == engine.ReadBack && f.Kind != engine.KindInsert {
				t.Errorf("read-back of a non-insert: %s", name)
			}
			return
		}
		switch d.Disposition {
		case policy.Failed:
			// failed claims "not stored by this call".
			if maybe || f.Proof == policy.AppliedUnconfirmed || f.Proof == policy.NotSent {
				t.Errorf("failed although the document may be stored or was never sent: %s", name)
			}
		case policy.NotAttempted:
			if f.Proof != policy.NotSent || maybe {
				t.Errorf("not_attempted for a document that was sent: %s", name)
			}
		case policy.OutcomeUnknown:
			// unknown only where the replies proved nothing.
			if !maybe || f.Unconfirmed {
				t.Errorf("unknown although the replies proved the outcome: %s", name)
			}
		case policy.WrittenUnconfirmed:
			if f.Proof != policy.AppliedUnconfirmed && !f.Unconfirmed {
				t.Errorf("written_unconfirmed without a write concern error: %s", name)
			}
		default:
			t.Errorf("Route settled with %q: %s", d.Disposition, name)
		}
	})
	if n != 7680 {
		t.Fatalf("%d combinations, want 7680", n)
	}
}

// The table's own rows, one per rule, as a reader checks them.
func TestRouteRules(t *testing.T) {
	ins := func(c policy.Class, p policy.Proof) engine.Facts {
		return engine.Facts{Class: c, Proof: p, Kind: engine.KindInsert, EverMaybe: p == policy.MaybeApplied || p == policy.AppliedUnconfirmed, Unconfirmed: p == policy.AppliedUnconfirmed}
	}
	upd := func(c policy.Class, p policy.Proof) engine.Facts {
		f := ins(c, p)
		f.Kind = engine.KindUpdate
		return f
	}
	whole := func(f engine.Facts) engine.Facts { f.WholeCommand = true; return f }
	cases := []struct {
		name   string
		facts  engine.Facts
		action engine.Action
		disp   policy.Disposition
	}{
		{"invalid document is dead-lettered", ins(policy.Invalid, policy.NotApplied), engine.DeadLetter, ""},
		{"whole-command invalid (Cosmos code 2 class) fails loudly", whole(ins(policy.Invalid, policy.NotApplied)), engine.Settle, policy.Failed},
		{"whole-command conflict fails loudly", whole(ins(policy.Conflict, policy.NotApplied)), engine.Settle, policy.Failed},
		{"interrupted insert is retried", whole(ins(policy.Transient, policy.MaybeApplied)), engine.Retry, ""},
		{"interrupted update (not idempotent) is unknown", whole(upd(policy.Transient, policy.MaybeApplied)), engine.Settle, policy.OutcomeUnknown},
		// Issue 28: a possibly applied insert that is not retried is read
		// back at once (already_written when found, unknown when not).
		{"11601 Interrupted (unknown class) insert is read back", fromServer(whole(ins(policy.Unknown, policy.MaybeApplied))), engine.ReadBack, ""},
		{"a Target's panic (unknown class, not from a server) leaves an insert unknown", whole(ins(policy.Unknown, policy.MaybeApplied)), engine.Settle, policy.OutcomeUnknown},
		{"11601 Interrupted (unknown class) update leaves unknown", whole(upd(policy.Unknown, policy.MaybeApplied)), engine.Settle, policy.OutcomeUnknown},
		{"pool cleared (not sent) is retried", whole(ins(policy.Transient, policy.NotSent)), engine.Retry, ""},
		{"unknown and never sent is not_attempted", whole(ins(policy.Unknown, policy.NotSent)), engine.Settle, policy.NotAttempted},
		{"duplicate after an ambiguous attempt is read back", ins(policy.Conflict, policy.NotApplied), engine.HandleConflict, ""},
		{"write concern error on a retryable insert is retried", whole(ins(policy.Transient, policy.AppliedUnconfirmed)), engine.Retry, ""},
		{"write concern error 64 stays written_unconfirmed", whole(ins(policy.Unknown, policy.AppliedUnconfirmed)), engine.Settle, policy.WrittenUnconfirmed},
		{"configuration failure fails", whole(ins(policy.Configuration, policy.NotApplied)), engine.Settle, policy.Failed},
	}
	maybeDup := ins(policy.Conflict, policy.NotApplied)
	maybeDup.EverMaybe = true
	cases = append(cases, struct {
		name   string
		facts  engine.Facts
		action engine.Action
		disp   policy.Disposition
	}{"own-write check after an ambiguous attempt", maybeDup, engine.ReadBack, ""})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := engine.Route(c.facts)
			if d.Action != c.action || d.Disposition != c.disp {
				t.Errorf("Route = %s %q (%s), want %s %q", d.Action, d.Disposition, d.Rule, c.action, c.disp)
			}
		})
	}
}

// GiveUp over every combination: never-sent documents are not_attempted
// whatever stopped them; nothing that may be stored is called exhausted or
// not_attempted without a read-back.
func TestGiveUpExhaustive(t *testing.T) {
	for _, why := range []engine.StopReason{engine.StopAttempts, engine.StopElapsed, engine.StopBudget, engine.StopContext, engine.StopOrdered, engine.StopConfiguration} {
		for _, k := range allKinds {
			for _, sent := range bools {
				for _, maybe := range bools {
					for _, unconf := range bools {
						for _, canRead := range bools {
							f := engine.GiveUpFacts{Reason: why, Kind: k, Sent: sent, EverMaybe: maybe || unconf, Unconfirmed: unconf, CanRead: canRead}
							d := engine.GiveUp(f)
							name := fmt.Sprintf("%+v -> %s %s", f, d.Action, d.Disposition)
							switch {
							case !sent && d.Disposition != policy.NotAttempted:
								t.Errorf("never sent but not not_attempted: %s", name)
							case sent && d.Disposition == policy.NotAttempted:
								t.Errorf("sent but not_attempted: %s", name)
							case sent && unconf && d.Disposition != policy.WrittenUnconfirmed:
								t.Errorf("applied with a write concern error but not written_unconfirmed: %s", name)
							case sent && f.EverMaybe && !unconf && (d.Disposition == policy.Exhausted || d.Disposition == policy.NotAttempted):
								t.Errorf("may be stored but called %s: %s", d.Disposition, name)
							case d.Action == engine.ReadBack && (k != engine.KindInsert || !canRead):
								t.Errorf("read-back not possible: %s", name)
							case d.Action != engine.Settle && d.Action != engine.ReadBack:
								t.Errorf("GiveUp must settle or read back: %s", name)
							}
						}
					}
				}
			}
		}
	}
}

func TestAfterReadBack(t *testing.T) {
	cases := []struct {
		found, same, unconf bool
		fallback            policy.Disposition
		action              engine.Action
		disp                policy.Disposition
	}{
		{true, true, false, "", engine.Settle, policy.AlreadyWritten},
		// A read-back proves presence, not durability.
		{true, true, true, "", engine.Settle, policy.WrittenUnconfirmed},
		{true, true, true, policy.Exhausted, engine.Settle, policy.WrittenUnconfirmed},
		{true, false, false, "", engine.HandleConflict, ""},
		{false, false, false, "", engine.HandleConflict, ""},
		{false, false, false, policy.OutcomeUnknown, engine.Settle, policy.OutcomeUnknown},
		{false, false, false, policy.NotAttempted, engine.Settle, policy.NotAttempted},
	}
	for _, c := range cases {
		d := engine.AfterReadBack(c.found, c.same, c.unconf, c.fallback)
		if d.Action != c.action || d.Disposition != c.disp {
			t.Errorf("AfterReadBack(%v, %v, %v, %q) = %s %q, want %s %q", c.found, c.same, c.unconf, c.fallback, d.Action, d.Disposition, c.action, c.disp)
		}
	}
}

// Every shape has a row that names it, says what it proves and cites its
// source.
func TestAttemptLimit(t *testing.T) {
	b := policy.DefaultBackoff()
	driverRetried := policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeCommandRejected, Labels: []string{policy.LabelSystemOverloaded, policy.LabelRetryable}}
	perDoc := policy.Failure{Index: 0, Shape: policy.ShapeWriteError, Code: 16500}
	if got := engine.AttemptLimit(policy.Throttled, &driverRetried, b, 2); got != 2 {
		t.Errorf("driver-retried overload: limit %d, want 2", got)
	}
	if got := engine.AttemptLimit(policy.Throttled, &perDoc, b, 2); got < 1000 {
		t.Errorf("per-document 16500 (never retried by the driver): limit %d, want bounded only by time and budget", got)
	}
	if got := engine.AttemptLimit(policy.Transient, &perDoc, b, 2); got != b.MaxAttempts {
		t.Errorf("transient: limit %d, want %d", got, b.MaxAttempts)
	}
	one := b
	one.MaxAttempts = 1
	if got := engine.AttemptLimit(policy.Throttled, &perDoc, one, 2); got != 1 {
		t.Errorf("MaxAttempts 1 disables retries, got %d", got)
	}
}

func TestOrderedWindow(t *testing.T) {
	cases := []struct{ window, sent, stopAt, want int }{
		{0, 1000, -1, 0},   // no stop: everything, as before
		{0, 1000, 0, 16},   // a rejection at the first document: the minimum
		{0, 1000, 99, 200}, // twice the run length
		{16, 16, -1, 32},   // a whole window went through: double
		{32, 10, -1, 32},   // the tail was shorter than the window
		{200, 200, 3, 16},  // dense rejections again
	}
	for _, c := range cases {
		if got := engine.OrderedWindow(c.window, c.sent, c.stopAt); got != c.want {
			t.Errorf("OrderedWindow(%d, %d, %d) = %d, want %d", c.window, c.sent, c.stopAt, got, c.want)
		}
	}
}

// C63: a possibly applied document that the read-back did not find (or
// could not read) when its retries stopped is unknown, whatever stopped
// them: never exhausted (every attempt proved it not applied) and never
// not_attempted (it was sent).
func TestReadBackFallbackIsUnknown(t *testing.T) {
	if d := engine.ReadBackFallback(); d != policy.OutcomeUnknown {
		t.Errorf("ReadBackFallback() = %s, want unknown", d)
	}
}

// Every settle that leaves a document unstored says why: Route's give
// not_sent, not_retried or not_resendable; GiveUp's take the stop's reason
// from the engine.
func TestRouteGivesReasons(t *testing.T) {
	everyFacts(func(f engine.Facts) {
		d := engine.Route(f)
		if d.Action != engine.Settle || d.Disposition.Stored() {
			return
		}
		ok := d.Reason == engine.ReasonNotRetried || d.Reason == engine.ReasonNotResendable
		switch {
		case d.Disposition == policy.NotAttempted:
			ok = d.Reason == engine.ReasonNotSent
		case f.Class.Retryable():
			ok = d.Reason == engine.ReasonNotResendable // a retryable failure stops only there
		case f.Class != policy.Conflict || f.WholeCommand:
			ok = d.Reason == engine.ReasonNotRetried
		}
		if !ok {
			t.Errorf("%+v -> %s %s: reason %s", f, d.Disposition, d.Rule, d.Reason)
		}
	})
	for r := engine.ReasonNone; r <= engine.ReasonSinkFailed; r++ {
		if r != engine.ReasonNone && (r.String() == "" || strings.HasPrefix(r.String(), "reason(")) {
			t.Errorf("reason %d has no name", r)
		}
	}
}

// Where _id is not unique (a time-series collection), an insert that may
// have been applied is never re-sent: it is read back (transient and
// throttled failures) or ends unknown; and its read-back decides only
// "own write" or unknown (C55).
func TestNoUniqueIDNeverResends(t *testing.T) {
	n := everyFacts(func(f engine.Facts) {
		f.NoUniqueID = true
		d := engine.Route(f)
		maybe := f.EverMaybe || f.Proof == policy.MaybeApplied || f.Proof == policy.AppliedUnconfirmed
		if f.Kind != engine.KindInsert || !maybe {
			return
		}
		if d.Action == engine.Retry {
			t.Errorf("%+v -> retry (%s): a possibly applied insert re-sent where _id is not unique", f, d.Rule)
		}
		if f.Class.Retryable() && f.Proof != policy.AppliedUnconfirmed && !f.Unconfirmed && d.Action != engine.ReadBack {
			t.Errorf("%+v -> %s %s (%s), want a read-back", f, d.Action, d.Disposition, d.Rule)
		}
	})
	if n == 0 {
		t.Fatal("no facts")
	}
	cases := []struct {
		found, same, unconf bool
		disp                policy.Disposition
	}{
		{true, true, false, policy.AlreadyWritten},
		{true, true, true, policy.WrittenUnconfirmed},
		{true, false, false, policy.OutcomeUnknown},
		{false, false, false, policy.OutcomeUnknown},
	}
	for _, c := range cases {
		if d := engine.AfterReadBackNoUniqueID(c.found, c.same, c.unconf); d.Action != engine.Settle || d.Disposition != c.disp {
			t.Errorf("AfterReadBackNoUniqueID(%v, %v, %v) = %s %s, want settle %s", c.found, c.same, c.unconf, d.Action, d.Disposition, c.disp)
		}
	}
}

// A failure that proves nothing about its document (Proof MaybeApplied: a
// write error whose code is no verdict, a lost reply) is never a verdict
// on it, whatever class a classifier gives it: never dead-lettered, never
// handed to the conflict handler.
func TestMaybeAppliedIsNoVerdict(t *testing.T) {
	everyFacts(func(f engine.Facts) {
		if f.Proof != policy.MaybeApplied {
			return
		}
		if d := engine.Route(f); d.Action == engine.DeadLetter || d.Action == engine.HandleConflict {
			t.Errorf("%+v -> %s (%s)", f, d.Action, d.Rule)
		}
	})
}

// fromServer marks f's failure as a server's reply (Facts.FromServer).
func fromServer(f engine.Facts) engine.Facts {
	f.FromServer = true
	return f
}
