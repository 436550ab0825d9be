package envelope

// StatusQuarantined: an envelope whose replay failed too often (package
// replay, WithQuarantineAfter: replay_failures reached the limit). Replay
// skips it unless told to include it (replay.WithIncludeQuarantined,
// "dlq replay --include-quarantined"); a recapture of its payload by a
// sink puts it back to pending, keeping replay_failures, so one more
// failed replay quarantines it again.
const StatusQuarantined = "quarantined"

// Fields package replay keeps in an envelope besides those of Envelope
// (stored names; package replay reads and writes them).
const (
	// FieldReplayFailures counts the replays of the envelope that were
	// tried and failed (rejected again, a conflict, an error of the
	// target): an int, absent before the first failure.
	FieldReplayFailures = "replay_failures"
	// FieldReplayReason says why the envelope is not replayed: the
	// outcome of its last replay ("still_invalid: 121
	// DocumentValidationFailure", "refused: ...", "held: ...",
	// "quarantined: ..."), codes and names only, never document values.
	// Removed when a replay writes it.
	FieldReplayReason = "replay_reason"
	// FieldReplayHold is set (to the reason:
	// "in_flight_when_runner_died" or "write_outcome_unknown") on a
	// pending envelope that replay will not run again by itself: an
	// update, replace or delete whose replay was in flight when its runner
	// died, or failed without saying whether it was applied, so that
	// whether the target applied it is unknown. An operator checks the target, then
	// discards the envelope or replays it deliberately
	// (replay.WithIncludeHeld, "dlq replay --include-held").
	FieldReplayHold = "replay_hold"
)
