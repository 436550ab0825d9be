package policy

import "strings"

// Disposition is the terminal outcome of one input document or write
// model. Every input ends with exactly one.
type Disposition string

// The dispositions writeguard assigns. A conflict handler may name its own
// resolutions "conflict_<verb>" (see writeguard.ConflictHandler).
const (
	// Written: acknowledged by the server.
	Written Disposition = "written"
	// AlreadyWritten: an earlier attempt of this call was applied although
	// its reply was lost; found by reading the stored document back after
	// a duplicate key on the _id this call sent.
	AlreadyWritten Disposition = "already_written"
	// WrittenUnconfirmed: applied on the primary, but the write concern
	// was not satisfied (a writeConcernError). Not re-sent on its own.
	WrittenUnconfirmed Disposition = "written_unconfirmed"
	// DeadLettered: stored in the dead-letter sink (or its fallback).
	DeadLettered Disposition = "dead_lettered"
	// DeadLetterFailed: invalid, and the dead-letter sink failed too. The
	// original document is in the caller's Report.
	DeadLetterFailed Disposition = "dead_letter_failed"
	// Conflicted: a duplicate key the conflict handler did not resolve;
	// the caller gets the duplicate-key error.
	Conflicted Disposition = "conflict"
	// ConflictSkipped: a duplicate key the conflict handler chose to skip.
	ConflictSkipped Disposition = "conflict_skipped"
	// ConflictReplaced: the conflict handler replaced the stored document
	// that held the conflicting key.
	ConflictReplaced Disposition = "conflict_replaced"
	// Failed: an unknown or permanent failure (never retried) that left
	// the document not applied, or a client-side error (never sent).
	Failed Disposition = "failed"
	// Exhausted: every attempt proved the document not applied (transient
	// failures), until the attempts, the elapsed time, the retry budget or
	// the context ran out. Never a document that may have been applied.
	Exhausted Disposition = "exhausted"
	// NotAttempted: never sent, because an ordered write stopped earlier
	// or the call was aborted.
	NotAttempted Disposition = "not_attempted"
	// OutcomeUnknown: an attempt may have applied the document (a lost
	// reply, a deadline during flight, a write error that proves nothing)
	// and nothing resolved it: not re-sendable (a non-idempotent model), or
	// its read-back found nothing or failed when the call stopped. The
	// Outcome has MaybeWritten.
	OutcomeUnknown Disposition = "unknown"
	// Unacknowledged: sent with an unacknowledged write concern (w: 0);
	// the server reported nothing, so nothing is claimed.
	Unacknowledged Disposition = "unacknowledged"
)

// Handled reports whether the disposition needs nothing more from the
// caller: written, already_written, dead_lettered, unacknowledged (sent
// with w: 0: nothing can prove more, and a re-send may store a copy) and
// every conflict handler resolution named "conflict_<verb>". Conflicted
// itself ("conflict") and every failure are not handled.
func (d Disposition) Handled() bool {
	switch d {
	case Written, AlreadyWritten, DeadLettered, Unacknowledged:
		return true
	}
	return d.IsConflict() && d != Conflicted
}

// IsConflict reports whether the disposition is about a duplicate key:
// "conflict" itself or a conflict handler's "conflict_<verb>" resolution.
func (d Disposition) IsConflict() bool {
	return d == Conflicted || strings.HasPrefix(string(d), "conflict_")
}

// Stored reports whether the document is in the target collection as far
// as the server told us: written, already_written or written_unconfirmed.
func (d Disposition) Stored() bool {
	return d == Written || d == AlreadyWritten || d == WrittenUnconfirmed
}
