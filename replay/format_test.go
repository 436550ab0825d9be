package replay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
)

// TestBuildModelFormat2: a format-2 envelope rebuilds its model with
// every option (C57's two updates).
func TestBuildModelFormat2(t *testing.T) {
	for _, m := range []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "items.$[it].qty", Value: -5}}}}).
			SetArrayFilters([]any{bson.D{{Key: "it.sku", Value: "A-1"}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "customer", Value: "ann"}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "vip", Value: true}}}}).
			SetCollation(&options.Collation{Locale: "en", Strength: 2}).SetHint("customer_1").SetUpsert(true),
	} {
		env := envelope.New(envelope.Capture{Model: m, Namespace: "db.c", Operation: "bulkWrite"})
		got, insert, reason := buildModel(&env, false)
		if reason != "" || insert {
			t.Fatalf("buildModel: %q", reason)
		}
		um := got.(*mongo.UpdateOneModel)
		orig := m.(*mongo.UpdateOneModel)
		if (orig.ArrayFilters != nil) != (um.ArrayFilters != nil) || (orig.Collation != nil) != (um.Collation != nil) ||
			(orig.Hint != nil) != (um.Hint != nil) || (orig.Upsert != nil) != (um.Upsert != nil) {
			t.Errorf("rebuilt %#v from %#v", um, orig)
		}
		if orig.Collation != nil && *um.Collation != *orig.Collation {
			t.Errorf("collation %+v", um.Collation)
		}
	}
	// An insert envelope of format 2 without _id is not sent.
	env := envelope.New(envelope.Capture{Document: mustMarshal(t, bson.D{{Key: "a", Value: 1}})})
	if _, _, reason := buildModel(&env, false); !strings.Contains(reason, "no _id") {
		t.Errorf("reason %q", reason)
	}
}

// TestWithheldNotReplayed: an envelope with withheld fields is skipped
// unless the caller supplies the complete original (C58), which must hold
// every withheld path.
func TestWithheldNotReplayed(t *testing.T) {
	env := envelope.Envelope{Kind: envelope.KindInsertOne, Original: mustMarshal(t, bson.D{{Key: "_id", Value: 7}, {Key: "name", Value: "Ann"}}),
		Withheld: []envelope.WithheldField{{Path: "ssn", Reason: "encrypt"}}}
	if _, _, reason := buildModel(&env, true); !strings.Contains(reason, "ssn (encrypt)") || !strings.Contains(reason, "WithWithheldValues") {
		t.Errorf("reason %q", reason)
	}
	full := mustMarshal(t, bson.D{{Key: "_id", Value: 7}, {Key: "name", Value: "Ann"}, {Key: "ssn", Value: bson.Binary{Subtype: 6, Data: []byte{1}}}})
	supplied, reason := supplyWithheld(context.Background(), func(context.Context, envelope.Envelope) (bson.Raw, error) { return full, nil }, &env)
	if reason != "" {
		t.Fatal(reason)
	}
	m, insert, reason := buildModel(supplied, false)
	if reason != "" || !insert || string(m.(*mongo.InsertOneModel).Document.(bson.Raw)) != string(full) {
		t.Errorf("supplied: %q", reason)
	}
	if len(env.Withheld) != 1 {
		t.Error("the stored envelope was changed")
	}
	_, reason = supplyWithheld(context.Background(), func(context.Context, envelope.Envelope) (bson.Raw, error) { return env.Original, nil }, &env)
	if !strings.Contains(reason, "lacks ssn") {
		t.Errorf("missing path: %q", reason)
	}
	_, reason = supplyWithheld(context.Background(), func(context.Context, envelope.Envelope) (bson.Raw, error) { return nil, errors.New("vault down") }, &env)
	if !strings.Contains(reason, "vault down") {
		t.Errorf("error: %q", reason)
	}
	if _, err := Run(context.Background(), nil, nil, WithWithheldValues(nil)); err == nil || !strings.Contains(err.Error(), "WithWithheldValues(nil)") {
		t.Errorf("nil func: %v", err)
	}
}

// TestByCallOptions: entries are sent in groups of equal call options.
func TestByCallOptions(t *testing.T) {
	a, b := &entry{call: "x"}, &entry{call: ""}
	c, d := &entry{call: "x"}, &entry{call: "y"}
	groups := byCallOptions([]*entry{a, b, c, d})
	if len(groups) != 3 || len(groups[0]) != 2 || groups[0][1] != c || groups[1][0] != b || groups[2][0] != d {
		t.Errorf("groups %v", groups)
	}
}
