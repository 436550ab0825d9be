package envelope

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// SchemaVersion is the version of the Envelope layout written by this
// package. It is stored in every envelope as schema_version. Decode and
// package replay read every version:
//
//   - 0 or 1 (before): an update, replace or delete model's original is
//     {op, model: <canonical Extended JSON of {filter, update|replacement,
//     upsert}>} and loses its other options; original and err_info are
//     always sub-documents; the fingerprint is the SHA-256 of the
//     unredacted original.
//   - 2: kind names the model; a model's original is ModelDocument's
//     document (every option of the driver's model); call_options holds
//     the call's options; original, err_info and call_options are kept as
//     binary (<name>_raw) when the server could not store them as
//     sub-documents (binary); fields that had to be encrypted are withheld
//     (withheld, withheld_note); what was cut for size is listed (cut);
//     fingerprint_scheme says how the fingerprint was made; the status
//     may be quarantined, with replay_failures.
const SchemaVersion = 2

// Status values of an Envelope.
const (
	// StatusPending: waiting for a replay or a discard.
	StatusPending = "pending"
	// StatusReplayed: written to its target collection by a replay.
	StatusReplayed = "replayed"
	// StatusDiscarded: given up by an operator.
	StatusDiscarded = "discarded"
)

// Statuses lists every status: the three above and StatusQuarantined
// (status_quarantine.go, format 2).
var Statuses = []string{StatusPending, StatusReplayed, StatusDiscarded, StatusQuarantined}

// Envelope is one dead-lettered document or write model, as stored in the
// dead-letter collection. Field names (bson tags) are the stored names
// (the collection's validator, dlq.Validator, checks the core ones); they are
// part of the stored format and do not change within a SchemaVersion.
type Envelope struct {
	// SchemaVersion is the layout version (SchemaVersion); 0 for an
	// envelope written before the field existed.
	SchemaVersion int `bson:"schema_version" json:"schema_version"`
	// Fingerprint is the dead-letter collection's unique key: a recapture
	// of the same payload upserts. Its scheme is FingerprintScheme.
	Fingerprint string `bson:"fingerprint" json:"fingerprint"`
	// FingerprintScheme says how Fingerprint was made (the Scheme*
	// constants); empty before format 2 (SchemeCanonical).
	FingerprintScheme string `bson:"fingerprint_scheme,omitempty" json:"fingerprint_scheme,omitempty"`
	// Kind is the write the envelope holds (KindInsertOne, KindUpdateOne,
	// ...); empty before format 2 (an original with _id is an insert, one
	// with a string op a model).
	Kind string `bson:"kind,omitempty" json:"kind,omitempty"`
	// Original is the document (KindInsertOne) verbatim, as marshalled for
	// the write, or the model's document (ModelDocument). It is stored as
	// the sub-document original, or, when the server could not store it
	// so (see Binary), as the exact bytes in the binary field
	// original_raw; Decode fills it from either.
	Original bson.Raw `bson:"original" json:"-"`
	// CallOptions is the document of the guarded call's options that
	// change what the write does (CallOptions.Document); nil when the
	// caller set none. Stored as call_options or call_options_raw.
	CallOptions bson.Raw `bson:"call_options,omitempty" json:"-"`
	// Binary lists the fields stored as exact bytes (<field>_raw, BSON
	// binary subtype 0) instead of sub-documents, and why (a dotted or
	// $-prefixed key, a duplicated key, ...). Set by the sink.
	Binary []BinaryField `bson:"binary,omitempty" json:"binary,omitempty"`
	// Withheld lists the fields of Original that are not stored because
	// the server refused them for not being encrypted (see Protect);
	// a replay refuses to write the envelope unless the caller supplies
	// them.
	Withheld []WithheldField `bson:"withheld,omitempty" json:"withheld,omitempty"`
	// WithheldNote says, when errInfo could not tell which fields had to
	// be encrypted (absent, or cut), what was withheld and on what basis.
	WithheldNote string `bson:"withheld_note,omitempty" json:"withheld_note,omitempty"`
	// Cut lists what was cut to fit the 16 MiB limit, in the order it was
	// cut (diagnostics before the original).
	Cut []CutField `bson:"cut,omitempty" json:"cut,omitempty"`
	// OriginalPieces is set when the original was too large to be stored
	// with its envelope (see MaxEnvelopeSize): the stored original is then
	// empty, and the original's bytes are kept whole, in pieces, in the
	// dead-letter collection's side collection (dlq.PiecesCollectionSuffix),
	// from which package replay and dlq.ReadOriginal reassemble it. Set by
	// PrepareStored; format 2.
	OriginalPieces *Pieces `bson:"original_pieces,omitempty" json:"original_pieces,omitempty"`
	// OriginalTruncated is true when Original was cut to fit the 16 MiB
	// BSON limit together with the envelope's own fields: it then holds
	// only the top-level fields that fit, and cannot be replayed. Only
	// envelopes stored before originals were kept in pieces
	// (OriginalPieces) have it.
	OriginalTruncated bool `bson:"original_truncated,omitempty" json:"original_truncated,omitempty"`
	// OriginalSize is the size in bytes of the original before it was
	// truncated (set only when OriginalTruncated is true).
	OriginalSize int `bson:"original_size,omitempty" json:"original_size,omitempty"`
	// OriginalDropped names the top-level fields truncation left out, in
	// document order (at most 100 names; set only when OriginalTruncated
	// is true).
	OriginalDropped []string `bson:"original_dropped,omitempty" json:"original_dropped,omitempty"`
	// OriginalRedacted is true when a redaction hook (Protection.Redact) changed
	// Original before it was stored: the stored original is not the
	// payload that was rejected, and a replay skips it unless told
	// otherwise. Fingerprint is then of a scheme that hides what was
	// removed (FingerprintScheme).
	OriginalRedacted bool `bson:"original_redacted,omitempty" json:"original_redacted,omitempty"`
	// DocumentID is the original's _id.
	DocumentID bson.RawValue `bson:"document_id" json:"-"`
	// IDAssigned is true when writeguard assigned DocumentID (the caller's
	// document had no _id).
	IDAssigned bool `bson:"id_assigned" json:"id_assigned"`
	// ErrInfo is the server's errInfo, verbatim (nil before MongoDB 5.0).
	ErrInfo bson.Raw `bson:"err_info,omitempty" json:"-"`
	// FailingKeywords are the leaf operators of ErrInfo (FailingKeywords);
	// ["unknown"] when ErrInfo names none.
	FailingKeywords []string `bson:"failing_keywords" json:"failing_keywords"`
	// FailingPaths are the dotted property paths ErrInfo names
	// (FailingPaths).
	FailingPaths []string `bson:"failing_paths" json:"failing_paths"`
	// Code, CodeName and ErrMsg are the server's error code, codeName and
	// errmsg (code 121 DocumentValidationFailure for schema failures).
	Code     int32  `bson:"code" json:"code"`
	CodeName string `bson:"code_name,omitempty" json:"code_name,omitempty"`
	ErrMsg   string `bson:"errmsg" json:"errmsg"`
	// Labels are the error labels of the command that failed, if any.
	Labels []string `bson:"labels,omitempty" json:"labels,omitempty"`
	// Namespace is "<database>.<collection>" of the write's target.
	Namespace string `bson:"namespace" json:"namespace"`
	// Operation is the wrapped call's command-style name: insertOne,
	// insertMany, bulkWrite, updateOne, updateMany, replaceOne, deleteOne,
	// deleteMany, findOneAndUpdate, findOneAndReplace or findOneAndDelete
	// (the write whose input was dead-lettered; Kind says which model).
	Operation string `bson:"operation" json:"operation"`
	// BatchIndex is the document's index in the caller's batch.
	BatchIndex int `bson:"batch_index" json:"batch_index"`
	// FirstSeen and LastSeen are when the payload was first and last
	// dead-lettered (BSON dates, UTC).
	FirstSeen time.Time `bson:"first_seen" json:"first_seen"`
	LastSeen  time.Time `bson:"last_seen" json:"last_seen"`
	// Attempts counts the captures of this payload (≥ 1).
	Attempts int `bson:"attempts" json:"attempts"`
	// Multiplicity is how many identical inputs one guarded call carried
	// (the same fingerprint: documents without _id that differ in nothing
	// else, or identical write models): the largest number any capture
	// saw, so that a call that re-sends the same slice (the finishing
	// pattern) does not multiply it. A replay writes that many (see
	// CopyID). 0 (an envelope stored before the field existed) and 1
	// both mean one. An insert whose _id the caller gave is one document
	// whatever its number (its copies would be duplicate keys): 1. Stored
	// with $max (RecaptureUpdateN); format 2.
	Multiplicity int `bson:"multiplicity,omitempty" json:"multiplicity,omitempty"`
	// Status is one of Statuses.
	Status string `bson:"status" json:"status"`
	// ReplayFailures counts the replays that tried the envelope and did
	// not write it (FieldReplayFailures; format 2; maintained by package
	// replay, which quarantines the envelope past a limit).
	ReplayFailures int `bson:"replay_failures,omitempty" json:"replay_failures,omitempty"`
	// ReplayedAt is when a replay wrote the payload to its target (status
	// replayed); zero otherwise. Set by package replay.
	ReplayedAt time.Time `bson:"replayed_at,omitempty" json:"replayed_at,omitzero"`
	// ReplayRun is the id of the last replay run that tried the envelope
	// (package replay, WithRunID), whatever the outcome; the runners of
	// one run skip the envelopes it names. Empty before any replay.
	ReplayRun string `bson:"replay_run,omitempty" json:"replay_run,omitempty"`
	// ReplayTriedAt is when that run tried it; zero before any replay.
	ReplayTriedAt time.Time `bson:"replay_tried_at,omitempty" json:"replay_tried_at,omitzero"`
	// DiscardedAt is when dlq.Discard gave the envelope up (status discarded);
	// zero otherwise.
	DiscardedAt time.Time `bson:"discarded_at,omitempty" json:"discarded_at,omitzero"`
	// TraceID and SpanID identify the span of the write that dead-lettered
	// the payload, when there was one (hex, W3C trace context).
	TraceID string `bson:"trace_id,omitempty" json:"trace_id,omitempty"`
	SpanID  string `bson:"span_id,omitempty" json:"span_id,omitempty"`
}

// BinaryField is one entry of Envelope.Binary.
type BinaryField struct {
	// Field is the envelope field ("original", "err_info",
	// "call_options"), stored as Field+"_raw".
	Field string `bson:"field" json:"field"`
	// Reason says what the server would refuse in the sub-document.
	Reason string `bson:"reason" json:"reason"`
}

// WithheldField is one entry of Envelope.Withheld.
type WithheldField struct {
	// Path is the dotted path in the written document (for a model, the
	// path in the model document, e.g. "update.$set.ssn").
	Path string `bson:"path" json:"path"`
	// Reason says why: "encrypt" (errInfo's operatorName: the server
	// refused it for not being encrypted) or "schema encrypt" (the
	// collection's schema marks it encrypt; see Protection.EncryptedPaths).
	Reason string `bson:"reason" json:"reason"`
}

// CutField is one entry of Envelope.Cut.
type CutField struct {
	// Field is what was cut: "err_info.consideredValue" (the values
	// errInfo repeats), "err_info.details" (arrays of the details tree cut
	// to their first items), "err_info" (replaced by a summary),
	// "failing_paths", "failing_keywords", "errmsg", "original".
	Field string `bson:"field" json:"field"`
	// Size is the field's size in bytes before the cut.
	Size int `bson:"size" json:"size"`
	// Total and Kept count items (list entries, array elements, top-level
	// fields of the original) before and after the cut, when it counts
	// items.
	Total int `bson:"total,omitempty" json:"total,omitempty"`
	Kept  int `bson:"kept,omitempty" json:"kept,omitempty"`
}

// Sink receives dead-lettered envelopes.
//
// Put stores envs as one batch. It must be idempotent per Fingerprint: a
// guarded collection retries a failed Put with the same envelopes (and the
// same backoff as its writes), so a retried Put must not create a second
// record of a payload. Put returns nil only when every envelope is durably
// stored; any error means the caller treats the whole batch as not stored.
// Implementations must be safe for concurrent use.
type Sink interface {
	Put(ctx context.Context, envs []Envelope) error
}

// SinkFunc adapts a function to the Sink interface.
type SinkFunc func(ctx context.Context, envs []Envelope) error

// Put calls f(ctx, envs).
func (f SinkFunc) Put(ctx context.Context, envs []Envelope) error { return f(ctx, envs) }
