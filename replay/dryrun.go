package replay

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

// pipelineUnsupportedCodes are the codes a server gives a pipeline stage
// or query operator it does not know: 2 BadValue (FerretDB: unknown top
// level operator $jsonSchema), 40324 (unrecognized pipeline stage name),
// 168 InvalidPipelineOperator. With dlq.UnsupportedCodes (238
// NotImplemented, FerretDB's answer to $replaceRoot; 115; 59) they mean
// "this server cannot evaluate the dry run's pipeline".
var pipelineUnsupportedCodes = []int32{2, 40324, 168}

func dryRunUnsupported(code int32) bool {
	return slices.Contains(dlq.UnsupportedCodes, code) || slices.Contains(pipelineUnsupportedCodes, code)
}

// TargetCollection returns the *mongo.Collection behind a target: the
// target itself, or the collection a *writeguard.Guarded built with
// writeguard.Wrap embeds; nil otherwise.
func TargetCollection(target writeguard.Collection) *mongo.Collection {
	switch t := target.(type) {
	case *mongo.Collection:
		return t
	case *writeguard.Guarded:
		if t.Collection != nil {
			return t.Collection
		}
		if c, ok := t.Target().(*mongo.Collection); ok {
			return c
		}
	}
	return nil
}

// CurrentValidator returns the validator of coll as listCollections
// reports it (options.validator), or nil when it has none.
func CurrentValidator(ctx context.Context, coll *mongo.Collection) (bson.Raw, error) {
	cur, err := coll.Database().ListCollections(ctx, bson.D{{Key: "name", Value: coll.Name()}})
	if err != nil {
		return nil, fmt.Errorf("replay: listCollections: %w", err)
	}
	defer cur.Close(ctx)
	if !cur.Next(ctx) {
		if err := cur.Err(); err != nil {
			return nil, fmt.Errorf("replay: listCollections: %w", err)
		}
		return nil, nil // no such collection yet: no validator
	}
	var info struct {
		Options struct {
			Validator bson.Raw `bson:"validator"`
		} `bson:"options"`
	}
	if err := cur.Decode(&info); err != nil {
		return nil, fmt.Errorf("replay: listCollections: %w", err)
	}
	if len(info.Options.Validator) <= 5 {
		return nil, nil
	}
	return info.Options.Validator, nil
}

// dryRun counts, with no write, the envelopes q selects (Matched), those
// a replay would not send or cannot decode (Undetermined), and of the
// others how many the target's validator (cfg's, or the target's own)
// now accepts (WouldPass) and rejects (WouldFail).
func dryRun(ctx context.Context, dlq *mongo.Collection, target writeguard.Collection, q bson.D, cfg *config) (Result, error) {
	res := Result{DryRun: true}
	validator, err := dryRunValidator(ctx, target, cfg)
	if err != nil {
		return res, err
	}
	res.Validator = validator
	matched, err := dlq.CountDocuments(ctx, q)
	if err != nil {
		return res, fmt.Errorf("replay: dry run: counting envelopes: %w", err)
	}
	res.Matched, res.Scanned = matched, matched
	eligible := replayable(q, cfg.redacted)
	// The eligible envelopes are decoded as the replay decodes them: one
	// that cannot be decoded (a hand-edited field of the wrong type) is
	// skipped by the replay, so it is undetermined here, not "would pass".
	n, bad, err := decodable(ctx, dlq, eligible)
	if err != nil {
		return res, err
	}
	if len(bad) > 0 {
		eligible = append(eligible, bson.E{Key: "_id", Value: bson.D{{Key: "$nin", Value: bad}}})
	}
	res.Undetermined = matched - n
	if validator == nil {
		res.WouldPass = n
		return res, nil
	}
	pass, err := countPassing(ctx, dlq, eligible, validator)
	if err != nil {
		return res, err
	}
	res.WouldPass, res.WouldFail = pass, n-pass
	return res, nil
}

// dryRunValidator returns the validator a dry run evaluates: WithValidator's,
// or the target's own as listCollections reports it (nil: none).
func dryRunValidator(ctx context.Context, target writeguard.Collection, cfg *config) (bson.Raw, error) {
	if cfg.validator != nil {
		raw, err := toRaw(cfg.validator)
		if err != nil {
			return nil, fmt.Errorf("replay: WithValidator: %w", err)
		}
		return raw, nil
	}
	coll := TargetCollection(target)
	if coll == nil {
		return nil, fmt.Errorf("replay: dry run: cannot read the validator of a %T target (use a *mongo.Collection, a Guarded made with writeguard.Wrap, or WithValidator)", target)
	}
	return CurrentValidator(ctx, coll)
}

// replayable narrows q to the envelopes a replay would send as they are
// stored: an original with an _id, neither truncated nor withheld, nor
// redacted unless redacted is set.
func replayable(q bson.D, redacted bool) bson.D {
	eligible := bson.D{
		{Key: "$and", Value: bson.A{q}},
		{Key: "original._id", Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "original_truncated", Value: bson.D{{Key: "$ne", Value: true}}},
		// Withheld fields make the stored original not the document; an
		// original kept as exact bytes (original_raw) has no original._id.
		{Key: "withheld", Value: bson.D{{Key: "$exists", Value: false}}},
	}
	if !redacted {
		eligible = append(eligible, bson.E{Key: "original_redacted", Value: bson.D{{Key: "$ne", Value: true}}})
	}
	return eligible
}

// countPassing counts the originals of the envelopes eligible selects
// that validator matches, with one aggregation on the server (an error
// wrapping ErrDryRunUnsupported when the server cannot run it).
func countPassing(ctx context.Context, dlq *mongo.Collection, eligible bson.D, validator bson.Raw) (int64, error) {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: eligible}},
		{{Key: "$replaceRoot", Value: bson.D{{Key: "newRoot", Value: "$original"}}}},
		{{Key: "$match", Value: validator}},
		{{Key: "$count", Value: "n"}},
	}
	cur, err := dlq.Aggregate(ctx, pipeline)
	if err != nil {
		return 0, unsupported(err)
	}
	defer cur.Close(ctx)
	var pass int64
	if cur.Next(ctx) {
		var c struct {
			N int64 `bson:"n"`
		}
		if err := cur.Decode(&c); err != nil {
			return 0, fmt.Errorf("replay: dry run: %w", err)
		}
		pass = c.N
	}
	if err := cur.Err(); err != nil {
		return 0, unsupported(err)
	}
	return pass, nil
}

// decodable counts the envelopes q selects that envelope.Decode reads, and
// returns the _ids of those it cannot (few: hand-edited or foreign
// documents). errInfo is not read.
func decodable(ctx context.Context, dlq *mongo.Collection, q bson.D) (int64, bson.A, error) {
	cur, err := dlq.Find(ctx, q, options.Find().SetProjection(bson.D{{Key: "err_info", Value: 0}, {Key: "err_info_raw", Value: 0}}))
	if err != nil {
		return 0, nil, fmt.Errorf("replay: dry run: reading envelopes: %w", err)
	}
	defer cur.Close(ctx)
	var n int64
	var bad bson.A
	for cur.Next(ctx) {
		if _, err := envelope.Decode(cur.Current); err != nil {
			id := cur.Current.Lookup("_id")
			bad = append(bad, bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)})
			continue
		}
		n++
	}
	if err := cur.Err(); err != nil {
		return 0, nil, fmt.Errorf("replay: dry run: reading envelopes: %w", err)
	}
	return n, bad, nil
}

// unsupported wraps a server's refusal of the dry-run pipeline in
// ErrDryRunUnsupported, and other errors plainly.
func unsupported(err error) error {
	if fs := policy.Extract(err); len(fs) > 0 && fs[0].Origin == policy.OriginServer && dryRunUnsupported(fs[0].Code) {
		return fmt.Errorf("replay: %w: %d %s: %s", ErrDryRunUnsupported, fs[0].Code, fs[0].CodeName, fs[0].Message)
	}
	return fmt.Errorf("replay: dry run: %w", err)
}

func toRaw(v any) (bson.Raw, error) {
	switch t := v.(type) {
	case bson.Raw:
		return t, t.Validate()
	case []byte:
		return bson.Raw(t), bson.Raw(t).Validate()
	}
	b, err := bson.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, nil
}
