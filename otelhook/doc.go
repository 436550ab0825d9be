// Package otelhook turns writeguard's lifecycle hooks into OpenTelemetry
// spans and metrics. New returns a hooks.Hooks; pass it to
// writeguard.WithHooks and every guarded method (InsertOne, InsertMany,
// BulkWrite, UpdateOne, UpdateByID, UpdateMany, ReplaceOne, DeleteOne,
// DeleteMany, FindOneAndUpdate, FindOneAndReplace, FindOneAndDelete) is
// traced as one client span with a child span per attempt and per
// dead-letter hand-off, and measured by the metrics below.
// ObserveDLQ measures a dead-letter collection's backlog,
// ReplayRecorder what replays did, and NewReplayHooks traces a replay's
// writes and counts them apart from the application's. The
// attempt span is in the context writeguard hands to the driver, so the
// driver's own command spans (otelmongo, or any CommandMonitor that reads
// the context) nest under the attempt that sent them.
//
//	h, err := otelhook.New(otelhook.WithTracerProvider(tp), otelhook.WithMeterProvider(mp))
//	if err != nil { ... }
//	orders, err := writeguard.Wrap(db.Collection("orders"), writeguard.WithHooks(h))
//
// The tracer and meter providers default to the global ones
// (otel.GetTracerProvider, otel.GetMeterProvider), read when New is
// called; nothing else global is used. otelhook never reads the
// environment: the OTEL_* variables are the SDK's business (the
// writeguard command's telemetry honours them).
//
// # Spans
//
// Every name below is in names.go, the one place the package spells
// them; CHANGELOG.md maps the names of earlier releases to these.
//
// # Conventions, and where each comes from
//
// Two sources describe a MongoDB client span: the stable database
// semantic conventions (schema 1.43.0; docs/db/database-spans.md and
// docs/db/mongodb.md of open-telemetry/semantic-conventions) and the
// MongoDB drivers' OpenTelemetry specification (mongodb/specifications,
// source/open-telemetry/open-telemetry.md), which a driver that traces
// natively follows: one "operation span" per driver operation, named
// "<operation> <db>.<collection>" ("insert shop.orders"), kind client,
// with db.operation.summary equal to the name, and a command span per
// server command nested under it. writeguard's operation span is not a
// driver operation: it wraps every driver call a guarded call makes (its
// retries, a bisection's halves, the read-backs), and each of those,
// once the driver traces natively, is a driver operation span of its own
// under writeguard's attempt span. The decisions:
//
//   - Span name: "<method> <db>.<collection>" ("insertMany shop.orders",
//     "findOneAndDelete shop.orders"; "<method> <collection>" when the
//     database is not known). The form, database included, is the
//     drivers' specification's ("Operation Span Name":
//     "driver_operation_name db.collection_name"), so traces of
//     writeguard and of the drivers read alike and a collection name in
//     two databases stays apart. The first word is the guarded method the
//     caller called (writeguard.method), not the driver operation's name
//     (the specification maps insertOne and insertMany to "insert",
//     findOneAndDelete to "findAndModify"): copying the driver's name
//     would give two client spans named "insert shop.orders", one inside
//     the other, for every call once the driver traces natively (three
//     after a retry), and a search by span name would count every call
//     twice. The drivers' specification names a bulkWrite "bulkWrite
//     admin" (the client-level bulkWrite runs against admin), never
//     "bulkWrite <db>.<collection>". This departs from the semantic
//     conventions' name ("{db.operation.name} {target}" with the
//     collection as target: "insert orders", the name of earlier
//     releases), which the drivers' specification departs from too; the
//     conventions allow it ("Semantic conventions for individual database
//     systems MAY specify different span name format").
//   - db.operation.summary: the span's name, as the drivers' specification
//     requires of an operation span ("Equivalent to span name",
//     required). The semantic conventions have no such attribute; their
//     db.query.summary summarises a query text writeguard never sees, and
//     is left to the command spans.
//   - db.operation.name: the server command the call sends — "insert"
//     (insertOne, insertMany), "update" (updateOne, updateByID,
//     updateMany, replaceOne), "delete", "findAndModify" — the value
//     both sources give (the semantic conventions' MongoDB page: "The
//     name of the MongoDB command being executed"; the drivers'
//     specification's operation names), so that metrics and queries
//     grouped by db.operation.name put writeguard's calls beside the
//     driver's operations. A batch (below) is "BATCH <command>" when every
//     model sends the same command ("BATCH update" for update and replace
//     models) and "bulkWrite", MongoDB's own term, when they mix
//     commands: the semantic conventions since 1.28 ("For batch
//     operations, if the individual operations would all have the same
//     db.operation.name when executed as non-batch operations, then that
//     operation name SHOULD be used prepended by BATCH. Otherwise,
//     db.operation.name SHOULD be BATCH or some other database system
//     specific term if more applicable"). The drivers' specification has
//     no batch prefix. The method is writeguard.method.
//   - db.operation.batch.size: only for a batch as the conventions define
//     it (two or more operations "explicitly submitted as separate
//     operations in a single client call"; "A database call is not a
//     batch operation solely because one operation accepts multiple
//     operands, such as ... documents"): a bulkWrite of two or more write
//     models. An InsertMany is one insert operation carrying many
//     documents: no batch size, no prefix.
//   - Kind: client, with the driver's command spans (also client) nested
//     under it — the drivers' specification: "Operation Span Kind: MUST
//     be client"; command spans "MUST be nested to the span for the
//     corresponding driver operation", one per retry; the conventions:
//     "Span kind SHOULD be CLIENT", and "it is RECOMMENDED to instrument
//     the higher-level convenience APIs" (writeguard's methods are one).
//     Backends that derive database call metrics from client spans
//     (service maps, RED dashboards) then count a call once for
//     writeguard's span and once per driver span under it:
//     WithSpanKind(trace.SpanKindInternal) makes writeguard's span
//     internal where that double count matters. Attempt and dead-letter
//     spans are internal: writeguard's own steps.
//   - Error status: only a call writeguard did not handle — its error is
//     not nil and writeguard.Handled(err) is false — gets status Error and
//     error.type (semantic conventions, "Recording errors": an error the
//     instrumented code handles is not the span's error). dead_lettered,
//     already_written and a conflict handler's conflict_<verb> are
//     handled: no error status, no error.type. An attempt whose failures
//     are verdicts on documents (class invalid or conflict: 121, 11000
//     write errors in a reply the server sent with ok: 1, whose driver
//     command span succeeds) has no error status either; an attempt that
//     failed transiently or with an unknown code has. No exception event
//     is recorded (the drivers' specification asks for exception.message):
//     an error's text may quote document values (see Privacy).
//   - A call that dead-letters while writeguard's dead-letter flood
//     breaker is open (writeguard.WithDeadLetterBreaker) is not handled:
//     status Error, error.type "dead_letter_flood" when nothing else is
//     unhandled, writeguard.flood_breaker.open = true and
//     writeguard.flood_breaker.share (the window's dead-lettered share),
//     a point of writeguard.dead_letter.flood, and a Warn log record at
//     most once a minute.
//   - A write that succeeded and matched no document (an update or
//     replace with MatchedCount 0 and no upsert, a delete with
//     DeletedCount 0, a findAndModify that found nothing:
//     hooks.OperationEnd.MatchedNothing) is written — the command did
//     what it was asked — with writeguard.no_match = true on its span and
//     its writeguard.call.inputs point.
//
// Operation span, one per guarded call, from OperationStarted to
// OperationFinished: named "<method> <db>.<collection>"
// ("insertMany shop.orders"), kind client (WithSpanKind), with the stable
// database semantic conventions (schema 1.43.0):
//
//   - db.system.name = "mongodb", db.namespace (the database name, when
//     known), db.collection.name, db.operation.name: the server command
//     (see above; for BulkWrite "insert", "update" or "delete" when the
//     caller of the hooks sets hooks.Operation.Command, BATCH-prefixed
//     for two or more models, "bulkWrite" for mixed commands);
//   - db.operation.summary: the span's name (the drivers' specification);
//   - writeguard.method: the guarded method called (insertOne,
//     insertMany, bulkWrite, updateOne, ..., findOneAndDelete);
//   - db.operation.batch.size, only for a bulkWrite of 2 or more models;
//   - server.address and server.port, only with WithServerAddress;
//   - writeguard.attempts (driver calls made), writeguard.retries (those
//     made after a backoff), writeguard.dead_lettered (inputs stored in a
//     dead-letter sink) and writeguard.conflicts (inputs that ended
//     "conflict" or a "conflict_<verb>" resolution) — the last two not
//     for a call inside a transaction, which routes nothing;
//   - for a single-input call, writeguard.disposition (the input's
//     terminal disposition, e.g. "written"); for a batch, one int
//     attribute per disposition present, writeguard.dispositions.<name>
//     (writeguard.dispositions.written = 998,
//     writeguard.dispositions.dead_lettered = 2);
//   - writeguard.no_match = true for a write that matched nothing;
//   - writeguard.in_transaction = true for a call inside a transaction;
//   - writeguard.replay = true for a replay's write (NewReplayHooks).
//
// Only a call that failed as a whole — its error is not nil and
// writeguard.Handled(err) (hooks.Handled) is false — gets status Error, error.type and,
// when the failure has a code, db.response.status_code (the code as a
// string, "11000"). error.type is what the call's error reports through
// an ErrorType() string method (a *writeguard.Report's: its first
// unhandled input's code, class, or disposition when it has no failure);
// without one, the failure's code, or its class ("transient") when it has
// no code, or "_OTHER" (hooks.ErrorType). Handled dispositions
// (dead_lettered, already_written, conflict_skipped, ...) are not errors.
// The status description names the unhandled dispositions ("unhandled: 1
// conflict"), never the error text.
//
// One event per scheduled retry on the operation span, writeguard.retry,
// with writeguard.attempt (the number the retry will have),
// writeguard.backoff (the wait before it, in seconds, a double),
// writeguard.documents (inputs re-sent), writeguard.class and
// db.response.status_code of the failure that caused it. A retry the
// retry budget refused adds a writeguard.budget_exhausted event
// (writeguard.documents, db.response.status_code).
//
// Attempt span, a child of the operation span per driver call, from
// AttemptStarted to AttemptFinished: named "<operation span name>
// attempt" ("insertMany shop.orders attempt"; the attempt number is an
// attribute, to keep span names low-cardinality), kind internal, with
// writeguard.attempt (from 1), writeguard.documents (documents or models
// sent) and writeguard.backoff (the backoff waited before it, in seconds,
// a double; 0 for the first). A failed attempt adds
// db.response.status_code (when the first failure has a code),
// writeguard.class, writeguard.failures (the number of failures in the
// reply); unless its class is invalid or conflict (verdicts writeguard
// routes to the dead-letter sink or the conflict handler), it also has
// error.type and status Error. The operation span says whether the call
// failed. A call inside a transaction has no attempt span: writeguard
// makes its one driver call before it reports anything.
//
// Dead-letter span, a child of the operation span per sink.Put, from
// DeadLetterStarted to DeadLetterFinished: named "<operation span name>
// dead_letter", kind internal, with writeguard.envelopes, writeguard.attempt
// (the sink attempt, from 1) and writeguard.fallback (true for the
// fallback sink). A failed Put has status Error, error.type (the sink
// error's code, or "_OTHER") and db.response.status_code when it has a
// code.
//
// Every span ends when OperationFinished runs, which writeguard
// guarantees, also when the call's context was cancelled.
//
// The hooks also set hooks.Hooks.TraceIDs: the dead-letter envelopes of a
// call carry the trace and span ids of its operation span, so a dead
// letter leads back to its trace.
//
// # Metrics
//
// Every metric carries db.system.name, db.namespace (when known),
// db.collection.name, db.operation.name and writeguard.method. No metric
// has a semantic-conventions name: the driver instrumentation records
// db.client.operation.duration per server command, and a guarded call
// (retries and backoff included) is another measure, so it has
// writeguard's own name.
//
//   - writeguard.call.duration (histogram, seconds; the buckets of
//     db.client.operation.duration: 0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
//     1, 5, 10): the guarded call's duration as writeguard's clock
//     measured it, retries and backoff waits included, plus
//     server.address/server.port when configured and, for a call that
//     failed as a whole, error.type and db.response.status_code.
//   - writeguard.call.inputs (counter, {input}): input documents or write
//     models by terminal disposition, with writeguard.disposition and,
//     for an input that failed, writeguard.class and
//     db.response.status_code; writeguard.no_match = true for a write
//     that matched nothing. Recorded when the call ends. Calls inside a
//     transaction have no dispositions.
//   - writeguard.call.attempts (histogram, {attempt}; buckets 1, 2, 3, 4,
//     5, 7, 10, 20, 50): driver calls per guarded call.
//   - writeguard.input.attempts (histogram, {attempt}; the same buckets):
//     times each input was sent (0 for not_attempted), recorded when its
//     call ends; its sum over its count is attempts per document.
//   - writeguard.unclassified (counter, {failure}): failures no classifier
//     rule matched, with db.response.status_code — one per input, or per
//     call inside a transaction. Such failures are never retried; this
//     counter, and a Warn log record at most once a minute per code (see
//     WithLogger), make them visible so a rule can be added.
//   - writeguard.budget.exhausted (counter, {refusal}): retries the retry
//     budget refused, with db.response.status_code of the failure that
//     asked; plus a Warn log record at most once a minute.
//   - writeguard.retry.delay (histogram, s; buckets 0.005 to 30): each
//     scheduled backoff wait, with writeguard.class and
//     db.response.status_code of the failure that caused the retry.
//   - writeguard.dead_letter.flood (counter, {call}): calls that
//     dead-lettered while the dead-letter flood breaker was open.
//   - writeguard.wire.commands (counter, {command}): the commands the
//     driver sent for guarded attempts as writeguard.Monitor saw them
//     (hooks.AttemptEnd.WireCommands: the driver's own retries included;
//     0 without the monitor on the client).
//   - writeguard.limit (gauge, {command}): the adaptive limit on the
//     driver calls a guarded collection has in flight
//     (writeguard.AdaptiveLimit), with db.system.name, db.namespace and
//     db.collection.name, recorded at each change: halved under overload,
//     raised by clean calls, 1 while a failover closes the collection to
//     one probing call.
//
// The backlog (ObserveDLQ, one poller per dead-letter collection, and
// ReplayRecorder), with db.system.name, db.namespace and
// db.collection.name of the dead-letter collection:
//
//   - writeguard.dlq.envelopes (gauge, {envelope}) by
//     writeguard.envelope.status (pending, replayed, discarded,
//     quarantined, other): the number of envelopes;
//   - writeguard.dlq.failing_keywords (gauge, {keyword}) by
//     writeguard.failing_keyword: the failing keywords of the pending
//     envelopes. An envelope with two keywords counts under each: the sum
//     over keywords is keywords, not envelopes (109 pending envelopes
//     may carry 110 keywords); count envelopes with
//     writeguard.dlq.envelopes{writeguard.envelope.status="pending"};
//   - writeguard.dlq.oldest_pending.age (gauge, s);
//   - writeguard.replay.envelopes (counter, {envelope}) by
//     writeguard.replay.outcome.
//
// The label values ObserveDLQ reads from the collection are bounded (the
// collection is writable by whoever writes the application's data):
// statuses outside envelope.Statuses and keywords beyond the
// WithMaxKeywords most frequent, or that do not look like keyword names,
// are "other".
//
// A replay's writes (NewReplayHooks) are counted in
// writeguard.replay.inputs (counter, {input}) by writeguard.disposition,
// never in writeguard.call.inputs or any other instrument above: a row a
// replay sends and the validator rejects again is the replay's
// still_invalid, not a failed input of the application.
//
// Through the OpenTelemetry Prometheus exporter these become
// writeguard_call_inputs_total, writeguard_call_duration_seconds,
// writeguard_call_attempts, writeguard_input_attempts,
// writeguard_retry_delay_seconds,
// writeguard_unclassified_total, writeguard_budget_exhausted_total,
// writeguard_dead_letter_flood_total, writeguard_wire_commands_total,
// writeguard_limit, writeguard_dlq_envelopes,
// writeguard_dlq_failing_keywords, writeguard_dlq_oldest_pending_age_seconds,
// writeguard_replay_envelopes_total and writeguard_replay_inputs_total
// (dots to underscores, _total on counters, _seconds for unit s, nothing
// for a unit in braces); deploy/prometheus/alerts.yml alerts on them.
//
// # Exemplars
//
// The synchronous instruments (every one above but the dlq gauges) are
// recorded with the call's context, which holds its operation span, so
// the OpenTelemetry SDK attaches exemplars to them by default: with the
// SDK's default exemplar filter, trace_based (sdkmetric.WithExemplarFilter,
// or OTEL_METRICS_EXEMPLAR_FILTER = always_on, always_off,
// trace_based), a measurement made while a sampled span is current keeps
// its value, time, trace id and span id as an exemplar (a histogram keeps
// one per bucket, a counter up to one per CPU). They lead from a point of
// writeguard.call.duration or writeguard.call.inputs to the trace of a
// call that made it. An exemplar carries nothing the point and the span
// do not (no document value). otelhook sets no filter of its own: pass
// sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter) to the meter
// provider to drop them. OTLP exports them; the Prometheus exporter
// serves them only in the OpenMetrics format.
//
// Attribute values come from bounded sets: names, codes, classes,
// dispositions. No document _id or other per-document value is recorded.
//
// # Privacy
//
// No span name, attribute, event, status description, metric attribute or
// log record carries a document value, an errInfo value or a duplicate
// key's keyValue: only codes, code names (in log records), classes,
// dispositions, counts and the names of the database, the collection and
// the operation. The hook events carry nothing more, and error texts —
// which may quote values ("dup key: { ssn: ... }") — are never recorded.
// There is therefore no option to capture document values: the hooks
// never see them.
package otelhook
