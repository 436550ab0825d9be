package writeguard_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// Nil option builders, untyped or typed, are skipped as the driver skips
// them: no panic, the defaults apply.
func TestNilOptionBuilders(t *testing.T) {
	fake := mocks.NewFake("db.nilopts")
	g, err := writeguard.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	var im *options.InsertManyOptionsBuilder
	if _, err := g.InsertMany(context.Background(), []any{bson.D{{Key: "n", Value: 1}}}, im, nil); err != nil {
		t.Errorf("InsertMany with nil builders: %v", err)
	}
	var um *options.UpdateManyOptionsBuilder
	if _, err := g.UpdateMany(context.Background(), bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: 2}}}}, um, nil); err != nil {
		t.Errorf("UpdateMany with nil builders: %v", err)
	}
	var bw *options.BulkWriteOptionsBuilder
	//lint:ignore SA1012 a nil ctx is what is tested: WithIdempotent takes it as context.Background()
	if _, err := g.BulkWrite(writeguard.WithIdempotent(nil), nil, bw); err == nil {
		t.Error("BulkWrite of no models: want the driver's invalid-argument error")
	}
	if got := len(fake.Docs()); got != 1 {
		t.Errorf("%d documents stored, want 1", got)
	}
}
