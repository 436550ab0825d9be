package engine

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// The commands of a batch are the driver's: consecutive runs of one kind
// when ordered, one group per kind in the driver's order when unordered
// (mongo/bulk_write.go createBatches), each cut at maxWriteBatchSize
// statements and at maxMessageSizeBytes − CommandMargin bytes.
func TestCommandsSplitAsTheDriver(t *testing.T) {
	ins := func() mongo.WriteModel { return mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "x", Value: 1}}) }
	upd := func() mongo.WriteModel {
		return mongo.NewUpdateOneModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
	}
	rep := func() mongo.WriteModel {
		return mongo.NewReplaceOneModel().SetFilter(bson.D{}).SetReplacement(bson.D{})
	}
	updMany := func() mongo.WriteModel {
		return mongo.NewUpdateManyModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
	}
	del := func() mongo.WriteModel { return mongo.NewDeleteOneModel().SetFilter(bson.D{}) }
	delMany := func() mongo.WriteModel { return mongo.NewDeleteManyModel().SetFilter(bson.D{}) }
	models := []mongo.WriteModel{ins(), ins(), upd(), rep(), delMany(), ins(), updMany(), del(), del()}
	cases := []struct {
		ordered bool
		lim     Limits
		want    string
	}{
		{true, DefaultLimits, "[[0 1] [2 3] [4] [5] [6] [7 8]]"},
		{false, DefaultLimits, "[[0 1 5] [2 3] [6] [7 8] [4]]"},
		{false, Limits{MaxWriteBatchSize: 2}, "[[0 1] [5] [2 3] [6] [7 8] [4]]"},
		{true, Limits{MaxWriteBatchSize: 1}, "[[0] [1] [2] [3] [4] [5] [6] [7] [8]]"},
	}
	for _, tc := range cases {
		e := New(Config{Limits: func(context.Context) Limits { return tc.lim }})
		c := e.newCall("bulkWrite", tc.ordered, len(models))
		if err := c.prepareModels(models); err != nil {
			t.Fatal(err)
		}
		if got := indexes(c.commands(context.Background(), c.items)); got != tc.want {
			t.Errorf("ordered %v, %+v: commands %s, want %s", tc.ordered, tc.lim, got, tc.want)
		}
	}
	// Size: 5 documents of 1000 bytes; a message of 3000 bytes after the
	// margin holds 3 of them.
	docs := make([]any, 5)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: i}, {Key: "pad", Value: string(make([]byte, 1000-24))}}
	}
	e := New(Config{Limits: func(context.Context) Limits { return Limits{MaxMessageSizeBytes: CommandMargin + 3000} }})
	c := e.newCall("insertMany", true, len(docs))
	c.takeDocs(docs, false)
	c.prepareNext(context.Background(), true)
	if n := c.items[0].statementSize(); n != 1000 {
		t.Fatalf("document of %d bytes, want 1000", n)
	}
	if got := indexes(c.commands(context.Background(), c.items)); got != "[[0 1 2] [3 4]]" {
		t.Errorf("size split: %s, want [[0 1 2] [3 4]]", got)
	}
}

func indexes(cmds [][]*item) string {
	out := make([][]int, len(cmds))
	for i, cmd := range cmds {
		for _, it := range cmd {
			out[i] = append(out[i], it.index)
		}
	}
	return fmt.Sprint(out)
}

// TestStatementSize: a non-insert statement is measured as the document of
// its set parts (q, u, c, f, h; nil parts left out, as the driver leaves
// them out) plus statementOverhead; a part that does not marshal counts 0.
func TestStatementSize(t *testing.T) {
	filter := bson.D{{Key: "_id", Value: "a"}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "items.$[x].qty", Value: 2}}}}
	af := []any{bson.D{{Key: "x.sku", Value: "k"}}}
	cases := []struct {
		name  string
		model mongo.WriteModel
		parts bson.D
	}{
		{"update, every part", mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update).SetArrayFilters(af).SetHint("sku_1"),
			bson.D{{Key: "q", Value: filter}, {Key: "u", Value: update}, {Key: "f", Value: af}, {Key: "h", Value: "sku_1"}}},
		{"updateMany, no options", mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(update),
			bson.D{{Key: "q", Value: filter}, {Key: "u", Value: update}}},
		{"replace", mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(bson.D{{Key: "v", Value: 1}}),
			bson.D{{Key: "q", Value: filter}, {Key: "u", Value: bson.D{{Key: "v", Value: 1}}}}},
		{"delete", mongo.NewDeleteOneModel().SetFilter(filter).SetHint(bson.D{{Key: "sku", Value: 1}}),
			bson.D{{Key: "q", Value: filter}, {Key: "h", Value: bson.D{{Key: "sku", Value: 1}}}}},
		{"deleteMany", mongo.NewDeleteManyModel().SetFilter(filter),
			bson.D{{Key: "q", Value: filter}}},
	}
	for _, tc := range cases {
		want, err := bson.Marshal(tc.parts)
		if err != nil {
			t.Fatal(err)
		}
		it := &item{kind: KindUpdate, rare: &itemRare{model: tc.model}}
		if got := it.statementSize(); got != len(want)+statementOverhead {
			t.Errorf("%s: %d bytes, want %d + %d", tc.name, got, len(want), statementOverhead)
		}
	}
	bad := &item{kind: KindDelete, rare: &itemRare{model: mongo.NewDeleteOneModel().SetFilter(make(chan int))}}
	if got := bad.statementSize(); got != statementOverhead {
		t.Errorf("a filter that does not marshal: %d bytes, want %d", got, statementOverhead)
	}
	// The sizer is reusable after that failure.
	if got := (&item{kind: KindDelete, rare: &itemRare{model: cases[4].model}}).statementSize(); got <= statementOverhead {
		t.Errorf("after a failed measure: %d bytes", got)
	}
}
