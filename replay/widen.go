package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// LevelValidated is the validationLevel at which a server promises that
// every stored document conforms to the validator (MongoDB 8.3+,
// featureFlagValidatedValidationLevel; called "constraint" in some
// plans). At that level the server refuses (2 BadValue) a collMod that
// changes the validator unless it also lowers the level, and refuses to
// set the level on an existing collection (mongodb/mongo
// src/mongo/db/shard_role/shard_catalog/document_validation_helpers.cpp
// checkValidationOptionsCanBeUsed); it also refuses every write with
// bypassDocumentValidation: true, so envelopes whose call set it cannot
// be replayed into such a collection.
const LevelValidated = "validated"

// ValidationOptionsOf returns coll's validationLevel and validationAction
// as listCollections reports them ("" when not set: the server's defaults
// strict and error; both "" when the collection does not exist).
func ValidationOptionsOf(ctx context.Context, coll *mongo.Collection) (level, action string, err error) {
	if coll == nil {
		return "", "", errors.New("replay: ValidationOptionsOf(nil)")
	}
	cur, err := coll.Database().ListCollections(ctx, bson.D{{Key: "name", Value: coll.Name()}})
	if err != nil {
		return "", "", fmt.Errorf("replay: listCollections: %w", err)
	}
	defer cur.Close(ctx)
	if !cur.Next(ctx) {
		return "", "", cur.Err()
	}
	var info struct {
		Options struct {
			Level  string `bson:"validationLevel"`
			Action string `bson:"validationAction"`
		} `bson:"options"`
	}
	if err := cur.Decode(&info); err != nil {
		return "", "", fmt.Errorf("replay: listCollections: %w", err)
	}
	return info.Options.Level, info.Options.Action, nil
}

// WidenResult is what WidenValidator did.
type WidenResult struct {
	// Commands are the collMod commands sent, in order; the last one was
	// applied.
	Commands []bson.D
	// Downgraded is true when the collection was at LevelValidated and is
	// now at validationLevel strict: the server takes a validator change
	// there only together with a lower level, and never sets validated
	// again on an existing collection. To have it again, create a new
	// collection at that level and copy the documents into it.
	Downgraded bool
}

// WidenValidator gives coll the validator (a document such as
// {$jsonSchema: ...}) before a replay, with collMod {validator}. When the
// server refuses because the collection is at LevelValidated, it sends
// collMod {validationLevel: "strict", validator} instead, the one change
// the server accepts there, and says so in the result (Downgraded). Any
// other refusal is returned, with the commands sent so far.
func WidenValidator(ctx context.Context, coll *mongo.Collection, validator any) (WidenResult, error) {
	var res WidenResult
	if coll == nil || validator == nil {
		return res, errors.New("replay: WidenValidator: nil collection or validator")
	}
	cmd := bson.D{{Key: "collMod", Value: coll.Name()}, {Key: "validator", Value: validator}}
	res.Commands = append(res.Commands, cmd)
	err := coll.Database().RunCommand(ctx, cmd).Err()
	if err == nil || !validatedRefusal(ctx, coll, err) {
		return res, err
	}
	cmd = bson.D{{Key: "collMod", Value: coll.Name()}, {Key: "validationLevel", Value: "strict"}, {Key: "validator", Value: validator}}
	res.Commands = append(res.Commands, cmd)
	if err := coll.Database().RunCommand(ctx, cmd).Err(); err != nil {
		return res, fmt.Errorf("replay: widening the validator of %s with a downgrade to strict: %w", coll.Name(), err)
	}
	res.Downgraded = true
	return res, nil
}

// validatedRefusal reports whether err is the server's refusal of a
// validator change at LevelValidated: 2 BadValue, and the collection at
// that level (or, where listCollections does not say, the server's
// message naming it).
func validatedRefusal(ctx context.Context, coll *mongo.Collection, err error) bool {
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 2 {
		return false
	}
	if level, _, lerr := ValidationOptionsOf(ctx, coll); lerr == nil && level == LevelValidated {
		return true
	}
	return strings.Contains(ce.Message, "Validation level is 'validated'")
}

// WidenAdvice returns, for a collection at validationLevel level, what to
// run (mongosh) to give it a wider validator before a replay, or "" when
// a plain collMod {validator} does it (any level but LevelValidated).
func WidenAdvice(coll, level string) string {
	if level != LevelValidated {
		return ""
	}
	return fmt.Sprintf("%s is at validationLevel %q: the server changes its validator only together with a lower level, "+
		"and never sets %q again on an existing collection. Run\n"+
		"  db.runCommand({collMod: %q, validationLevel: \"strict\", validator: <the wider validator>})\n"+
		"then replay (replay.WidenValidator does the same); to have %q again afterwards, create a new collection at that level "+
		"and copy the documents into it", coll, level, level, coll, level)
}
