package engine

import "strconv"

// Reason says why an input ended without being stored or handled: why its
// retries stopped, or why it was never retried (Result.Reason). The root
// lifts each into its own writeguard.Reason of the same name, in
// Outcome.Reason. ReasonNone for inputs stored or handled.
type Reason uint8

// The reasons, each with where the engine gives it. The root's
// writeguard.Reason has the same list, in the same order, with what each
// means to the caller.
const (
	ReasonNone          Reason = iota // stored or handled, or a conflict the handler left (Result.Reason)
	ReasonAttemptsSpent               // giveUp, StopAttempts: scheduleRetry (AttemptLimit)
	ReasonMaxElapsed                  // giveUp, StopElapsed: scheduleRetry
	ReasonBudgetRefused               // giveUp, StopBudget: scheduleRetry
	ReasonDeadline                    // giveUp, StopContext: run, scheduleRetry's wait
	ReasonOrderedStop                 // giveUp, StopOrdered: stopOrdered
	ReasonConfiguration               // giveUp, StopConfiguration: route
	ReasonNotSent                     // Route (never left the client), routePrefailed
	ReasonNotRetried                  // Route (a class never retried), park without a sink
	ReasonNotResendable               // Route, AfterReadBackNoUniqueID, readBackAll: maybe applied, not re-sent
	ReasonSinkFailed                  // deadLetter: no sink stored the envelope
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
