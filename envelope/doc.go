// Package envelope is the dead-letter format: when a guarded write is
// rejected with code 121 (DocumentValidationFailure), the rejected
// document is kept, verbatim, in an Envelope together with the server's
// errInfo, the failing JSON Schema keywords and query operators
// (FailingKeywords), the dotted paths they name (FailingPaths), and a
// Fingerprint of the payload that makes a recapture of the same payload
// update one record instead of adding another. Envelopes are handed to a
// Sink (the Sink interface; PartialSink and PutEach say which envelopes of
// a Put were stored).
//
// The package does no I/O: it builds, protects, encodes and decodes
// envelopes. The dead-letter collection that stores them (dlq.MongoSink,
// the fallback dlq.FileSink, dlq.EnsureCollection, dlq.Stats,
// dlq.Filter, dlq.Discard) is package dlq; the write path (the root
// package and internal/engine) uses only this one, and .ci/run checks
// that it imports no dlq and opens no file or collection.
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
// Before a sink stores an envelope, Protect applies a Protection: fields
// the server refused because the schema says they must be encrypted
// (errInfo operatorName "encrypt", or Protection.EncryptedPaths) are
// withheld, not stored (Withheld, WithheldNote); the redaction hooks
// rewrite the original and errInfo; the fingerprint of an envelope with
// withheld or redacted fields is of a scheme that confirms no guess of
// them (SchemeStored, or SchemeKeyed with Protection.FingerprintKey).
// Package dlq builds the Protection from its sink options.
//
// # The stored form and the JSON-lines form
//
// PrepareStored readies an envelope for the dead-letter collection
// (defaults, Protect, and the fit to MaxEnvelopeSize, fit.go: diagnostics
// cut, listed in Cut, only when that keeps the whole original inline,
// else the original set apart in Pieces, never cut); StoredFields and InsertFields are the
// document stored for a first capture and the fields a recapture leaves
// alone, RecaptureUpdateN what a recapture changes (attempts added,
// last_seen and multiplicity kept at their largest), StoredDocument the
// whole for tests and tools. A document the server could not store as a
// sub-document (dotted, "$"-prefixed or duplicated keys, ...) is kept as
// its exact bytes in <field>_raw (Binary). Decode reads every format
// back.
//
// MarshalLine and UnmarshalLine are the JSON-lines form (one envelope per
// line, canonical Extended JSON plus exact bytes where JSON would change
// them), which dlq.FileSink writes; ReadLines reads it from any reader,
// skipping and reporting broken lines (LineError).
//
// Decode reads a stored envelope; one that cannot be decoded (a field of
// the wrong type) is a *DecodeError naming its _id and the field, never
// the value: dlq.Stats counts such envelopes apart, dlq.DiscardIDs takes
// them out of the way.
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
