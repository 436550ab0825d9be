package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
)

// commandCounter counts the write commands (insert, update, delete) a
// client sends, from the driver's command monitor.
type commandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "insert", "update", "delete":
			c.mu.Lock()
			c.n[e.CommandName]++
			c.mu.Unlock()
		}
	}}
}

func (c *commandCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	c.n = map[string]int{}
	return t
}

// TestCommandsAgainstRaw sends the same inputs through the raw driver and
// through writeguard (which forms the server commands itself: one driver
// call, one command) to faultproxy's null backend, and counts the write
// commands each sends. writeguard sends no more than the driver, except
// where its margin (engine.CommandMargin, 16 KiB of maxMessageSizeBytes
// kept for the message's own bytes) forces a split the driver does not
// make: the "boundary" input, whose statements total within 16 KiB of
// maxMessageSizeBytes. Run with -v to print the figures.
func TestCommandsAgainstRaw(t *testing.T) {
	if testing.Short() {
		t.Skip("moves about 200 MB through the proxy; skipped with -short")
	}
	var cc commandCounter
	cc.n = map[string]int{}
	c := connect(t, options.Client().ApplyURI(newProxy(t).URI()).SetMonitor(cc.monitor()).SetRetryWrites(false))
	coll := c.Database(benchDB).Collection("commands")
	g, err := writeguard.Wrap(coll)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	docsOf := func(n, size int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = bson.D{{Key: "_id", Value: i}, {Key: "pad", Value: strings.Repeat("x", max(0, size-30))}}
		}
		return out
	}
	models := func(kinds string) []mongo.WriteModel {
		var out []mongo.WriteModel
		for i, k := range kinds {
			switch k {
			case 'i':
				out = append(out, mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: i}}))
			case 'u':
				out = append(out, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: i}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}))
			case 'r':
				out = append(out, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: i}}).SetReplacement(bson.D{{Key: "x", Value: 1}}))
			case 'm':
				out = append(out, mongo.NewUpdateManyModel().SetFilter(bson.D{{Key: "_id", Value: i}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}))
			case 'd':
				out = append(out, mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: i}}))
			case 'D':
				out = append(out, mongo.NewDeleteManyModel().SetFilter(bson.D{{Key: "_id", Value: i}}))
			}
		}
		return out
	}
	type input struct {
		name    string
		extra   bool // the margin may force one more command
		raw, wg func() error
	}
	insertMany := func(docs []any, ordered bool) (func() error, func() error) {
		o := options.InsertMany().SetOrdered(ordered)
		return func() error { _, err := coll.InsertMany(ctx, docs, o); return err },
			func() error { _, err := g.InsertMany(ctx, docs, o); return err }
	}
	bulk := func(ms []mongo.WriteModel, ordered bool) (func() error, func() error) {
		o := options.BulkWrite().SetOrdered(ordered)
		return func() error { _, err := coll.BulkWrite(ctx, ms, o); return err },
			func() error { _, err := g.BulkWrite(ctx, ms, o); return err }
	}
	var inputs []input
	add := func(name string, extra bool, raw, wg func() error) {
		inputs = append(inputs, input{name, extra, raw, wg})
	}
	r, w := insertMany(docsOf(100, 100), true)
	add("InsertMany 100 x 100 B", false, r, w)
	r, w = insertMany(docsOf(100001, 40), true)
	add("InsertMany 100,001 x 40 B (maxWriteBatchSize)", false, r, w)
	r, w = insertMany(docsOf(100, 1000000), false)
	add("InsertMany 100 x 1 MB (maxMessageSizeBytes)", false, r, w)
	r, w = insertMany(docsOf(48, 999_700), true)
	add("InsertMany 48 x 999,700 B (boundary: 47.99 MB)", true, r, w)
	for _, ordered := range []bool{true, false} {
		r, w = bulk(models("iiuurmiDddiu"), ordered)
		add(fmt.Sprintf("BulkWrite 12 models, 6 kinds, ordered %v", ordered), false, r, w)
	}
	for _, in := range inputs {
		cc.take()
		_ = in.raw()
		raw := cc.take()
		if err := in.wg(); err != nil {
			t.Fatalf("%s: writeguard: %v", in.name, err)
		}
		wg := cc.take()
		t.Logf("commands: %-50s raw driver %3d, writeguard %3d", in.name, raw, wg)
		if wg > raw && !(in.extra && wg == raw+1) || wg < raw {
			t.Errorf("%s: writeguard sent %d commands, the driver %d", in.name, wg, raw)
		}
	}
}
