package engine

import (
	"strconv"

	"github.com/writeguard/writeguard/policy"
)

// Kind is the kind of a write model, as routing needs it.
type Kind uint8

const (
	// KindInsert is an inserted document (InsertOne, InsertMany, an
	// InsertOneModel). writeguard gives it its _id before the first
	// attempt, so re-sending it can never store it twice.
	KindInsert Kind = iota
	// KindUpdate is an UpdateOneModel or UpdateManyModel.
	KindUpdate
	// KindReplace is a ReplaceOneModel.
	KindReplace
	// KindDelete is a DeleteOneModel or DeleteManyModel.
	KindDelete
)

// Action is what the write loop does with one document after an attempt.
type Action uint8

const (
	// Settle ends the document with Decision.Disposition.
	Settle Action = iota
	// Retry sends the document again after the backoff, if the attempt
	// limit, the elapsed-time limit, the retry budget and the context allow
	// (otherwise GiveUp decides).
	Retry
	// ReadBack reads the stored document with the document's _id and
	// decides with AfterReadBack.
	ReadBack
	// DeadLetter hands the document to the dead-letter sink.
	DeadLetter
	// HandleConflict hands the document to the conflict handler.
	HandleConflict
)

// String returns the action's name: settle, retry, read_back, dead_letter
// or handle_conflict.
func (a Action) String() string {
	switch a {
	case Settle:
		return "settle"
	case Retry:
		return "retry"
	case ReadBack:
		return "read_back"
	case DeadLetter:
		return "dead_letter"
	case HandleConflict:
		return "handle_conflict"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// Facts are what Route needs to know about one document after one attempt.
type Facts struct {
	// Class is the class of the document's failure.
	Class policy.Class
	// WholeCommand is true when the failure belongs to the whole command
	// (Failure.Index == WholeCommand): it is never a verdict on the
	// document.
	WholeCommand bool
	// Proof is what this attempt's reply proved about the document.
	Proof policy.Proof
	// Kind is the kind of write model.
	Kind Kind
	// Upsert is true for an update or replace with upsert: true.
	Upsert bool
	// Idempotent is true when the caller marked non-insert models safe to
	// re-send after an ambiguous failure (writeguard.WithIdempotent).
	Idempotent bool
	// NoUniqueID is true when _id is not unique where the document lands
	// (a time-series collection): a re-sent insert would be stored twice
	// rather than refused, so a possibly applied insert is never re-sent.
	NoUniqueID bool
	// EverMaybe is true when this or an earlier attempt of the call may
	// have applied the document (Proof MaybeApplied or AppliedUnconfirmed).
	EverMaybe bool
	// Unconfirmed is true when this or an earlier attempt applied the
	// document with a write concern error.
	Unconfirmed bool
	// UpsertRuns is how many times an upsert was run again after a
	// duplicate key; MaxUpsertRuns bounds it.
	UpsertRuns, MaxUpsertRuns int
	// FromServer is true when the failure is a server's reply (Origin
	// server or write_concern), not a client-side error of no driver
	// shape (a Target's panic): only then is a possibly applied insert
	// that is not retried read back (RuleReadBackStopping).
	FromServer bool
}

// resendable reports whether the document may be sent again after an
// attempt that may have applied it: inserts where _id is unique (their _id
// makes them idempotent), other models only when marked idempotent.
func (f Facts) resendable() bool {
	if f.Kind == KindInsert {
		return !f.NoUniqueID
	}
	return f.Idempotent
}

// Decision is the outcome of Route, GiveUp or AfterReadBack for one
// document.
type Decision struct {
	// Action is what to do.
	Action Action
	// Disposition is the terminal disposition when Action is Settle.
	Disposition policy.Disposition
	// Rule names the rule that decided, for tests, logs and spans.
	Rule string
	// Reason says why a Settle ends the document unstored (ReasonNone
	// when the rule gives none: GiveUp's settles take the stop's).
	Reason Reason
}

// RuleUpsertRace is the Decision.Rule of an upsert run again after it lost
// a race on a unique index: the caller counts it against MaxUpsertRuns.
const RuleUpsertRace = "upsert_race"

func settle(d policy.Disposition, rule string) Decision {
	return Decision{Action: Settle, Disposition: d, Rule: rule}
}

// Route decides what happens to one document after a failed attempt. It is
// a pure function of its facts; the rules, in order:
//
//  1. A write concern error (AppliedUnconfirmed): re-sent when its class is
//     retryable and the model may be re-sent (a retry may find it rolled
//     back); otherwise written_unconfirmed.
//  2. A whole-command failure is never a verdict on the documents, nor is a
//     failure that proves nothing (Proof MaybeApplied: a write error whose
//     code is no verdict where it came from, policy.WriteErrorShape, or one
//     on a multi statement, whatever a classifier says of it): an Invalid or Conflict class there is treated as Unknown
//     (never dead-lettered, never handed to a conflict handler).
//  3. Transient and Throttled: retried, unless the document may have been
//     applied and may not be re-sent: an insert where _id is not unique is
//     read back (AfterReadBackNoUniqueID), a non-idempotent update after a
//     lost reply ends as rule 6.
//  4. Invalid (a per-document verdict): dead-lettered.
//  5. Conflict: an insert that may have been applied by an earlier attempt
//     is read back first (its own write, or someone else's); an upsert is
//     run again up to MaxUpsertRuns times (the server's own upsert retry
//     is narrow: SERVER-14322) unless an earlier attempt may have applied
//     it and it may not be re-sent (then as rule 6); anything else goes to
//     the conflict handler.
//  6. Unknown and Configuration, never retried: written_unconfirmed when an
//     attempt applied it with a write concern error; an insert that may
//     have been applied is read back (RuleReadBackStopping); unknown when
//     another model may have been applied, not_attempted when nothing was
//     sent, failed otherwise.
func Route(f Facts) Decision {
	if f.Proof == policy.AppliedUnconfirmed {
		if f.Class.Retryable() && f.resendable() {
			return Decision{Action: Retry, Rule: "unconfirmed_retry"}
		}
		return settle(policy.WrittenUnconfirmed, "write_concern_error")
	}
	class := f.Class
	if (f.WholeCommand || f.Proof == policy.MaybeApplied) && (class == policy.Invalid || class == policy.Conflict) {
		class = policy.Unknown
	}
	maybe := f.EverMaybe || f.Proof == policy.MaybeApplied
	switch class {
	case policy.Transient, policy.Throttled:
		if maybe && f.Kind == KindInsert && f.NoUniqueID {
			return Decision{Action: ReadBack, Rule: "maybe_applied_no_unique_id"}
		}
		if maybe && !f.resendable() {
			return unretried(f, true, ReasonNotResendable)
		}
		return Decision{Action: Retry, Rule: "retryable"}
	case policy.Invalid:
		return Decision{Action: DeadLetter, Rule: "invalid"}
	case policy.Conflict:
		switch {
		case f.Kind == KindInsert && maybe:
			return Decision{Action: ReadBack, Rule: "own_write_check"}
		case f.Upsert && f.UpsertRuns < f.MaxUpsertRuns && (!maybe || f.resendable()):
			return Decision{Action: Retry, Rule: RuleUpsertRace}
		case maybe && !f.resendable():
			return unretried(f, true, ReasonNotResendable) // an earlier attempt may have applied it
		}
		return Decision{Action: HandleConflict, Rule: "conflict"}
	}
	if maybe && f.Kind == KindInsert && !f.Unconfirmed && f.FromServer {
		return Decision{Action: ReadBack, Rule: RuleReadBackStopping}
	}
	return unretried(f, maybe, ReasonNotRetried)
}

// RuleReadBackStopping is the Decision.Rule of a possibly applied insert
// whose failure is not retried (Unknown, Configuration: 217, an unknown
// code): it is read back by _id at once, and ends already_written when
// found, unknown (ReadBackFallback) when not, or with the conflict handler
// when another document holds its _id.
const RuleReadBackStopping = "maybe_applied_not_retried_read_back"

// unretried ends a document whose failure is not retried, for reason why.
func unretried(f Facts, maybe bool, why Reason) Decision {
	switch {
	case f.Unconfirmed:
		return settle(policy.WrittenUnconfirmed, "applied_unconfirmed_earlier")
	case maybe:
		return because(settle(policy.OutcomeUnknown, "maybe_applied"), why)
	case f.Proof == policy.NotSent:
		return because(settle(policy.NotAttempted, "not_sent"), ReasonNotSent)
	}
	return because(settle(policy.Failed, "not_retried"), why)
}

func because(d Decision, why Reason) Decision {
	d.Reason = why
	return d
}

// StopReason says why a document marked for retry is not sent again.
type StopReason uint8

const (
	// StopAttempts: the document's attempts reached the limit of its class.
	StopAttempts StopReason = iota
	// StopElapsed: the next wait would end past the call's MaxElapsed.
	StopElapsed
	// StopBudget: the retry budget refused the retry.
	StopBudget
	// StopContext: the context is done, or its deadline is too close for
	// the wait.
	StopContext
	// StopOrdered: an ordered write stopped at an earlier document that
	// ended unhandled.
	StopOrdered
	// StopConfiguration: a configuration failure ended the call.
	StopConfiguration
)

// GiveUpFacts are what GiveUp needs to know about a document that will not
// be sent again.
type GiveUpFacts struct {
	// Reason is why it is not sent again.
	Reason StopReason
	// Kind is the kind of write model.
	Kind Kind
	// Sent is true when at least one attempt of the call sent the document
	// to the server.
	Sent bool
	// EverMaybe and Unconfirmed are as in Facts.
	EverMaybe, Unconfirmed bool
	// CanRead is true when a read-back is still possible (the context is
	// not done).
	CanRead bool
}

// GiveUp decides the terminal disposition of a document that was to be
// retried (or was still pending) when its retries stopped:
//
//   - never sent: not_attempted, whatever stopped it;
//   - applied with a write concern error earlier: written_unconfirmed;
//   - an insert that may have been applied: read back when the context
//     allows (then AfterReadBack), unknown otherwise;
//   - another model that may have been applied: unknown;
//   - an ordered write's tail that the server never executed, or a call
//     ended by a configuration failure: not_attempted;
//   - sent and proved not applied: exhausted.
func GiveUp(f GiveUpFacts) Decision {
	switch {
	case !f.Sent:
		return settle(policy.NotAttempted, "never_sent")
	case f.Unconfirmed:
		return settle(policy.WrittenUnconfirmed, "applied_unconfirmed_earlier")
	case f.EverMaybe && f.Kind == KindInsert && f.CanRead:
		return Decision{Action: ReadBack, Rule: "maybe_applied_read_back"}
	case f.EverMaybe:
		return settle(policy.OutcomeUnknown, "maybe_applied")
	}
	// Sent, and every attempt proved it not applied (a command rejected
	// as a whole, say): exhausted, whatever stopped it (its Reason says
	// what), never not_attempted, which claims it was never sent.
	return settle(policy.Exhausted, "retries_spent")
}

// ReadBackFallback is the disposition of a possibly applied insert whose
// read-back, when its retries stopped (for any reason), found nothing or
// failed: unknown. An attempt may have applied it and no reply proved
// otherwise, so it is neither exhausted (which claims every attempt
// proved it not applied) nor not_attempted (it was sent); the Outcome
// keeps MaybeWritten: a write still in flight on the server may yet land.
func ReadBackFallback() policy.Disposition {
	return policy.OutcomeUnknown
}

// AfterReadBack decides what a read-back of an insert's _id proved. found
// says whether a document with that _id is stored, same whether it equals
// the document sent (SameDocument), unconfirmed whether a write concern
// error came with an earlier attempt. fallback is the disposition when
// nothing is found and the call stops retrying ("" while it still
// retries):
//
//   - found and same: the call's own earlier write: already_written, or
//     written_unconfirmed when a write concern error came with it (a
//     read-back proves presence, not durability);
//   - found and different: someone else's document holds the _id: the
//     conflict handler decides;
//   - not found after a duplicate key (fallback ""): the key that
//     collided is not this document's _id in the store, so the duplicate
//     is genuine: the conflict handler decides;
//   - not found when stopping: fallback (the Outcome keeps MaybeWritten:
//     a write still in flight on the server may yet land).
func AfterReadBack(found, same, unconfirmed bool, fallback policy.Disposition) Decision {
	switch {
	case found && same && unconfirmed:
		return settle(policy.WrittenUnconfirmed, "own_write_unconfirmed")
	case found && same:
		return settle(policy.AlreadyWritten, "own_write")
	case found:
		return Decision{Action: HandleConflict, Rule: "foreign_document"}
	case fallback != "":
		return settle(fallback, "not_found_stopping")
	}
	return Decision{Action: HandleConflict, Rule: "not_found_genuine_duplicate"}
}

// AfterReadBackNoUniqueID decides what a read-back of a possibly applied
// insert proved where _id is not unique (a time-series collection), where
// the insert is never re-sent: found and same, the call's own write
// (already_written, or written_unconfirmed after a write concern error);
// anything else, unknown: a document found under the _id is no conflict
// (nothing refuses a second one), and absence does not prove the lost
// write will not land.
func AfterReadBackNoUniqueID(found, same, unconfirmed bool) Decision {
	switch {
	case found && same && unconfirmed:
		return settle(policy.WrittenUnconfirmed, "own_write_unconfirmed")
	case found && same:
		return settle(policy.AlreadyWritten, "own_write")
	}
	return because(settle(policy.OutcomeUnknown, "unresolved_no_unique_id"), ReasonNotResendable)
}

// AttemptLimit returns how many attempts a document whose last failure is
// f (of class c) may have in total. A throttled failure that the driver
// retries itself inside each attempt (a whole-command error labelled
// SystemOverloadedError and RetryableError: client-backpressure spec) gets
// throttledAttempts, so that the server does not see the driver's retries
// multiplied by writeguard's; every other failure gets b.MaxAttempts,
// except a throttled failure the driver never retries (a per-document
// 16500 from Azure Cosmos DB, a 462 without labels), which is bounded only
// by the call's MaxElapsed and the retry budget.
func AttemptLimit(c policy.Class, f *policy.Failure, b policy.Backoff, throttledAttempts int) int {
	if c != policy.Throttled {
		return b.MaxAttempts
	}
	if f != nil && DriverRetries(f) || b.MaxAttempts <= 1 {
		return min(throttledAttempts, b.MaxAttempts)
	}
	return int(^uint(0) >> 1)
}

// DriverRetries reports whether the Go driver retries this failure itself
// inside an attempt: a whole-command error labelled SystemOverloadedError
// and RetryableError (client-backpressure spec). Per-document write errors
// are never retried by the driver.
func DriverRetries(f *policy.Failure) bool {
	return f.Shape != policy.ShapeWriteError && f.HasLabel(policy.LabelSystemOverloaded) && f.HasLabel(policy.LabelRetryable)
}

// MinOrderedWindow is the smallest number of documents an ordered write
// sends per attempt once it has met a per-document failure.
const MinOrderedWindow = 16

// OrderedWindow returns how many pending documents the next attempt of an
// ordered write sends (0: all of them). An ordered write ends its command
// at the first document the server rejects, so when many documents are
// rejected (a batch of invalid documents dead-lettered one by one) sending
// the whole tail every time costs O(n²) bytes. The window follows the
// observed run length instead: after an attempt of sent documents that
// stopped at position stopAt (-1: it did not stop at a document), the next
// attempt sends max(2·(stopAt+1), MinOrderedWindow) documents; an attempt
// that went through its whole window doubles it. Memory per attempt then
// tracks the distance between rejections, at the price of about log2(n)
// extra round trips when the rejections stop.
func OrderedWindow(window, sent, stopAt int) int {
	switch {
	case stopAt >= 0:
		return max(2*(stopAt+1), MinOrderedWindow)
	case window > 0 && sent >= window:
		return 2 * window
	}
	return window
}

// Charged reports whether a retry after failure f spends a token of the
// retry budget and counts against the document's attempt limit. A
// connection checkout failure (ShapeCheckout: the driver cleared its
// connection pool, a checkout timed out) is not charged: one dropped
// connection clears the pool for every caller waiting for a connection,
// and charging each of them would let one event of the client's own drain
// the budget and the attempts of every writer sharing the client, though
// none of their commands reached the server. Such retries stay bounded by
// the call's MaxElapsed and its context. Every other failure, server
// selection included, is charged.
func Charged(f *policy.Failure) bool { return f == nil || f.Shape != policy.ShapeCheckout }
