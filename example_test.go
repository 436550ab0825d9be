package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"reflect"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// Wrapping a collection is a one-line change: the guarded collection has
// the same write methods (InsertOne, InsertMany, BulkWrite, UpdateOne, ...,
// FindOneAndDelete), guarded, and every other method of *mongo.Collection.
func ExampleWrap() {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database("shop")
	orders, err := writeguard.Wrap(db.Collection("orders"),
		writeguard.WithDeadLetter(envelope.SinkFunc(func(ctx context.Context, envs []envelope.Envelope) error {
			// A real program stores these (see package dlq: MongoSink).
			return nil
		})),
	)
	if err != nil {
		log.Fatal(err)
	}
	_, err = orders.InsertMany(context.TODO(), []any{bson.D{{Key: "sku", Value: "S1"}, {Key: "qty", Value: 2}}})
	if err != nil && !writeguard.Handled(err) {
		log.Printf("not written: %v", err)
	}
	n, _ := orders.CountDocuments(context.TODO(), bson.D{}) // the driver's own method
	fmt.Println(n)
}

// A Report says what happened to each document. Here one document fails
// the collection's validator and goes to the dead-letter sink, one hits a
// unique index, and the others are written.
func ExampleReport() {
	fake := mocks.NewFake("shop.orders").Unique("sku").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, err := doc.LookupErr("qty")
		return nil, err != nil // qty is required
	})
	_ = fake.Seed(bson.D{{Key: "_id", Value: "old"}, {Key: "sku", Value: "S2"}, {Key: "qty", Value: 1}})
	var dlq []envelope.Envelope
	orders, err := writeguard.New(fake, writeguard.WithDeadLetter(envelope.SinkFunc(func(_ context.Context, envs []envelope.Envelope) error {
		dlq = append(dlq, envs...)
		return nil
	})))
	if err != nil {
		log.Fatal(err)
	}
	docs := []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "sku", Value: "S1"}},
		bson.D{{Key: "_id", Value: 2}, {Key: "sku", Value: "S3"}, {Key: "qty", Value: 1}},
		bson.D{{Key: "_id", Value: 3}, {Key: "sku", Value: "S2"}, {Key: "qty", Value: 1}},
		bson.D{{Key: "_id", Value: 4}, {Key: "sku", Value: "S4"}, {Key: "qty", Value: 1}},
	}
	res, err := orders.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false))

	var report *writeguard.Report
	if errors.As(err, &report) {
		for _, o := range report.Outcomes {
			code := int32(0)
			if o.Failure != nil {
				code = o.Failure.Code
			}
			fmt.Printf("%d: %s (code %d)\n", o.Index, o.Disposition, code)
		}
	}
	fmt.Println("written:", len(res.InsertedIDs), "dead-lettered:", len(dlq))
	fmt.Println("dead-lettered?", errors.Is(err, writeguard.ErrDeadLettered), "conflict?", errors.Is(err, writeguard.ErrConflict))
	fmt.Println("handled:", writeguard.Handled(err))
	// Output:
	// 0: dead_lettered (code 121)
	// 1: written (code 0)
	// 2: conflict (code 11000)
	// 3: written (code 0)
	// written: 2 dead-lettered: 1
	// dead-lettered? true conflict? true
	// handled: false
}

// A custom classifier runs before the default table. Here a team that
// knows its Atlas proxy's errors (8000 AtlasError, unknown to the table)
// to be transient has them retried.
func ExampleWithClassifier() {
	fake := mocks.NewFake("shop.orders").Script(
		mocks.Reply(`{"ok":0,"code":8000,"codeName":"AtlasError","errmsg":"connection pool reset"}`))
	atlas := policy.ClassifierFunc(func(f policy.Failure) policy.Class {
		if f.Code == 8000 && f.CodeName == "AtlasError" {
			return policy.Transient
		}
		return policy.Unknown // let the default table decide
	})
	orders, err := writeguard.New(fake, writeguard.WithClassifier(atlas), writeguard.WithBackoff(policy.Backoff{Base: time.Millisecond}))
	if err != nil {
		log.Fatal(err)
	}
	_, err = orders.InsertOne(context.Background(), bson.D{{Key: "sku", Value: "S1"}})
	fmt.Println("err:", err)
	fmt.Println("attempts:", len(fake.Calls()), "stored:", len(fake.Docs()))
	// Output:
	// err: <nil>
	// attempts: 2 stored: 1
}

// Finishing a call after a deadline (CASES C62): the reply to an
// InsertMany was still in flight when the context ended, so both
// documents are unknown (the server applied them). Report.Remaining gives
// them back with the _ids writeguard assigned; sending them again with
// Remaining's context stores nothing twice (a duplicate key on their own
// _id is read back: already_written). Re-sending the caller's own slice
// would store two more copies.
func ExampleReport_Remaining() {
	fake := mocks.NewFake("shop.orders").Script(mocks.Hang()) // the server applies, the reply never comes
	orders, err := writeguard.New(fake)
	if err != nil {
		log.Fatal(err)
	}
	docs := []any{bson.D{{Key: "sku", Value: "S1"}}, bson.D{{Key: "sku", Value: "S2"}}}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = orders.InsertMany(ctx, docs)
	cancel()

	var report *writeguard.Report
	if errors.As(err, &report) {
		rest := report.Remaining()
		fmt.Println(rest, rest.Left)
		if rest.Len() > 0 {
			_, err = orders.InsertMany(rest.Context(context.Background()), rest.Documents)
		}
	}
	fmt.Println("error:", err)
	fmt.Println("stored:", len(fake.Docs()))
	// Output:
	// insertMany: 2 to send again, 0 left out []
	// error: <nil>
	// stored: 2
}

// Marking some models of a BulkWrite idempotent: after a lost reply the
// $set (index 1) is sent again, the $inc (index 0) is not, and ends
// unknown: applied once, reported.
func ExampleIdempotentModels() {
	fake := mocks.NewFake("shop.stock").Script(mocks.LoseReply())
	_ = fake.Seed(bson.D{{Key: "_id", Value: "S1"}, {Key: "qty", Value: 5}})
	stock, err := writeguard.New(fake)
	if err != nil {
		log.Fatal(err)
	}
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "S1"}}).
			SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "qty", Value: -1}}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "S1"}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "checked", Value: true}}}}),
	}
	ctx := writeguard.IdempotentModels(context.Background(), 1)
	_, err = stock.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var report *writeguard.Report
	if errors.As(err, &report) {
		for _, o := range report.Outcomes {
			fmt.Println(o.Index, o.Disposition)
		}
	}
	fmt.Println("qty:", fake.Docs()[0].Lookup("qty").AsInt64())
	// Output:
	// 0 unknown
	// 1 written
	// qty: 4
}

// A collection configured with a BSON registry of its own (here: cents as
// a decimal string) and BSON options: give writeguard the same, so that
// the documents it encodes (inserts, and the envelopes of rejected
// updates) are the ones the driver would have encoded.
func ExampleWithRegistry() {
	type cents int64
	reg := bson.NewRegistry()
	reg.RegisterTypeEncoder(reflect.TypeOf(cents(0)), bson.ValueEncoderFunc(
		func(_ bson.EncodeContext, vw bson.ValueWriter, v reflect.Value) error {
			return vw.WriteString(fmt.Sprintf("%d.%02d", v.Int()/100, v.Int()%100))
		}))
	bo := &options.BSONOptions{NilSliceAsEmpty: true}
	// With a *mongo.Collection: db.Collection("orders",
	// options.Collection().SetRegistry(reg).SetBSONOptions(bo)).
	fake := mocks.NewFake("shop.orders")
	orders, err := writeguard.New(fake, writeguard.WithRegistry(reg), writeguard.WithBSONOptions(bo))
	if err != nil {
		log.Fatal(err)
	}
	type line struct {
		ID    string   `bson:"_id"`
		Price cents    `bson:"price"`
		Tags  []string `bson:"tags"`
	}
	if _, err := orders.InsertOne(context.Background(), line{ID: "o-1", Price: 1999}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(fake.Docs()[0])
	// Output:
	// {"_id": "o-1","price": "19.99","tags": []}
}
