// Package envelope builds and stores dead-letter envelopes: when a guarded
// write is rejected with code 121 (DocumentValidationFailure), the rejected
// document is kept, verbatim, in an Envelope together with the server's
// errInfo, the failing JSON Schema keywords and query operators
// (FailingKeywords), the dotted paths they name (FailingPaths), and a
// Fingerprint of the payload that makes a recapture of the same payload
// update one record instead of adding another. Envelopes are handed to a
// Sink (the Sink interface).
//
// # The dead-letter collection
//
// EnsureCollection creates the dead-letter collection (DLQ) with a
// permissive validator, a TTL index on last_seen, a unique index on
// fingerprint and an index for replays, reporting for each whether it was
// applied, already there, or unsupported by the server (FerretDB: no
// validators, no TTL). MongoSink stores envelopes there, one bulk write
// per Put, merging recaptures of a payload into one envelope (attempts,
// last_seen, status back to pending); WithRedact strips fields first, and
// envelopes over 16 MiB are cut (diagnostics first, the original last),
// never dropped. FileSink appends them to a JSON Lines file, the fallback when
// the DLQ cannot be written; ReadFile loads it back.
//
// # The envelope format (SchemaVersion 2)
//
// New builds an envelope from what a guarded write knows of a rejected
// document or model (Capture): an insert keeps its document as it was
// marshalled; an update, replace or delete keeps ModelDocument's document,
// with every field of the driver's model that changes the write (filter,
// update or pipeline, replacement, arrayFilters, collation, hint, upsert,
// sort), and the call's own options (CallOptions: ordered,
// bypassDocumentValidation, let, comment). ParseModel rebuilds the model
// so that the driver sends the same statement bytes.
//
// Both sinks then protect and fit it: fields the server refused because
// the schema says they must be encrypted (errInfo operatorName "encrypt",
// or paths configured with WithEncryptedPaths) are withheld, not stored
// (Withheld, WithheldNote); the fingerprint of an envelope with withheld
// or redacted fields is of a scheme that confirms no guess of them
// (SchemeStored, or SchemeKeyed with WithFingerprintKey); a document the
// server could not store as a sub-document (dotted, "$"-prefixed or
// duplicated keys, ...) is kept as its exact bytes in <field>_raw
// (Binary); and an envelope over 16 MiB gives up its diagnostics before
// its original (Cut). Decode reads every format back.
//
// What each sink confirms (a nil error from Put, a nil entry from
// PutEach) it can give back:
//
//	sink       confirms an envelope when                    after a failure
//	FileSink   its line was written whole and fsynced     a torn last line is ended before the
//	                                                        next line; ReadFile skips and reports it
//	MongoSink  the server acknowledged its statement       the lost unique fingerprint index is
//	           (w ≥ 1) with the unique fingerprint index    re-established before storing, or nothing
//	           in place                                     is stored (ErrIndexMissing)
//
// PartialSink (both sinks) reports a gathered Put per envelope, and the
// function PutEach calls it when a sink has it, so that the envelopes a
// sink stored count as stored even when others of the same Put were not.
//
// Decode reads a stored envelope; one that cannot be decoded (a field of
// the wrong type) is a *DecodeError naming its _id and the field, never
// the value: Stats counts such envelopes apart, DiscardIDs takes them out
// of the way.
//
// Filter selects envelopes (by keyword, path, code, namespace, status,
// age) for Stats, which summarises a backlog, for Discard, which gives
// envelopes up, and for package replay, which writes them to their target
// once the cause is fixed.
//
// # errInfo analysis
//
// From MongoDB 5.0 on (SERVER-20547) a 121 write error carries an errInfo
// built by the server's document validation error generator
// (src/mongo/db/matcher/doc_validation/doc_validation_error.cpp in
// mongodb/mongo): {failingDocumentId, details}, where details is a tree of
// nodes each naming its operator in operatorName ($jsonSchema, properties,
// minimum, $and, $lt, ...). OperatorNames lists them all, FailingKeywords
// keeps the leaves (the root causes, used to group a backlog) and
// FailingPaths derives the property paths. Servers before 5.0 send no
// errInfo; the generator may also send errInfos without details (too deeply
// nested, too large) or with a status in place of details (failed to
// generate): for all of these FailingKeywords is ["unknown"]. The functions
// read the raw BSON themselves and never panic, whatever the input.
//
// The rules and the shapes they must survive are those of
// testdata/errinfo_corpus.README.md; testdata/errinfo_corpus.json holds real
// replies with their expected results.
package envelope
