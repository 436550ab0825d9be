package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// bedCollection is app.orders through a faultproxy (null backend) whose
// emulated validator requires qty, at the given level.
func bedCollection(t *testing.T, level string) *mongo.Collection {
	t.Helper()
	v := bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "required", Value: bson.A{"qty"}}}}}
	p, err := faultproxy.New(faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.ValidatorWithOptions("app.orders", v, faultproxy.ValidationOptions{Level: level}))))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(false).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c.Database("app").Collection("orders")
}

func rejected(t *testing.T, coll *mongo.Collection) bool {
	t.Helper()
	_, err := coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: bson.NewObjectID()}})
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) == 1 && we.WriteErrors[0].Code == 121 {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// TestWidenValidator: at strict one collMod widens the validator; at
// validated (where the server refuses a validator change alone) the
// change is sent with a downgrade to strict, and said.
func TestWidenValidator(t *testing.T) {
	wide := bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "properties", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "bsonType", Value: "int"}}}}}}}}
	for _, tc := range []struct {
		level      string
		commands   int
		downgraded bool
	}{
		{faultproxy.LevelStrict, 1, false},
		{faultproxy.LevelValidated, 2, true},
	} {
		t.Run(tc.level, func(t *testing.T) {
			coll := bedCollection(t, tc.level)
			if !rejected(t, coll) {
				t.Fatal("the bed's validator does not reject")
			}
			res, err := WidenValidator(context.Background(), coll, wide)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Commands) != tc.commands || res.Downgraded != tc.downgraded {
				t.Errorf("result %+v", res)
			}
			if tc.downgraded && res.Commands[1][1].Value != "strict" {
				t.Errorf("second command %v", res.Commands[1])
			}
			if rejected(t, coll) {
				t.Error("the validator was not widened")
			}
		})
	}
	if _, err := WidenValidator(context.Background(), nil, wide); err == nil {
		t.Error("nil collection accepted")
	}
}

func TestWidenAdvice(t *testing.T) {
	if WidenAdvice("orders", "strict") != "" || WidenAdvice("orders", "") != "" {
		t.Error("advice for a level that takes a plain collMod")
	}
	a := WidenAdvice("orders", LevelValidated)
	if !strings.Contains(a, `db.runCommand({collMod: "orders", validationLevel: "strict", validator:`) || !strings.Contains(a, "never sets") {
		t.Errorf("advice %q", a)
	}
}
