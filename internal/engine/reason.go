package engine

import "strconv"

// Reason says why an input ended without being stored or handled: why its
// retries stopped, or why it was never retried (Result.Reason). The root
// lifts each into its own writeguard.Reason of the same name, in
// Outcome.Reason. ReasonNone for inputs stored or handled.
type Reason uint8

// The reasons.
const (
	// ReasonNone: stored (written, already_written, written_unconfirmed)
	// or handled (dead-lettered, a conflict handler's resolution), or a
	// conflict the handler left unresolved: the disposition says it all.
	ReasonNone Reason = iota
	// ReasonAttemptsSpent: its attempts reached the limit of its class.
	ReasonAttemptsSpent
	// ReasonMaxElapsed: the next wait would have ended past the call's
	// Backoff.MaxElapsed.
	ReasonMaxElapsed
	// ReasonBudgetRefused: the retry budget refused the retry.
	ReasonBudgetRefused
	// ReasonDeadline: the context ended, or its deadline was too close for
	// the next wait.
	ReasonDeadline
	// ReasonOrderedStop: an ordered write stopped at an earlier input that
	// ended unhandled.
	ReasonOrderedStop
	// ReasonConfiguration: a configuration failure ended the call.
	ReasonConfiguration
	// ReasonNotSent: it never left the client (a client-side error).
	ReasonNotSent
	// ReasonNotRetried: its failure's class is never retried (unknown,
	// configuration; invalid, when no dead-letter sink is set).
	ReasonNotRetried
	// ReasonNotResendable: an attempt may have applied it, and it may not
	// be sent again (a non-idempotent update, an insert where _id is not
	// unique).
	ReasonNotResendable
	// ReasonSinkFailed: invalid, and no dead-letter sink stored it.
	ReasonSinkFailed
)

// String returns the reason's name as reports, logs and metrics show it:
// "", attempts_spent, max_elapsed, budget_refused, deadline, ordered_stop,
// configuration, not_sent, not_retried, not_resendable, sink_failed.
func (r Reason) String() string {
	names := [...]string{"", "attempts_spent", "max_elapsed", "budget_refused", "deadline", "ordered_stop",
		"configuration", "not_sent", "not_retried", "not_resendable", "sink_failed"}
	if int(r) < len(names) {
		return names[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Reason returns the Reason of a stop.
func (s StopReason) Reason() Reason {
	switch s {
	case StopAttempts:
		return ReasonAttemptsSpent
	case StopElapsed:
		return ReasonMaxElapsed
	case StopBudget:
		return ReasonBudgetRefused
	case StopContext:
		return ReasonDeadline
	case StopOrdered:
		return ReasonOrderedStop
	}
	return ReasonConfiguration
}
