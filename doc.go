// Package writeguard makes MongoDB writes survive the real world.
//
// Swap a *mongo.Collection (driver v2) for the *Guarded that Wrap returns,
// and every write method (InsertOne, InsertMany, BulkWrite, UpdateOne,
// UpdateByID, UpdateMany, ReplaceOne, DeleteOne, DeleteMany,
// FindOneAndUpdate, FindOneAndReplace, FindOneAndDelete: the Collection
// interface) goes through a fixed chain:
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
// caller to do — false also for a call that dead-letters while the
// dead-letter flood breaker (WithDeadLetterBreaker, off by default) is
// open: its documents are parked, but the share of dead letters says
// something upstream broke. Inside a transaction writeguard makes one attempt and
// returns the driver's error unchanged, so the transaction can be retried
// as a whole.
//
// # Which writes are idempotent
//
// A write is idempotent when applying it twice leaves the collection as
// applying it once does. writeguard cannot read that off a model: it
// depends on the filter as well as the update. After a failure that may
// have applied a write (a lost reply, a timeout after sending, an
// interrupted command, a retryable write concern error: policy.ReplyShapes),
// writeguard re-sends an update, replace or delete only when the caller
// marked it idempotent (WithIdempotent for every write of a call,
// IdempotentModels for some models); otherwise it ends unknown (or
// written_unconfirmed after a write concern error). The driver's own
// retryable-write retry is deduplicated by the server (lsid, txnNumber);
// writeguard's re-send is a new command and is not.
//
// Idempotent, safe to mark:
//   - $set, $unset, $setOnInsert, $min, $max, $addToSet of constants, with a
//     filter the update cannot change (by _id, or on fields the update does
//     not write): {_id: 7} / {$set: {status: "paid"}};
//   - a replace by _id or by a field the replacement keeps;
//   - an upsert whose filter the upserted document still matches;
//   - a delete by _id or unique key (DeleteOne, FindOneAndDelete), and a
//     DeleteMany whose filter no new document can match meanwhile.
//
// Not idempotent, never mark:
//   - $inc, $mul, $push, $pop, $pull of a position, $currentDate, $rename;
//   - an update pipeline reading the old value ([{$set: {n: {$add: ["$n", 1]}}}]);
//   - any update whose filter names a field the update changes
//     ({status: "new"} / {$set: {status: "sent"}} selects another
//     document the second time, for UpdateOne and DeleteOne alike);
//   - DeleteOne by a non-unique filter (the second run deletes another
//     document), FindOneAndUpdate or FindOneAndDelete with a sort over a set
//     the first run changed.
//
// Inserts never need marking: writeguard assigns their _id before the
// first attempt, so a re-sent insert meets a duplicate key on its own _id
// and is read back (already_written) instead of being stored twice.
//
// # Attempts the driver hides
//
// With retryable writes on (the driver's default), one driver call can be
// several attempts, and the driver's error describes its last one only: a
// deadline before a retry's send, a cleared pool at its checkout or an
// overload reply labelled NoWritesPerformed can follow an earlier attempt
// that was applied. writeguard reads such an error as "not sent" only when
// no earlier attempt could have been sent (a multi statement, a
// standalone, WithDriverRetryWrites(false)); otherwise the write may have
// been applied. Monitor, set on the client, reads every attempt from the
// wire instead (policy.ReplyShape.Hidden has each rule with the driver's
// lines; the README's "Proof rules" sums them up).
//
// # Finishing a call
//
// Report.Remaining returns the inputs of a call that ended unknown,
// exhausted, not_attempted or dead_letter_failed, with the _ids writeguard
// assigned, ready to pass to the same method again with Remaining.Context;
// what could be applied twice is left out and listed with why
// (ExampleReport_Remaining; its doc has the table per disposition). What
// the call asks of its target to decide this (a unique _id, limits) is
// asked on a bounded context of its own, never on an expired one.
//
// The loop itself is in internal/engine (its package doc maps it); this
// package is its face: the collection, one write skeleton every guarded
// method fills (it describes each call to the engine in one value and runs
// it once), the options, the dead-letter flood breaker, the Report with its
// own types (Reason, PanicError) and the conflict API.
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
