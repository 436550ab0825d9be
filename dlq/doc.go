// Package dlq is writeguard's dead-letter collection (DLQ): where the
// envelopes of package envelope are stored, set up, counted and given up.
// The write path (the root package and internal/engine) knows only
// envelope.Sink: a program hands it a MongoSink (and a FileSink as the
// fallback) with writeguard.WithDeadLetter and
// writeguard.WithFallbackDeadLetter. Package replay, otelhook's
// ObserveDLQ and the writeguard command read the collection through
// Filter and Stats. dlq imports envelope and policy; neither envelope nor
// the write path imports dlq (.ci/run checks it), so the format stays
// free of I/O.
//
// # The files
//
//	options.go      SinkOption: the protection a sink hands to envelope.Protect (WithRedact,
//	                WithRedactErrInfo, WithFingerprintKey, WithEncryptedPaths,
//	                WithPlaintextEncryptedFields: one envelope.Protection), and MongoSink's own
//	                (WithUpsertRetries, WithInsertFirst, WithSetup, WithLogger)
//	mongo.go        MongoSink: NewMongoSink, Put, PutEach; a Put's envelopes prepared one by one
//	                (envelope.PrepareStored), merged by fingerprint, striped locks; StoredDocument
//	mongo_write.go  the writes of a Put: upserts (the default) or insert-first, in rounds that
//	                send again what lost a race on the fingerprint index or what the server
//	                refused as a sub-document (then stored as bytes)
//	mongo_safe.go   before each Put: the unique fingerprint index is there, or it is
//	                re-established first, or nothing is stored (ErrIndexMissing, Reestablished)
//	pieces.go       originals too large for their envelope, kept whole in "<dlq>_pieces":
//	                written before the envelope, ReadOriginal, orphans (SweepPieces,
//	                OrphanGrace), their summary in Stats and their TTL in EnsureCollection
//	file.go         FileSink: the JSON-lines fallback (envelope.MarshalLine), one write and one
//	                fsync per Put, a torn last line ended; ReadFile
//	setup.go        EnsureCollection: the collection and its permissive Validator, feature by
//	                feature in a SetupReport (applied, already, unsupported, disabled, failed)
//	indexes.go      its indexes, matched by keys: the unique fingerprint index, the TTL index, the
//	                status index; listIndexes as MongoSink checks it
//	sharded.go      FeatureSharding: whether the unique fingerprint index can hold on a sharded
//	                collection
//	filter.go       Filter: which envelopes (keyword, path, code, namespace, status, fingerprint,
//	                age), as a query on the stored fields
//	stats.go        Stats: a backlog summarised (Summary: by status, keyword, path, code,
//	                namespace; undecodable envelopes apart): its query, a tally per envelope,
//	                the final sort
//	discard.go      Discard, DiscardIDs: envelopes given up (status discarded)
//
// # What each sink confirms
//
// What a sink confirms (a nil error from Put, a nil entry from PutEach)
// it can give back:
//
//	sink       confirms an envelope when                    after a failure
//	FileSink   its line was written whole and fsynced     a torn last line is ended before the
//	                                                        next line; ReadFile skips and reports it
//	MongoSink  the server acknowledged its statement       the lost unique fingerprint index is
//	           (w ≥ 1) with the unique fingerprint index    re-established before storing, or nothing
//	           in place, and first every piece of an        is stored (ErrIndexMissing); pieces
//	           original kept apart (pieces.go)              without an envelope are orphans
//
// Both are envelope.PartialSinks: envelope.PutEach, which the engine
// calls, gets one error per envelope, so the envelopes a sink stored
// count as stored even when others of the same Put were not.
//
// # The path of one dead-lettered document
//
// An insert rejected with 121, with a MongoSink: the engine builds its
// envelope (internal/engine deadletter.go, envelopeFor: envelope.New) and
// hands the call's gathered envelopes to envelope.PutEach ->
// MongoSink.PutEach -> put: envelope.PrepareStored (first_seen, status
// pending, envelope.Protect with the sink's envelope.Protection, the fit
// to envelope.MaxEnvelopeSize: diagnostics cut or the original set apart)
// -> mergeByFingerprint -> lock -> checkIndexes (mongo_safe.go: at most
// every WithIndexCheckInterval, and after a failed Put) -> write:
// writePieces for an original set apart (pieces.go), then putUpserts
// (mongo_write.go: one unordered bulk write of upserts by fingerprint,
// $setOnInsert envelope.InsertFields and envelope.RecaptureUpdateN;
// upserts.next sends again a lost race or a refused sub-document) -> one
// error per envelope
// back to the engine, which settles the document dead_lettered, or
// retries its envelope, or hands it to the fallback sink.
package dlq
