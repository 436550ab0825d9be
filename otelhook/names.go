package otelhook

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// This file holds every name otelhook emits: instruments, attribute keys,
// span event names. Nothing else in the package spells one. The
// writeguard.* names are writeguard's own; the others are the stable
// database semantic conventions' (schema 1.43.0), used with their
// semantic-conventions meaning. TestNoForeignNameCollision checks that no
// writeguard name is also a semantic-conventions or otelmongo name.
//
// CHANGELOG.md maps the names of earlier versions to these.

// Instrument names. Units are in the instruments' unit field, never in
// their names (OpenTelemetry metric naming guidelines).
const (
	// MetricCallDuration is the guarded call's duration, in seconds, from
	// the call to its return, retries and backoff waits included
	// (histogram, unit "s"). It is deliberately not
	// db.client.operation.duration, which the driver instrumentation
	// records per server command.
	MetricCallDuration = "writeguard.call.duration"
	// MetricCallAttempts is the number of driver calls per guarded call
	// (histogram, unit "{attempt}").
	MetricCallAttempts = "writeguard.call.attempts"
	// MetricInputAttempts is the number of times each input document or
	// write model was sent, recorded when its call ends (histogram, unit
	// "{attempt}").
	MetricInputAttempts = "writeguard.input.attempts"
	// MetricCallInputs counts input documents or write models by terminal
	// disposition (counter, unit "{input}").
	MetricCallInputs = "writeguard.call.inputs"
	// MetricUnclassified counts failures no classifier rule matched
	// (counter, unit "{failure}").
	MetricUnclassified = "writeguard.unclassified"
	// MetricBudgetExhausted counts retries the retry budget refused
	// (counter, unit "{refusal}").
	MetricBudgetExhausted = "writeguard.budget.exhausted"
	// MetricRetryDelay is the backoff wait before each retry, as
	// scheduled, in seconds (histogram, unit "s").
	MetricRetryDelay = "writeguard.retry.delay"
	// MetricDeadLetterFlood counts calls that dead-lettered while the
	// dead-letter flood breaker was open, and so are not handled
	// (counter, unit "{call}").
	MetricDeadLetterFlood = "writeguard.dead_letter.flood"
	// MetricWireCommands counts the commands the driver sent for guarded
	// attempts as writeguard's command monitor saw them
	// (hooks.AttemptEnd.WireCommands: the driver's hidden retries
	// included; nothing without writeguard.Monitor on the client)
	// (counter, unit "{command}"). Compare it with the attempts of
	// MetricCallAttempts to see the driver's own retries.
	MetricWireCommands = "writeguard.wire.commands"

	// MetricLimit is the adaptive limit of a guarded collection on the
	// driver calls it has in flight (writeguard.AdaptiveLimit), recorded at
	// each change: halved under overload, raised by clean calls, 1 while a
	// failover closes the collection to one probing call (gauge, unit
	// "{command}").
	MetricLimit = "writeguard.limit"
	// MetricDLQEnvelopes is the number of envelopes in a dead-letter
	// collection by status (gauge, unit "{envelope}"; ObserveDLQ).
	MetricDLQEnvelopes = "writeguard.dlq.envelopes"
	// MetricDLQFailingKeywords is the number of failing keywords of the
	// pending envelopes of a dead-letter collection, by keyword (gauge,
	// unit "{keyword}"; ObserveDLQ). An envelope with two failing keywords
	// counts once under each, so its sum over keywords counts keywords,
	// not envelopes: the pending envelopes are MetricDLQEnvelopes with
	// writeguard.envelope.status "pending".
	MetricDLQFailingKeywords = "writeguard.dlq.failing_keywords"
	// MetricDLQOldestPendingAge is the age of the oldest pending envelope
	// of a dead-letter collection, in seconds (gauge, unit "s";
	// ObserveDLQ).
	MetricDLQOldestPendingAge = "writeguard.dlq.oldest_pending.age"
	// MetricReplayEnvelopes counts envelopes a replay run tried, by
	// outcome (counter, unit "{envelope}"; ReplayRecorder).
	MetricReplayEnvelopes = "writeguard.replay.envelopes"
	// MetricReplayInputs counts the inputs of a replay's guarded writes
	// by terminal disposition (counter, unit "{input}"; the hooks of
	// NewReplayHooks), the replay's own count where the application's
	// writes are counted in MetricCallInputs.
	MetricReplayInputs = "writeguard.replay.inputs"
)

// writeguard attribute keys.
const (
	// keyMethod is the guarded method called, as the driver's CRUD API
	// names it (hooks.Operation.Name: insertOne, insertMany, bulkWrite,
	// updateOne, ..., findOneAndDelete); db.operation.name holds the
	// server command.
	keyMethod      = attribute.Key("writeguard.method")
	keyDisposition = attribute.Key("writeguard.disposition")
	// prefixDispositions prefixes the per-disposition counts of a batch's
	// operation span: writeguard.dispositions.<disposition>.
	prefixDispositions = "writeguard.dispositions."
	keyAttempts        = attribute.Key("writeguard.attempts")
	keyRetries         = attribute.Key("writeguard.retries")
	keyDeadLettered    = attribute.Key("writeguard.dead_lettered")
	keyConflicts       = attribute.Key("writeguard.conflicts")
	keyInTransaction   = attribute.Key("writeguard.in_transaction")
	keyAttempt         = attribute.Key("writeguard.attempt")
	keyDocuments       = attribute.Key("writeguard.documents")
	// keyBackoff is a backoff wait in seconds (a double).
	keyBackoff   = attribute.Key("writeguard.backoff")
	keyClass     = attribute.Key("writeguard.class")
	keyFailures  = attribute.Key("writeguard.failures")
	keyEnvelopes = attribute.Key("writeguard.envelopes")
	keyFallback  = attribute.Key("writeguard.fallback")
	// keyFlood is true on the operation span of a call that dead-lettered
	// while the dead-letter flood breaker was open; keyFloodShare is the
	// breaker window's dead-lettered share then (a double in [0, 1]).
	// (Not writeguard.dead_letter.flood.*: that is the instrument's name.)
	keyFlood      = attribute.Key("writeguard.flood_breaker.open")
	keyFloodShare = attribute.Key("writeguard.flood_breaker.share")
	// keyEnvelopeStatus is an envelope's status (pending, replayed,
	// discarded, ...); keyFailingKeyword one of its failing_keywords;
	// keyReplayOutcome what a replay did with an envelope.
	keyEnvelopeStatus = attribute.Key("writeguard.envelope.status")
	keyFailingKeyword = attribute.Key("writeguard.failing_keyword")
	keyReplayOutcome  = attribute.Key("writeguard.replay.outcome")
	// keyNoMatch is true on the operation span and the
	// writeguard.call.inputs points of a write that succeeded and matched
	// no document (hooks.OperationEnd.MatchedNothing).
	keyNoMatch = attribute.Key("writeguard.no_match")
	// keyReplay is true on the operation span of a replay's write
	// (NewReplayHooks).
	keyReplay = attribute.Key("writeguard.replay")
)

// The MongoDB drivers' OpenTelemetry specification's attribute
// (mongodb/specifications, source/open-telemetry/open-telemetry.md,
// "Operation Span Attributes"), with its meaning there: equal to the
// operation span's name. The semantic conventions (1.43) have no such
// key; their db.query.summary summarises a query, which writeguard does
// not see.
const keyDBOperationSummary = attribute.Key("db.operation.summary")

// Semantic-conventions attribute keys otelhook sets, with their
// semantic-conventions meaning.
const (
	keyDBSystemName     = semconv.DBSystemNameKey         // "mongodb"
	keyDBNamespace      = semconv.DBNamespaceKey          // the database name
	keyDBCollectionName = semconv.DBCollectionNameKey     // the collection name
	keyDBOperationName  = semconv.DBOperationNameKey      // the server command (insert, update, delete, findAndModify), BATCH-prefixed for a batch
	keyDBBatchSize      = semconv.DBOperationBatchSizeKey // inputs of a call with 2 or more
	keyDBStatusCode     = semconv.DBResponseStatusCodeKey // the server error code, as a string
	keyErrorType        = semconv.ErrorTypeKey            // the failure's code, class, or _OTHER
	keyServerAddress    = semconv.ServerAddressKey        // WithServerAddress's host
	keyServerPort       = semconv.ServerPortKey           // WithServerAddress's port
)

// Span event names.
const (
	eventRetry           = "writeguard.retry"
	eventBudgetExhausted = "writeguard.budget_exhausted"
)

// Span name suffixes of the child spans: "<operation span name> attempt",
// "<operation span name> dead_letter".
const (
	suffixAttempt    = " attempt"
	suffixDeadLetter = " dead_letter"
)

// Instruments lists the name of every instrument the hooks New returns
// create.
func Instruments() []string {
	return []string{MetricCallDuration, MetricCallAttempts, MetricInputAttempts, MetricCallInputs, MetricUnclassified,
		MetricBudgetExhausted, MetricRetryDelay, MetricDeadLetterFlood, MetricWireCommands, MetricLimit}
}

// BacklogInstruments lists the name of every instrument of the dead-letter
// backlog: ObserveDLQ's gauges and ReplayRecorder's counter.
// (NewReplayHooks's counter is ReplayInstruments'.)
func BacklogInstruments() []string {
	return []string{MetricDLQEnvelopes, MetricDLQFailingKeywords, MetricDLQOldestPendingAge, MetricReplayEnvelopes}
}

// ReplayInstruments lists the name of every instrument the hooks
// NewReplayHooks returns create.
func ReplayInstruments() []string {
	return []string{MetricReplayInputs}
}

// AttributeKeys lists every attribute key otelhook sets on a span, a span
// event or a metric point. The per-disposition span attributes are listed
// by their prefix, "writeguard.dispositions." (with the trailing dot).
func AttributeKeys() []string {
	keys := []attribute.Key{
		keyMethod, keyDisposition, keyAttempts, keyRetries, keyDeadLettered, keyConflicts,
		keyInTransaction, keyAttempt, keyDocuments, keyBackoff, keyClass, keyFailures,
		keyEnvelopes, keyFallback, keyFlood, keyFloodShare, keyEnvelopeStatus, keyFailingKeyword, keyReplayOutcome,
		keyNoMatch, keyReplay,
		keyDBSystemName, keyDBNamespace, keyDBCollectionName, keyDBOperationName, keyDBOperationSummary, keyDBBatchSize,
		keyDBStatusCode, keyErrorType, keyServerAddress, keyServerPort,
	}
	out := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		out = append(out, string(k))
	}
	return append(out, prefixDispositions)
}

// SpanEvents lists the name of every span event otelhook adds.
func SpanEvents() []string {
	return []string{eventRetry, eventBudgetExhausted}
}
