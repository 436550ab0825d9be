// Package replay drains a writeguard dead-letter collection (DLQ) after the
// cause of the rejections is fixed: the target collection's validator was
// widened, or the producer now sends valid documents and the backlog was
// corrected. Run reads pending envelopes in batches, writes each one's
// original through a target collection, and records the outcome in the
// envelope:
//
//   - written: status replayed, replayed_at set;
//   - rejected again by validation (121, or the envelope's own code): back
//     to pending with attempts + 1 and last_seen now (the same envelope,
//     not a new one);
//   - a duplicate key on an _id already holding this payload: replayed (an
//     earlier run, or a crashed one, wrote it);
//   - any other duplicate key: a conflict, left pending;
//   - any other failure: left pending for the next run;
//   - refused (see What replay writes): left pending, not sent;
//   - held (see Writes in flight): left pending, not sent, for an
//     operator.
//
// Every envelope tried also gets replay_run and replay_tried_at (see
// Concurrent runners), and every one not written a replay_reason saying
// why, with codes and names only ("still_invalid: 121
// DocumentValidationFailure", "refused: deleteMany not allowed ...",
// "held: in_flight_when_runner_died"); a written one loses it. So each
// envelope ends replayed, pending with a recorded reason, or quarantined.
//
// # Quarantine
//
// A failed replay of an envelope (rejected again, a conflict, a write
// error of the target for it; not an error of the whole command, such as
// a network error, which says nothing of the envelope) adds one to its
// replay_failures (envelope.FieldReplayFailures). When that count reaches
// WithQuarantineAfter (DefaultQuarantineAfter, 5), the envelope becomes
// quarantined (envelope.StatusQuarantined): later runs skip it, dlq.Stats
// counts it (dlq.Summary.Quarantined), and Result.Quarantined counts those a
// run quarantined (for a metric). WithIncludeQuarantined tries them again
// deliberately. Refusals, skips and holds are not tries and count
// nothing.
//
// An original too large to be stored with its envelope is kept whole, in
// pieces (envelope.Envelope.OriginalPieces): Run reassembles it
// (dlq.ReadOriginal) and replays it; one whose pieces are missing or do
// not match its SHA-256 is skipped with the reason. Envelopes whose
// original was truncated (stored by earlier versions), or redacted by the
// sink's hook (unless WithRedacted), are skipped: their original is not
// the payload that was rejected. So are envelopes with
// withheld fields (fields the server refused for not being encrypted,
// envelope.Envelope.Withheld) unless WithWithheldValues supplies the
// complete original: a replay never writes a document with a field
// silently missing.
//
// # What is sent
//
// Envelopes are read with envelope.Decode (every format; originals kept as
// exact bytes included) and each is rebuilt into the write that was
// rejected: an insert of its original's bytes, or, from format 2, the
// update, replace or delete model with every option it had
// (envelope.ParseModel: arrayFilters, collation, hint, upsert, sort),
// sent with its call's bypassDocumentValidation, let and comment
// (envelope.ParseCallOptions); envelopes with different call options go
// in different BulkWrites. Envelopes of format 1 lost their models'
// options when they were stored; they are replayed with what they kept.
//
// # Widening a validator first
//
// WidenValidator gives the target a wider validator before a replay. At
// validationLevel "validated" (MongoDB 8.3+; LevelValidated) the server
// takes a validator change only together with a downgrade to strict and
// never sets the level again on an existing collection: WidenValidator
// sends the two together and says so, and WidenAdvice says what to run by
// hand.
//
// # Idempotence and crash safety
//
// Each batch is one write to the target (an unordered BulkWrite of
// insertOne models, or of the update/replace/delete models of bulkWrite
// envelopes), then one unordered bulk update of the DLQ marking the
// outcomes. An insert carries the original's _id, so it can happen once
// only: a crash between the two writes leaves the envelope pending with
// its document already in the target, and the next run meets a duplicate
// key on that _id, reads the stored document, finds it equal (or the _id
// was assigned by writeguard, so no one else can hold it) and marks the
// envelope replayed. Running Run again after a complete run does nothing.
//
// # Writes in flight
//
// Update, replace and delete models have no such guard: run twice, $inc
// and $push apply twice. So just before sending them the runner takes
// their send tokens (Lease.InFlight: see Fencing), and deletes them only
// after the envelopes are marked. A runner that dies (or loses the DLQ)
// between the two leaves its send tokens behind; the runner that next
// claims such an envelope, finding no try of it recorded since the token,
// cannot know whether the target applied the write, and does not run it
// again: it holds the envelope (pending, replay_hold
// "in_flight_when_runner_died", counted in Result.Held and
// dlq.Summary.Held). An operator checks the target, then discards the
// envelope or replays it with WithIncludeHeld. The same holds for an
// update, replace or delete whose write failed in a way that does not say
// whether it was applied (policy.Failure.Ambiguous: the connection lost
// after sending, a timeout or an interruption after sending, a write
// concern error): held with replay_hold "write_outcome_unknown". Inserts
// need no hold: their _id makes a second write a duplicate key,
// recognised as above.
//
// # Concurrent runners
//
// Several runners may drain one DLQ at once: WithWorkers(n) runs n in one
// Run, and several processes may call Run on the same DLQ. Each batch is
// claimed before it is written: the runner reads the next candidate _ids,
// and for each inserts a Lease in the lease collection (the DLQ's name +
// LeaseCollectionSuffix, or WithLeaseCollection) with the _id
// "<envelope key>.<n>", n one more than the latest slot on record, and an
// expiry WithLease ahead. The unique _id makes the claim atomic on every
// server: of two runners claiming one envelope, one insert is stored and
// the other meets a duplicate key. A conditional update of the envelope
// would be atomic on MongoDB but not on servers that run updates as an
// unlocked read-modify-write (FerretDB v1 loses concurrent $inc updates of
// one document), hence the separate collection. After the claim the
// runner reads the envelopes it won that the filter still selects (another
// runner may have just replayed one), replays and marks them as above,
// and deletes its leases; while it works it renews them (Until a lease
// ahead, every third of the lease), so a live runner keeps its claims
// however slow its batch. A runner that stops without deleting them (a
// crash, a pause, a lost connection) leaves them to expire: a runner
// meeting a live lease waits and looks again until it can claim the
// envelope or the envelope is done, so Run returns only when no selected
// envelope is held by anyone. A runner that takes an envelope over deletes
// the earlier slots (those taken before its claim) once it has marked it.
//
// # Fencing
//
// A claim can be lost without its runner knowing: the runner was paused
// past its lease (a stopped process, a long garbage collection, WithRate
// or a WithWithheldValues callback that took long before the renewals
// could run), or an operator edited the lease collection. So an update,
// replace or delete is sent only after two checks, in this order:
//
//  1. The send token: the runner inserts slot n+1 of the envelope's
//     sequence, its claim being slot n, with InFlight set. A runner that
//     took the claim over inserted slot n+1 as its own claim, so the
//     token's insert meets a duplicate key: the claim is lost. The check
//     and the "in flight" mark are one write, atomic on every server.
//  2. The record: a slot is free again once every slot of its envelope
//     was deleted (another runner finished it, an operator cleaned up),
//     so a token can be won late. The runner then reads the envelope's
//     slots (none after its token, no other send token taken since its
//     claim) and the envelope itself (its replay_tried_at, status and
//     replay_hold as it read them after the claim: nobody tried it since).
//
// An envelope whose claim was lost is left to its new owner: not sent,
// not marked, its token deleted, counted in Result.LeasesLost and listed
// in Problems (outcome "lost"). Once its token is stored and checked, the
// write is the runner's alone until it marks the envelope: a runner that
// meets the token holds the envelope rather than send it (Writes in
// flight). Inserts are not fenced: their _id makes a second write a
// duplicate key, recognised as written.
//
// # Clocks
//
// A lease's times (ClaimedAt, Until) and every time a runner records in
// the DLQ (replay_tried_at, replayed_at, discarded_at) are the server's:
// the runner reads hello's localTime at the start and before each claim
// (at most every half lease, 30 s at most), and adds the offset to its own
// clock. Runners on hosts whose clocks differ thus agree on when a lease
// expires. A host whose clock is off from the server's by more than the
// lease is refused (ErrClockSkew): nothing is claimed or written. The
// offset is known to within half the round trip of the reading.
//
// Each run has an id (WithRunID; random by default, shared by the workers
// of one Run): every envelope a runner tries gets replay_run and
// replay_tried_at, whatever the outcome, and the runners of the run skip
// envelopes whose replay_run is theirs, so an envelope rejected again is
// tried once per run, not once per runner. Processes draining one backlog
// together may pass one id; processes started independently, each with
// its own id, also end: a run skips the envelopes anyone tried since it
// started (replay_tried_at), so an envelope rejected again is tried at
// most once by each run, and no two runs keep retrying what the other
// just tried (all these times are the server's: see Clocks).
//
// A runner that lost its claims (paused past its lease: see Fencing) may
// see another runner take its envelopes over: both write its inserts (the
// second meets its own _id and is recognised, as after a crash) and both
// mark them the same way; its updates, replaces and deletes it does not
// send. To keep the counts exact, each runner then
// inserts the record "<envelope key>.run.<run id>" in the lease
// collection for every envelope of its batch, and counts only those whose
// record it stored first: over the runners of one run, the counts add up
// to the envelopes tried, each once. Those records stay in the lease
// collection (a few hundred bytes each); drop it only when no replay is
// running and a complete run followed the last one that died: the
// send tokens a dead runner left are the only record that a
// write's result is unknown (see Writes in flight).
//
// # The target
//
// The target is any writeguard.Collection: a *mongo.Collection, or a
// *writeguard.Guarded for retries of transient errors. Replay does the
// dead-letter bookkeeping itself, so the target should NOT dead-letter:
// build the replay's Guarded without writeguard.WithDeadLetter (rejected
// documents then end "failed" with their 121, which Run reads). If it does
// dead-letter (a document's disposition is dead_lettered), Run counts the
// document as still invalid (Result.TargetDeadLettered) and leaves the
// envelope alone, taking the target's sink to have recorded the recapture;
// but the target computes the fingerprint with the replayed _id
// (id_assigned false), so for envelopes whose _id writeguard had assigned
// the target's sink makes a second envelope rather than counting an
// attempt on the first. For telemetry, give the replay's Guarded the hooks
// of otelhook.NewReplayHooks, not the application's: its writes are then
// counted as the replay's (writeguard.replay.inputs), and a row rejected
// again never counts as a failed input of the application.
//
// # What replay writes
//
// Anyone who can write the dead-letter collection can forge an envelope,
// and an envelope's namespace and original decide where a replay writes
// and what it runs, with the rights of the replay's client (typically an
// operator's, wider than the application's). Anyone with insert or
// update rights on the DLQ, the application's own user included (its
// sink writes there), can therefore make a replay create users in
// admin.system.users or delete every document of a collection, unless
// the replay refuses. So it refuses, and every refusal is counted
// (Result.Refused), listed (Problems, with the envelope's _id and the
// reason) and recorded (replay_reason, the envelope left pending):
//
//   - Run writes into its target only, and the target's namespace must be
//     one the operator named: WithInto, by default the target's own
//     namespace (the one the guarded collection was built with). An
//     envelope of another namespace is written only when WithInto names
//     it too.
//   - Whatever is named, the admin, local and config databases, system
//     collections ("system.*"), the dead-letter collection, its side
//     collections ("<dlq>_*") and the lease collection are refused
//     (RefusedNamespace).
//   - Inserts only, by default; updates, replaces and deletes when
//     WithOperations allows them; updateMany, deleteMany and filters
//     without an _id condition only with WithMultiDocument.
//
// Give replay's client the least rights that do the job (read and write
// on the DLQ, its lease collection and the target collections), and
// restrict who can write the DLQ: the application's user needs insert and
// update on it only.
//
// Unless the dlq.Filter names namespaces, Run selects the envelopes whose
// namespace is the target's ("<database>.<collection>", from
// *mongo.Collection, or the Namespace method of *writeguard.Guarded and
// of test doubles).
//
// # Discard
//
// Discard gives envelopes up through the same leases (WithLease, by
// default DefaultDiscardLease, renewed while it marks): it does not
// discard an envelope a replay holds (it reports it busy), and a replay
// does not select one it discarded, so of the two one wins, visibly. A
// discard that dies blocks replays of what it had claimed for one lease
// at most. dlq.Discard does not coordinate with running replays.
//
// # Dry run
//
// WithDryRun evaluates, with no write, how many selected envelopes the
// target's validator would now accept: it reads the validator from
// listCollections (or takes the one given with WithValidator), and runs on
// the DLQ the aggregation
//
//	[{$match: <filter>}, {$replaceRoot: {newRoot: "$original"}}, {$match: <validator>}, {$count: "n"}]
//
// Servers that cannot run it (FerretDB v1: $replaceRoot is 238
// NotImplemented and $jsonSchema in a query is 2 BadValue) make Run return
// an error wrapping ErrDryRunUnsupported with the server's reason.
//
// Stats, Discard and the shared Filter live in package dlq.
package replay
