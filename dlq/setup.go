package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/policy"

	"github.com/writeguard/writeguard/envelope"
)

// DefaultTTL is how long an envelope is kept after its last capture
// (last_seen) before the server's TTL monitor deletes it: 14 days.
const DefaultTTL = 14 * 24 * time.Hour

// DefaultTTLField is the field the TTL index counts from.
const DefaultTTLField = "last_seen"

// Index names EnsureCollection gives the indexes it creates. An existing
// index on the same keys is used whatever its name.
const (
	FingerprintIndexName = "fingerprint_unique"
	StatusIndexName      = "status_namespace_first_seen"
	// The TTL index is named "<field>_ttl", e.g. "last_seen_ttl".
	ttlIndexSuffix = "_ttl"
)

// Server error codes EnsureCollection acts on (mongodb/mongo
// src/mongo/base/error_codes.yml).
const (
	codeNamespaceExists       = 48
	codeCommandNotFound       = 59
	codeIndexOptionsConflict  = 85
	codeIndexKeySpecsConflict = 86
	codeCommandNotSupported   = 115
	codeNotImplemented        = 238
)

// UnsupportedCodes are the server error codes that mean "this server does
// not implement that": 238 NotImplemented (FerretDB), 115
// CommandNotSupported, 59 CommandNotFound. EnsureCollection reports an
// optional feature (validator, TTL index, status index) refused with one
// of them as FeatureUnsupported and goes on (any other error is
// FeatureFailed), and package replay counts them, beside the codes a
// server gives an aggregation stage or query operator it does not know,
// as "dry run unsupported". Add codes for other servers before calling
// either; do not change the slice concurrently with them.
var UnsupportedCodes = []int32{codeNotImplemented, codeCommandNotSupported, codeCommandNotFound}

// FeatureState is what EnsureCollection did about one feature of the
// dead-letter collection.
type FeatureState string

// The feature states.
const (
	// FeatureApplied: created or changed by this call.
	FeatureApplied FeatureState = "applied"
	// FeatureAlready: already there as wanted; nothing was changed.
	FeatureAlready FeatureState = "already"
	// FeatureUnsupported: the server refused it as not supported (a code
	// in UnsupportedCodes); see the result's Code and Message.
	FeatureUnsupported FeatureState = "unsupported"
	// FeatureDisabled: turned off by an option (WithoutValidator,
	// WithTTL(field, 0)).
	FeatureDisabled FeatureState = "disabled"
	// FeatureFailed: the server refused it for another reason; see the
	// result's Code and Message. EnsureCollection's error names it.
	FeatureFailed FeatureState = "failed"
)

// Feature names, in the order EnsureCollection handles and reports them.
const (
	// FeatureCollection is the collection itself.
	FeatureCollection = "collection"
	// FeatureValidator is the permissive $jsonSchema validator
	// (validationLevel moderate, validationAction warn).
	FeatureValidator = "validator"
	// FeatureFingerprintIndex is the unique index on fingerprint.
	FeatureFingerprintIndex = "fingerprint_index"
	// FeatureTTLIndex is the TTL index on last_seen (by default).
	FeatureTTLIndex = "ttl_index"
	// FeatureStatusIndex is the index {status: 1, namespace: 1,
	// first_seen: 1} used by replays, Stats and Discard.
	FeatureStatusIndex = "status_index"
)

// FeatureResult is the outcome for one feature.
type FeatureResult struct {
	// Feature is one of the Feature* names.
	Feature string
	// State says what was done.
	State FeatureState
	// Detail says how, in words (e.g. "expireAfterSeconds changed from
	// 3600 to 1209600 with collMod").
	Detail string
	// Code, CodeName and Message are the server's error for
	// FeatureUnsupported and FeatureFailed (e.g. 238 NotImplemented).
	Code     int32
	CodeName string
	Message  string
}

// String formats r as "ttl_index: unsupported (238 NotImplemented: ...)".
func (r FeatureResult) String() string {
	s := r.Feature + ": " + string(r.State)
	if r.Detail != "" {
		s += ", " + r.Detail
	}
	if r.Code != 0 || r.Message != "" {
		s += fmt.Sprintf(" (%d %s: %s)", r.Code, r.CodeName, r.Message)
	}
	return s
}

// SetupReport is what EnsureCollection did, feature by feature.
type SetupReport struct {
	// Namespace is "<database>.<collection>" of the dead-letter
	// collection.
	Namespace string
	// Features has one result per feature, in the order of the Feature*
	// constants.
	Features []FeatureResult
}

// Feature returns the result for the named feature.
func (r SetupReport) Feature(name string) (FeatureResult, bool) {
	for _, f := range r.Features {
		if f.Feature == name {
			return f, true
		}
	}
	return FeatureResult{}, false
}

// State returns the state of the named feature ("" when not reported).
func (r SetupReport) State(name string) FeatureState {
	f, _ := r.Feature(name)
	return f.State
}

// String formats the report, one feature per line.
func (r SetupReport) String() string {
	var b strings.Builder
	b.WriteString(r.Namespace)
	b.WriteString(":")
	for _, f := range r.Features {
		b.WriteString("\n  ")
		b.WriteString(f.String())
	}
	return b.String()
}

func (r *SetupReport) add(fr FeatureResult) { r.Features = append(r.Features, fr) }

// SetupOption configures EnsureCollection. Options are applied in order,
// then checked together: a nil option or a bad value is an error naming
// it (all of them joined).
type SetupOption interface {
	apply(*setupConfig)
}

type setupOptionFunc func(*setupConfig)

func (f setupOptionFunc) apply(c *setupConfig) { f(c) }

type setupConfig struct {
	validator bool
	ttlField  string
	ttl       time.Duration
	status    bool
	errs      []error
}

// WithTTL sets the TTL index: envelopes are deleted after ttl has passed
// since their field (a BSON date; default "last_seen", so the clock
// restarts at each recapture). ttl is rounded down to whole seconds and
// must be between 1 s and 2^31−1 s (the server's expireAfterSeconds
// range); 0 turns the TTL index off (FeatureDisabled). Default:
// DefaultTTL on DefaultTTLField. An empty field means DefaultTTLField.
//
// The server's TTL monitor runs every 60 s (ttlMonitorSleepSecs), so
// deletions lag by up to a minute, more under load. The TTL index deletes
// pending envelopes too: one not recaptured for ttl is gone, whether or
// not it was replayed; size ttl to the longest a backlog may wait for a
// fix.
func WithTTL(field string, ttl time.Duration) SetupOption {
	return setupOptionFunc(func(c *setupConfig) {
		if field == "" {
			field = DefaultTTLField
		}
		switch {
		case ttl == 0:
		case ttl < time.Second:
			c.errs = append(c.errs, fmt.Errorf("dlq: WithTTL(%q, %v): want 0 or at least 1s", field, ttl))
			return
		case ttl/time.Second > math.MaxInt32:
			c.errs = append(c.errs, fmt.Errorf("dlq: WithTTL(%q, %v): over the server's maximum of 2147483647s", field, ttl))
			return
		}
		c.ttlField, c.ttl = field, ttl
	})
}

// WithoutValidator leaves the collection's validator alone
// (FeatureDisabled).
func WithoutValidator() SetupOption {
	return setupOptionFunc(func(c *setupConfig) { c.validator = false })
}

// WithoutStatusIndex does not create the {status, namespace, first_seen}
// index (FeatureDisabled).
func WithoutStatusIndex() SetupOption {
	return setupOptionFunc(func(c *setupConfig) { c.status = false })
}

// Validator returns the validator EnsureCollection gives the dead-letter
// collection: a $jsonSchema requiring the envelope's core fields with
// their BSON types, and the original either as a sub-document (original)
// or as its exact bytes (original_raw, binary). It is applied with
// validationLevel "moderate" and validationAction "warn": the server logs a non-conforming envelope but
// stores it (a dead-letter collection must never reject), and documents
// that were already invalid are not checked on update.
func Validator() bson.D {
	intTypes := bson.A{"int", "long"}
	strArray := bson.D{{Key: "bsonType", Value: "array"}, {Key: "items", Value: bson.D{{Key: "bsonType", Value: "string"}}}}
	return bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "bsonType", Value: "object"},
		{Key: "required", Value: bson.A{
			"fingerprint", "schema_version", "failing_keywords", "failing_paths", "code",
			"namespace", "operation", "first_seen", "last_seen", "attempts", "status",
		}},
		{Key: "oneOf", Value: bson.A{
			bson.D{{Key: "required", Value: bson.A{"original"}}},
			bson.D{{Key: "required", Value: bson.A{"original_raw"}}},
		}},
		{Key: "properties", Value: bson.D{
			{Key: "fingerprint", Value: bson.D{{Key: "bsonType", Value: "string"}}},
			{Key: "schema_version", Value: bson.D{{Key: "bsonType", Value: intTypes}}},
			{Key: "original", Value: bson.D{{Key: "bsonType", Value: "object"}}},
			{Key: "original_raw", Value: bson.D{{Key: "bsonType", Value: "binData"}}},
			{Key: "err_info_raw", Value: bson.D{{Key: "bsonType", Value: "binData"}}},
			{Key: "failing_keywords", Value: strArray},
			{Key: "failing_paths", Value: strArray},
			{Key: "code", Value: bson.D{{Key: "bsonType", Value: intTypes}}},
			{Key: "namespace", Value: bson.D{{Key: "bsonType", Value: "string"}}},
			{Key: "operation", Value: bson.D{{Key: "bsonType", Value: "string"}}},
			{Key: "first_seen", Value: bson.D{{Key: "bsonType", Value: "date"}}},
			{Key: "last_seen", Value: bson.D{{Key: "bsonType", Value: "date"}}},
			{Key: "attempts", Value: bson.D{{Key: "bsonType", Value: intTypes}, {Key: "minimum", Value: 1}}},
			{Key: "status", Value: bson.D{{Key: "enum", Value: bson.A{envelope.StatusPending, envelope.StatusReplayed, envelope.StatusDiscarded, envelope.StatusQuarantined}}}},
		}},
	}}}
}

// Validation level and action EnsureCollection sets with Validator.
const (
	ValidationLevel  = "moderate"
	ValidationAction = "warn"
)

// EnsureCollection creates or updates the dead-letter collection name in
// db and reports each feature (see SetupReport):
//
//   - collection: created unless it exists (a concurrent creation, 48
//     NamespaceExists, counts as already).
//   - validator: Validator() with validationLevel moderate and
//     validationAction warn. A new collection is created with it; an
//     existing one whose validator, level or action differ gets them with
//     collMod. A server that refuses create with a validator (FerretDB:
//     238 NotImplemented, nothing created) gets a plain create and a
//     collMod; if that is refused too the validator is unsupported and the
//     collection is still created.
//   - sharding (on a mongos only): whether the collection is sharded and,
//     if so, whether the unique fingerprint index can hold
//     (FeatureSharding, sharded.go).
//   - fingerprint_index: a unique index on {fingerprint: 1}, required (an
//     error when it cannot be had): it makes MongoSink's upserts race-safe.
//     An existing non-unique index on those keys is reported as failed
//     (drop it and run again).
//   - ttl_index: an index on {last_seen: 1} with expireAfterSeconds (see
//     WithTTL). An existing index on the same key with another period, or
//     none, is changed with collMod {index: {keyPattern,
//     expireAfterSeconds}} (MongoDB 5.1+ for turning a plain index into a
//     TTL one): createIndexes would fail there with 85
//     IndexOptionsConflict, so it is never sent for an existing key.
//   - status_index: {status: 1, namespace: 1, first_seen: 1}.
//   - pieces (FeaturePieces): the side collection of originals stored in
//     pieces: its orphans older than OrphanGrace removed (SweepPieces),
//     and, when the TTL counts from last_seen or first_seen, a TTL index
//     on its at field of the TTL plus OrphanGrace (disabled otherwise).
//
// Indexes are matched by keys, not by name; a new index whose name is
// already taken by other keys (86 IndexKeySpecsConflict) is created under
// the name with a "_wg" suffix. Running EnsureCollection again reports
// already for everything it did the first time; it is safe to run at
// every start-up and from several processes at once.
//
// Optional features the server refuses with a code of UnsupportedCodes
// are FeatureUnsupported, with the server's code and message, and the
// call goes on. On FerretDB v1: collection applied, validator,
// ttl_index and pieces unsupported (238), fingerprint_index and
// status_index applied.
//
// The error is non-nil when the options are invalid, when listing or
// creating the collection fails, when the collection exists as a view, a
// time-series or a capped collection (a capped one removes its oldest
// documents, confirmed envelopes included), when the fingerprint index
// cannot be had,
// or when any feature ended FeatureFailed (after trying every feature);
// the report holds what was done until then.
func EnsureCollection(ctx context.Context, db *mongo.Database, name string, opts ...SetupOption) (SetupReport, error) {
	cfg := setupConfig{validator: true, ttlField: DefaultTTLField, ttl: DefaultTTL, status: true}
	for i, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, fmt.Errorf("dlq: EnsureCollection: option %d is nil", i))
			continue
		}
		o.apply(&cfg)
	}
	rep := SetupReport{}
	if db == nil {
		cfg.errs = append([]error{errors.New("dlq: EnsureCollection(nil database)")}, cfg.errs...)
	} else {
		rep.Namespace = db.Name() + "." + name
	}
	if name == "" {
		cfg.errs = append(cfg.errs, errors.New("dlq: EnsureCollection: empty collection name"))
	}
	if len(cfg.errs) > 0 {
		return rep, errors.Join(cfg.errs...)
	}
	s := setup{db: db, name: name, cfg: cfg, rep: &rep}
	if err := s.collection(ctx); err != nil {
		return rep, err
	}
	if r := s.sharding(ctx); r.Detail != notMongos { // sharded.go
		rep.add(r)
	}
	if err := s.indexes(ctx); err != nil {
		return rep, err
	}
	rep.add(s.pieces(ctx)) // pieces.go
	var failed []string
	for _, f := range rep.Features {
		if f.State == FeatureFailed {
			failed = append(failed, f.String())
		}
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("dlq: setting up %s: %s", rep.Namespace, strings.Join(failed, "; "))
	}
	return rep, nil
}

type setup struct {
	db   *mongo.Database
	name string
	cfg  setupConfig
	rep  *SetupReport
}

// collInfo is the part of a listCollections entry EnsureCollection reads.
type collInfo struct {
	Type    string `bson:"type"`
	Options struct {
		Validator        bson.Raw `bson:"validator"`
		ValidationLevel  string   `bson:"validationLevel"`
		ValidationAction string   `bson:"validationAction"`
		Capped           bool     `bson:"capped"`
	} `bson:"options"`
}

func (s *setup) info(ctx context.Context) (*collInfo, error) {
	cur, err := s.db.ListCollections(ctx, bson.D{{Key: "name", Value: s.name}})
	if err != nil {
		return nil, fmt.Errorf("dlq: listCollections: %w", err)
	}
	defer cur.Close(ctx)
	if !cur.Next(ctx) {
		if err := cur.Err(); err != nil {
			return nil, fmt.Errorf("dlq: listCollections: %w", err)
		}
		return nil, nil
	}
	var ci collInfo
	if err := cur.Decode(&ci); err != nil {
		return nil, fmt.Errorf("dlq: listCollections: %w", err)
	}
	if ci.Type != "" && ci.Type != "collection" {
		return nil, fmt.Errorf("dlq: %s is a %s, not a collection", s.rep.Namespace, ci.Type)
	}
	if ci.Options.Capped {
		// a capped collection removes its oldest documents to make room
		// (the manual's "Capped Collections"): envelopes a sink confirmed
		// would be lost without a trace.
		return nil, fmt.Errorf("dlq: %s is a capped collection: the server removes its oldest documents, "+
			"confirmed envelopes included; give the dead-letter queue an uncapped collection", s.rep.Namespace)
	}
	return &ci, nil
}

func (s *setup) collection(ctx context.Context) error {
	ci, err := s.info(ctx)
	if err != nil {
		return err
	}
	if ci == nil {
		return s.create(ctx)
	}
	s.rep.add(FeatureResult{Feature: FeatureCollection, State: FeatureAlready})
	if !s.cfg.validator {
		s.rep.add(FeatureResult{Feature: FeatureValidator, State: FeatureDisabled})
		return nil
	}
	if sameValidator(ci) {
		s.rep.add(FeatureResult{Feature: FeatureValidator, State: FeatureAlready})
		return nil
	}
	detail := "set with collMod"
	if len(ci.Options.Validator) > 0 {
		detail = "replaced with collMod"
	}
	s.rep.add(s.optional(FeatureValidator, detail, s.collMod(ctx)))
	return nil
}

func sameValidator(ci *collInfo) bool {
	if len(ci.Options.Validator) == 0 || ci.Options.ValidationLevel != ValidationLevel || ci.Options.ValidationAction != ValidationAction {
		return false
	}
	want, err := bson.Marshal(Validator())
	if err != nil {
		return false
	}
	return envelope.Fingerprint(ci.Options.Validator, false) == envelope.Fingerprint(want, false)
}

func (s *setup) collMod(ctx context.Context) error {
	return s.db.RunCommand(ctx, bson.D{
		{Key: "collMod", Value: s.name},
		{Key: "validator", Value: Validator()},
		{Key: "validationLevel", Value: ValidationLevel},
		{Key: "validationAction", Value: ValidationAction},
	}).Err()
}

func (s *setup) create(ctx context.Context) error {
	if !s.cfg.validator {
		if err := s.createPlain(ctx); err != nil {
			return err
		}
		s.rep.add(FeatureResult{Feature: FeatureValidator, State: FeatureDisabled})
		return nil
	}
	err := s.db.CreateCollection(ctx, s.name, options.CreateCollection().
		SetValidator(Validator()).SetValidationLevel(ValidationLevel).SetValidationAction(ValidationAction))
	switch {
	case err == nil:
		s.rep.add(FeatureResult{Feature: FeatureCollection, State: FeatureApplied, Detail: "created"})
		s.rep.add(FeatureResult{Feature: FeatureValidator, State: FeatureApplied, Detail: "created with the collection"})
		return nil
	case hasCode(err, codeNamespaceExists):
		// Created meanwhile by someone else: treat as existing.
		return s.collection(ctx)
	case !isUnsupported(err):
		return fmt.Errorf("dlq: creating %s: %w", s.rep.Namespace, err)
	}
	// The server refuses create with a validator: create, then collMod.
	if err := s.createPlain(ctx); err != nil {
		return err
	}
	if merr := s.collMod(ctx); merr != nil {
		fr := s.optional(FeatureValidator, "", merr)
		if fr.State == FeatureUnsupported {
			code, codeName, msg := serverError(err)
			fr.Code, fr.CodeName = code, codeName
			fr.Message = msg + "; collMod: " + fr.Message
			fr.Detail = "create with a validator and collMod both refused"
		}
		s.rep.add(fr)
		return nil
	}
	s.rep.add(FeatureResult{Feature: FeatureValidator, State: FeatureApplied, Detail: "set with collMod (create with a validator was refused)"})
	return nil
}

func (s *setup) createPlain(ctx context.Context) error {
	err := s.db.CreateCollection(ctx, s.name)
	switch {
	case err == nil:
		s.rep.add(FeatureResult{Feature: FeatureCollection, State: FeatureApplied, Detail: "created"})
	case hasCode(err, codeNamespaceExists):
		s.rep.add(FeatureResult{Feature: FeatureCollection, State: FeatureAlready, Detail: "created concurrently"})
	default:
		return fmt.Errorf("dlq: creating %s: %w", s.rep.Namespace, err)
	}
	return nil
}

// optional turns the outcome of an optional feature's command into a
// result: applied (with detail), unsupported or failed.
func (s *setup) optional(feature, detail string, err error) FeatureResult {
	if err == nil {
		return FeatureResult{Feature: feature, State: FeatureApplied, Detail: detail}
	}
	code, codeName, msg := serverError(err)
	st := FeatureFailed
	if isUnsupported(err) {
		st = FeatureUnsupported
	}
	return FeatureResult{Feature: feature, State: st, Code: code, CodeName: codeName, Message: msg}
}

// serverError returns the code, code name and message of a server error
// as policy.Extract reads them (0, "", err.Error() for other errors).
func serverError(err error) (int32, string, string) {
	fs := policy.Extract(err)
	if len(fs) == 0 {
		return 0, "", ""
	}
	return fs[0].Code, fs[0].CodeName, fs[0].Message
}

func hasCode(err error, code int32) bool {
	c, _, _ := serverError(err)
	return c == code
}

func isUnsupported(err error) bool {
	c, _, _ := serverError(err)
	return c != 0 && slices.Contains(UnsupportedCodes, c)
}
