package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// qtyRequired is the validator of the validation-option tests.
var qtyRequired = bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "required", Value: bson.A{"qty"}}}}}

// insertCodes inserts docs unordered and returns the write error code of
// each document (0: accepted).
func insertCodes(t *testing.T, coll *mongo.Collection, docs ...any) []int {
	t.Helper()
	codes := make([]int, len(docs))
	_, err := coll.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		for _, we := range bwe.WriteErrors {
			codes[we.Index] = we.Code
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return codes
}

// TestValidationActions: error rejects, errorAndLog rejects and logs
// (MongoDB 8.1), warn stores and logs, level off checks nothing.
func TestValidationActions(t *testing.T) {
	good, bad := bson.D{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}}, bson.D{{Key: "_id", Value: 2}}
	for _, tc := range []struct {
		opts  faultproxy.ValidationOptions
		codes string
		logs  int
	}{
		{faultproxy.ValidationOptions{}, "[0 121]", 0},
		{faultproxy.ValidationOptions{Action: faultproxy.ActionErrorAndLog}, "[0 121]", 1},
		{faultproxy.ValidationOptions{Action: faultproxy.ActionWarn}, "[0 0]", 1},
		{faultproxy.ValidationOptions{Level: faultproxy.LevelOff}, "[0 0]", 0},
		{faultproxy.ValidationOptions{Level: faultproxy.LevelValidated, Action: faultproxy.ActionErrorAndLog}, "[0 121]", 1},
	} {
		t.Run(tc.opts.Level+"/"+tc.opts.Action, func(t *testing.T) {
			p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.ValidatorWithOptions("app.users", qtyRequired, tc.opts))))
			coll := connect(t, p.URI(), false).Database("app").Collection("users")
			codes := insertCodes(t, coll, good, bad)
			if got := fmt.Sprint(codes); got != tc.codes {
				t.Errorf("codes %v, want %s", codes, tc.codes)
			}
			log := p.ValidationLog()
			if len(log) != tc.logs {
				t.Fatalf("%d log entries, want %d: %+v", len(log), tc.logs, log)
			}
			if tc.logs == 1 && (log[0].Index != 1 || log[0].Namespace != "app.users" || len(log[0].ErrInfo) == 0) {
				t.Errorf("log entry %+v", log[0])
			}
		})
	}
	if _, err := faultproxy.NewScript(faultproxy.ValidatorWithOptions("app.users", qtyRequired,
		faultproxy.ValidationOptions{Level: faultproxy.LevelValidated, Action: faultproxy.ActionWarn})); err == nil ||
		!strings.Contains(err.Error(), "'warn' is not allowed") {
		t.Errorf("validated with warn: %v", err)
	}
	if _, err := faultproxy.NewScript(faultproxy.ValidatorWithOptions("app.users", qtyRequired,
		faultproxy.ValidationOptions{Level: "constraint"})); err == nil || !strings.Contains(err.Error(), "unknown validationLevel") {
		t.Errorf("unknown level: %v", err)
	}
}

// TestCollModValidated: at level validated the rules cannot be changed
// by collMod alone (2 BadValue, the server's message); they can together
// with a downgrade to strict, after which the level cannot be set back on
// the existing collection.
func TestCollModValidated(t *testing.T) {
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.ValidatorWithOptions("app.users", qtyRequired,
		faultproxy.ValidationOptions{Level: faultproxy.LevelValidated}))))
	db := connect(t, p.URI(), false).Database("app")
	ctx := context.Background()
	widened := bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "properties", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "bsonType", Value: "int"}}}}}}}}
	run := func(cmd bson.D) error { return db.RunCommand(ctx, cmd).Err() }
	code := func(err error) int32 {
		var ce mongo.CommandError
		if errors.As(err, &ce) {
			return ce.Code
		}
		return -1
	}

	err := run(bson.D{{Key: "collMod", Value: "users"}, {Key: "validator", Value: widened}})
	if code(err) != 2 || !strings.Contains(err.Error(), "Validator can not be changed when Validation level is 'validated'") {
		t.Fatalf("collMod validator at validated: %v", err)
	}
	if c := insertCodes(t, db.Collection("users"), bson.D{{Key: "_id", Value: 1}}); c[0] != 121 {
		t.Errorf("the refused collMod changed the rules: %v", c)
	}
	if err := run(bson.D{{Key: "collMod", Value: "users"}, {Key: "validationLevel", Value: "strict"}, {Key: "validator", Value: widened}}); err != nil {
		t.Fatalf("collMod to strict with a new validator: %v", err)
	}
	if c := insertCodes(t, db.Collection("users"), bson.D{{Key: "_id", Value: 2}}); c[0] != 0 {
		t.Errorf("the widened validator is not applied: %v", c)
	}
	err = run(bson.D{{Key: "collMod", Value: "users"}, {Key: "validationLevel", Value: "validated"}})
	if code(err) != 2 || !strings.Contains(err.Error(), "can not be set on existing collections") {
		t.Errorf("collMod back to validated: %v", err)
	}
	if err := run(bson.D{{Key: "collMod", Value: "users"}, {Key: "validationAction", Value: "errorAndLog"}}); err != nil {
		t.Errorf("collMod action errorAndLog at strict: %v", err)
	}
}
