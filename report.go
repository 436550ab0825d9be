package writeguard

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/policy"
)

// Disposition is the terminal outcome of one input document or model; see
// policy.Disposition for the values.
type Disposition = policy.Disposition

// The dispositions, re-exported from policy for convenience.
const (
	Written            = policy.Written
	AlreadyWritten     = policy.AlreadyWritten
	WrittenUnconfirmed = policy.WrittenUnconfirmed
	DeadLettered       = policy.DeadLettered
	DeadLetterFailed   = policy.DeadLetterFailed
	Conflicted         = policy.Conflicted
	ConflictSkipped    = policy.ConflictSkipped
	ConflictReplaced   = policy.ConflictReplaced
	Failed             = policy.Failed
	Exhausted          = policy.Exhausted
	NotAttempted       = policy.NotAttempted
	OutcomeUnknown     = policy.OutcomeUnknown
	Unacknowledged     = policy.Unacknowledged
)

// Reason says why an input ended without being stored or handled, in
// Outcome.Reason: why its retries stopped, or why it was never retried.
// ReasonNone for a stored or handled input, and for a conflict the handler
// did not resolve (the disposition says it all). String gives the names
// reports, logs and metrics show.
type Reason uint8

// The reasons of Outcome.Reason.
const (
	// ReasonNone: stored (written, already_written, written_unconfirmed)
	// or handled (dead-lettered, a conflict handler's resolution), or a
	// conflict the handler left unresolved. Its name is "".
	ReasonNone Reason = iota
	// ReasonAttemptsSpent, "attempts_spent": its attempts reached the
	// limit of its class (Backoff.MaxAttempts, WithThrottledAttempts).
	ReasonAttemptsSpent
	// ReasonMaxElapsed, "max_elapsed": the next wait would have ended past
	// the call's Backoff.MaxElapsed.
	ReasonMaxElapsed
	// ReasonBudgetRefused, "budget_refused": the retry budget refused the
	// retry (WithBudget).
	ReasonBudgetRefused
	// ReasonDeadline, "deadline": the context ended, or its deadline was
	// too close for the next wait.
	ReasonDeadline
	// ReasonOrderedStop, "ordered_stop": an ordered write stopped at an
	// earlier input that ended unhandled.
	ReasonOrderedStop
	// ReasonConfiguration, "configuration": a configuration failure ended
	// the call (Report.Hint names the setting).
	ReasonConfiguration
	// ReasonNotSent, "not_sent": it never left the client (a client-side
	// error).
	ReasonNotSent
	// ReasonNotRetried, "not_retried": its failure's class is never
	// retried (unknown, configuration; invalid, when no dead-letter sink
	// is set).
	ReasonNotRetried
	// ReasonNotResendable, "not_resendable": an attempt may have applied
	// it, and it may not be sent again (an update not marked idempotent,
	// an insert where _id is not unique).
	ReasonNotResendable
	// ReasonSinkFailed, "sink_failed": invalid, and no dead-letter sink
	// stored it.
	ReasonSinkFailed
)

// String returns the reason's name: "", attempts_spent, max_elapsed,
// budget_refused, deadline, ordered_stop, configuration, not_sent,
// not_retried, not_resendable, sink_failed; "reason(N)" for a value
// outside the list. The names are the engine's, the one list reports,
// logs and metrics share.
func (r Reason) String() string { return engine.Reason(r).String() }

// reasonOf lifts the engine's reason of an input into the face's
// (newReport): the two lists are in the same order, which
// TestReasonsLifted checks name by name.
func reasonOf(r engine.Reason) Reason { return Reason(r) }

// Sentinels for errors.Is on a *Report: the Report matches each sentinel
// whose disposition at least one input has.
var (
	ErrDeadLettered     = errors.New("writeguard: documents were dead-lettered")
	ErrDeadLetterFailed = errors.New("writeguard: dead-lettering failed; the documents are in the report")
	ErrConflict         = errors.New("writeguard: duplicate key")
	ErrFailed           = errors.New("writeguard: write failed (not retried)")
	ErrExhausted        = errors.New("writeguard: retries exhausted")
	ErrNotAttempted     = errors.New("writeguard: documents were not attempted")
	ErrOutcomeUnknown   = errors.New("writeguard: outcome unknown; the write may have been applied")
	ErrUnconfirmed      = errors.New("writeguard: written, but the write concern was not satisfied")
	ErrUnacknowledged   = engine.ErrUnacknowledged
	// ErrConfiguration matches a Report whose call was stopped by a
	// Configuration failure (20, 79, 100): fix the setting it names.
	ErrConfiguration = errors.New("writeguard: deployment or client configuration error")
)

func sentinel(d Disposition) error {
	switch {
	case d == DeadLettered:
		return ErrDeadLettered
	case d == DeadLetterFailed:
		return ErrDeadLetterFailed
	case d.IsConflict():
		return ErrConflict
	case d == Failed:
		return ErrFailed
	case d == Exhausted:
		return ErrExhausted
	case d == NotAttempted:
		return ErrNotAttempted
	case d == OutcomeUnknown:
		return ErrOutcomeUnknown
	case d == WrittenUnconfirmed:
		return ErrUnconfirmed
	case d == Unacknowledged:
		return ErrUnacknowledged
	}
	return nil
}

// Outcome is what happened to one input document or write model.
type Outcome struct {
	// Index is the position in the caller's input.
	Index int
	// ID is the document's _id (assigned by writeguard when the input had
	// none) for inserts, nil for other models. It is the Go value the
	// driver returns for that _id on every path (policy.IDValue): a string
	// _id is a string, a generated one a bson.ObjectID.
	ID any
	// Disposition is the terminal outcome.
	Disposition Disposition
	// Class is the class of Failure (policy.Unknown when there was none).
	Class policy.Class
	// Failure is the last failure of this input, nil when it was written
	// without one.
	Failure *policy.Failure
	// Attempts is how many times it was sent (0 for not_attempted).
	Attempts int
	// Reason says why it ended unstored and unhandled: why its retries
	// stopped (attempts_spent, max_elapsed, budget_refused, deadline,
	// ordered_stop, configuration) or why it was never retried (not_sent,
	// not_retried, not_resendable, sink_failed). ReasonNone when it is
	// stored or handled, or a conflict the handler did not resolve.
	Reason Reason
	// MaybeWritten is true when an attempt may have applied the document
	// (a lost reply, a timeout after sending, an interrupted command) and
	// no later reply or read-back proved it stored or absent: reconcile by
	// _id before writing it again. It is false for the stored
	// dispositions (written, already_written, written_unconfirmed).
	MaybeWritten bool
	// Document is the document as prepared for the write (with its _id),
	// for an insert that did not end written or already_written, so that
	// nothing is lost when a write or a dead-letter hand-off fails and
	// Remaining can send it again; nil for a stored insert (written,
	// already_written: the call lets its bytes go as soon as it is
	// stored, and ID names it), for a document that could not be encoded
	// (its ID is nil too; Failure says why) and for other models.
	Document bson.Raw
	// Model is the caller's write model (BulkWrite), or the write of a
	// method of one write as a model (UpdateOne: an UpdateOneModel, ...;
	// it is what a dead-letter envelope stores); nil for InsertOne and
	// InsertMany.
	Model mongo.WriteModel
	// Err is an error of writeguard's own handling of this input: the
	// dead-letter sink's error, the conflict handler's error, the read-back
	// error. nil otherwise.
	Err error
	// Idempotent is true when the input may be sent again after an attempt
	// that may have applied it: an insert (its _id), or an update, replace
	// or delete the caller marked (WithIdempotent, IdempotentModels).
	// Report.Remaining reads it.
	Idempotent bool
}

// Report is the error a guarded call returns when any input did not end
// written or already_written. It has exactly one Outcome per input, in
// input order.
//
// errors.Is(err, ErrDeadLettered) and the other sentinels tell which
// dispositions occurred; errors.As reaches the driver errors that explain
// the unhandled inputs (a mongo.BulkWriteException, say; conflicts first,
// see Unwrap) and any sink or handler error; Handled tells whether every
// input reached a handled disposition.
type Report struct {
	// Operation is the guarded method's name: insertOne, insertMany,
	// bulkWrite, updateOne, updateByID, updateMany, replaceOne, deleteOne,
	// deleteMany, findOneAndUpdate, findOneAndReplace or findOneAndDelete.
	Operation string
	// Namespace is "<database>.<collection>".
	Namespace string
	// Outcomes has one entry per input, Outcomes[i].Index == i.
	Outcomes []Outcome
	// Attempts is the number of driver calls the call made.
	Attempts int
	// Err is the last error the driver returned, nil when none did (every
	// failure was client-side or from writeguard's own checks). It may
	// belong to an attempt whose inputs a later attempt wrote; Unwrap
	// gives the driver errors that explain each unhandled input.
	Err error
	// Hint names the setting to fix after a Configuration failure ("" when
	// there was none).
	Hint string
	// NoUniqueID is true when the target has no unique index on _id
	// (declared with WithUniqueID(false), or learned by the call:
	// a time-series collection), or when the call could not learn it
	// within its bound (5 s, on a context of its own: never from the
	// caller's expired context), so a re-sent insert that may have
	// been applied could be stored twice (Report.Remaining leaves it out).
	NoUniqueID bool

	extra []error
}

// newReport lifts what a finished call proved into a *Report.
func newReport(c engine.Result) error {
	r := &Report{Operation: c.Operation(), Namespace: c.Namespace(), Attempts: c.Attempts(), Err: c.LastErr(), Hint: c.Hint(), extra: c.Extra()}
	r.Outcomes = make([]Outcome, c.Len())
	for i := range r.Outcomes {
		r.Outcomes[i] = Outcome{Index: i, ID: c.ID(i), Disposition: c.Disposition(i), Class: c.Class(i), Failure: c.Failure(i),
			Attempts: c.Sent(i), Reason: reasonOf(c.Reason(i)), MaybeWritten: c.MaybeWritten(i), Document: c.Document(i), Model: c.Model(i), Err: c.Err(i),
			Idempotent: c.Idempotent(i)}
	}
	return r
}

// Count returns the number of inputs with disposition d.
func (r *Report) Count(d Disposition) int {
	n := 0
	for i := range r.Outcomes {
		if r.Outcomes[i].Disposition == d {
			n++
		}
	}
	return n
}

// Counts returns the number of inputs per disposition.
func (r *Report) Counts() map[Disposition]int {
	m := make(map[Disposition]int, 4)
	for i := range r.Outcomes {
		m[r.Outcomes[i].Disposition]++
	}
	return m
}

// Handled reports whether every input reached a handled disposition (see
// policy.Disposition.Handled) and the call did not dead-letter while the
// dead-letter flood breaker was open (WithDeadLetterBreaker: then it is
// false, and the Report carries a *FloodError).
func (r *Report) Handled() bool {
	if r.flood() != nil {
		return false
	}
	for i := range r.Outcomes {
		if !r.Outcomes[i].Disposition.Handled() {
			return false
		}
	}
	return true
}

// maxErrorLen bounds Report.Error() in bytes.
const maxErrorLen = 1024

// maxFailureKinds bounds the distinct failure kinds Report.Error() lists.
const maxFailureKinds = 8

// Error summarises the report in at most 1 KiB: the counts per
// disposition, each distinct failure as code, code name, shape and class
// with its count, the hint, and the last driver error's code. It never
// contains a document value, a key value, an errInfo value or a server
// message (they may quote document values); reach those through Outcomes
// and errors.As (the driver's error is Report.Err).
func (r *Report) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "writeguard: %s %s: ", r.Operation, r.Namespace)
	counts := r.Counts()
	keys := make([]string, 0, len(counts))
	for d := range counts {
		keys = append(keys, string(d))
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", counts[Disposition(k)], k)
		if Disposition(k) == DeadLetterFailed {
			b.WriteString(r.sinkFailures())
		}
	}
	if kinds := r.failureKinds(); len(kinds) > 0 {
		b.WriteString("; failures: ")
		b.WriteString(strings.Join(kinds, ", "))
	}
	if r.Hint != "" {
		fmt.Fprintf(&b, "; %s", r.Hint)
	}
	if fe := r.flood(); fe != nil {
		fmt.Fprintf(&b, "; not handled: dead-letter flood breaker open (%.0f%% of %d documents in %v)", 100*fe.Share, fe.Documents, fe.Window)
	}
	if fs := policy.Extract(r.Err); len(fs) > 0 {
		fmt.Fprintf(&b, "; last error: %s", engine.FailureKind(&fs[0]))
	}
	out := policy.ScrubValues(b.String())
	if len(out) > maxErrorLen {
		out = out[:maxErrorLen-3] + "..."
	}
	return out
}

// sinkFailures names why the sinks failed the dead_letter_failed inputs
// (engine.SinkError.Kind: code and class, no values): " (sink: 13
// Unauthorized, permanent)", the first distinct kind and how many others
// there are; "" when none says.
func (r *Report) sinkFailures() string {
	var first string
	more := 0
	seen := map[string]bool{}
	for i := range r.Outcomes {
		var se *engine.SinkError
		if r.Outcomes[i].Disposition != DeadLetterFailed || !errors.As(r.Outcomes[i].Err, &se) || seen[se.Kind] {
			continue
		}
		seen[se.Kind] = true
		if first == "" {
			first = se.Kind
		} else {
			more++
		}
	}
	switch {
	case first == "":
		return ""
	case more > 0:
		return fmt.Sprintf(" (sink: %s; +%d more)", first, more)
	}
	return " (sink: " + first + ")"
}

// failureKinds lists each distinct failure of the inputs not stored, with
// its class and count, in order of first appearance.
func (r *Report) failureKinds() []string {
	n := map[string]int{}
	var order []string
	for i := range r.Outcomes {
		o := &r.Outcomes[i]
		if o.Failure == nil || o.Disposition.Stored() {
			continue
		}
		k := engine.FailureKind(o.Failure) + " (" + o.Class.String() + ")"
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	out := make([]string, 0, min(len(order), maxFailureKinds)+1)
	for i, k := range order {
		if i == maxFailureKinds {
			out = append(out, fmt.Sprintf("+%d more kinds", len(order)-maxFailureKinds))
			break
		}
		out = append(out, fmt.Sprintf("%s x%d", k, n[k]))
	}
	return out
}

// ErrorType returns a bounded, low-cardinality description of why the call
// failed, for OpenTelemetry's error.type (semantic conventions, "Recording
// errors"): the server error code of the first input that did not end in a
// handled disposition ("11000"), else that failure's class ("transient",
// hooks.ErrorType), else that input's disposition when it has no failure
// ("not_attempted"); "dead_letter_flood" when every input is handled but
// the flood breaker made the call not Handled. It returns "" for a nil
// Report and for a handled one. It never returns error text or a Go type name.
func (r *Report) ErrorType() string {
	if r == nil {
		return ""
	}
	for i := range r.Outcomes {
		o := &r.Outcomes[i]
		if o.Disposition.Handled() {
			continue
		}
		if o.Failure != nil {
			return hooks.ErrorType(o.Failure.Code, o.Class)
		}
		return string(o.Disposition)
	}
	if r.flood() != nil {
		return "dead_letter_flood"
	}
	return ""
}

// Unwrap returns, for errors.Is and errors.As, in this order: the
// sentinels of the dispositions present; ErrConfiguration after a
// Configuration failure; the driver errors that explain the inputs that
// did not end handled, those of conflicts first, then in input order;
// writeguard's own handling errors of those inputs (a sink's, a conflict
// handler's, a read-back's); the call's errors that belong to no input (a
// context error, ErrUnacknowledged, a *FloodError); last, the driver
// errors and handling errors of the inputs that ended dead-lettered or
// resolved by the conflict handler. The driver errors of stored inputs
// (an attempt that failed before a later one wrote them) are left out,
// and each driver error appears once.
//
// So mongo.IsDuplicateKeyError(err), which inspects the first server error
// it finds, is true for a call where an input ended "conflict" on any
// attempt, and mongo.IsTimeout(err) and mongo.IsNetworkError(err) are true
// only when an input ended unhandled for that reason (or a handled
// input's own error says so). Report.Err keeps the driver's last error
// whatever it explains.
func (r *Report) Unwrap() []error {
	var out []error
	seen := map[error]bool{}
	for i := range r.Outcomes {
		if s := sentinel(r.Outcomes[i].Disposition); s != nil && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if r.Hint != "" {
		out = append(out, ErrConfiguration)
	}
	return r.appendCauses(out)
}

// Handled reports whether err leaves nothing for the caller to do: err is
// nil, or it is (or wraps) a *Report whose every input reached a handled
// disposition (written, already_written, dead_lettered, or a conflict
// handler's "conflict_<verb>" resolution). Any other error is not handled.
//
// While a dead-letter flood breaker is open (WithDeadLetterBreaker, off by
// default), a call that dead-letters is not handled: its documents are in
// the sink, but the share of dead letters says something upstream broke;
// errors.Is(err, ErrDeadLetterFlood) is then true and errors.As reaches
// the *FloodError with the share.
func Handled(err error) bool {
	if err == nil {
		return true
	}
	var r *Report
	if errors.As(err, &r) {
		return r.Handled()
	}
	return false
}
