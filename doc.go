// Package writeguard makes MongoDB writes survive the real world.
//
// Swap a *mongo.Collection (driver v2) for the *Guarded that Wrap returns,
// and every InsertOne, InsertMany and BulkWrite goes through a fixed chain:
//
//	prepare   marshal each document once; give it an _id if it has none
//	attempt   call the driver
//	extract   split the error into failures, one per document or model
//	          (policy.Extract)
//	classify  read the error code and labels (policy.Classifier)
//	route     transient  -> backoff with jitter, re-send only those documents
//	          throttled  -> wait what the server asked, then re-send
//	          invalid    -> dead-letter sink (envelope.Sink), never retried
//	          conflict   -> ConflictHandler (duplicate keys)
//	          unknown    -> fail loudly, never retried
//	report    one terminal Disposition per input document (Report)
//
// The promises: nothing is lost (every input ends with exactly one
// disposition, and the documents that were not written are in the
// Report), nothing is written twice (ids are fixed before the first
// attempt; a duplicate key after a lost reply is resolved by reading the
// stored document back), and a bad document never starts a retry storm
// (deterministic failures are never retried; retries share a budget).
//
// A call that writes everything returns exactly what the driver returns.
// Otherwise it returns a *Report: errors.Is tells which dispositions
// occurred (ErrDeadLettered, ErrConflict, ...), errors.As still reaches the
// driver's error, and Handled tells whether anything is left for the
// caller to do. Inside a transaction writeguard makes one attempt and
// returns the driver's error unchanged, so the transaction can be retried
// as a whole.
//
// The loop itself is in internal/engine (its package doc maps it); this
// package is its face: the collection, one write skeleton every guarded
// method fills, the options, the Report and the conflict API.
//
// One rule for nil, in every package of the module: an option whose
// feature can be absent takes nil as "none" (WithLogger(nil): no logging,
// WithBudget(nil): no retry budget, otelhook.WithLogger(nil): no logging;
// otelhook's providers are optional too, and nil there is OpenTelemetry's
// global provider, their default); an option that cannot work without its
// value (WithDeadLetter, WithFallbackDeadLetter, WithClassifier, WithTable,
// WithConflictHandler, WithClock, replay.WithValidator) makes Wrap (or the
// package's constructor) return an error naming it. Nothing is logged
// unless a logger is given.
//
// Hooks (package hooks) observe every step; package otelhook turns them
// into OpenTelemetry spans and metrics. Package mocks has an in-memory
// Fake collection and real driver error values for tests.
package writeguard
