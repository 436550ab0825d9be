package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

// dlSeq numbers the payloads of BenchmarkDeadLetterThroughput.
var dlSeq atomic.Int64

// dlThroughputEnvelopes returns n envelopes of distinct rejected order
// lines (each a first capture: a distinct fingerprint), numbered from
// first, as the guarded collection builds them (envelope.New).
func dlThroughputEnvelopes(tb testing.TB, first, n int) []envelope.Envelope {
	tb.Helper()
	errInfo, err := bson.Marshal(bson.D{{Key: "failingDocumentId", Value: 0}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"},
		{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{{Key: "operatorName", Value: "required"}, {Key: "missingProperties", Value: bson.A{"qty"}}}}},
	}}})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	out := make([]envelope.Envelope, n)
	for i := range out {
		line := newOrderLine(first + i)
		id := bson.NewObjectID()
		body, err := bson.Marshal(line)
		if err != nil {
			tb.Fatal(err)
		}
		var d bson.D
		if err := bson.Unmarshal(body, &d); err != nil {
			tb.Fatal(err)
		}
		doc, err := bson.Marshal(append(bson.D{{Key: "_id", Value: id}}, d...))
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = envelope.New(envelope.Capture{
			Document: doc, DocumentID: bson.RawValue{Type: bson.TypeObjectID, Value: id[:]}, IDAssigned: true,
			Failure:   &policy.Failure{Code: 121, CodeName: "DocumentValidationFailure", Message: "Document failed validation", ErrInfo: errInfo},
			Namespace: benchDB + ".orders", Operation: "insertMany", BatchIndex: i, Now: now,
		})
	}
	return out
}

// dlCollection returns a fresh dead-letter collection set up by
// dlq.EnsureCollection (its unique fingerprint index, validator, TTL).
func dlCollection(b *testing.B, c *mongo.Client, name string) *mongo.Collection {
	b.Helper()
	coll := freshCollection(b, c, name)
	if _, err := dlq.EnsureCollection(context.Background(), c.Database(benchDB), name); err != nil {
		b.Fatal(err)
	}
	return coll
}

// BenchmarkDeadLetterThroughput measures dead-lettering throughput
// (envelopes/s) on the embedded server: Puts of batch envelopes (first
// captures of distinct payloads) into a MongoSink, with its unique-index
// check before every Put (WithIndexCheckInterval(0): the behaviour
// before issue 30 item 9) and with the default interval (5 s); into a
// FileSink (one write and one fsync per Put); and, as the floor, a plain
// unordered InsertMany of the same stored documents
// (dlq.StoredDocument) into a collection with the same indexes. The
// MongoSink runs insert-first (dlq.WithInsertFirst): FerretDB uses no
// index for the upserts' queries (see dlq.MongoSink). batch 1 is an
// ordered call's Put per command, 256 a full gathered Put.
func BenchmarkDeadLetterThroughput(b *testing.B) {
	client := connect(b, options.Client().ApplyURI(embeddedServer(b).URI()))
	ctx := context.Background()
	var sink *dlq.MongoSink // the MongoSink of the sub-benchmark running, for its index checks
	for _, batch := range []int{1, 16, 256} {
		put := map[string]func(b *testing.B) func([]envelope.Envelope) error{
			"insertmany": func(b *testing.B) func([]envelope.Envelope) error {
				coll := dlCollection(b, client, "dl_plain")
				return func(envs []envelope.Envelope) error {
					docs := make([]any, len(envs))
					for i, e := range envs {
						d, err := dlq.StoredDocument(e)
						if err != nil {
							return err
						}
						docs[i] = d
					}
					_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
					return err
				}
			},
			"mongosink-check-every-put": func(b *testing.B) func([]envelope.Envelope) error {
				s := dlq.NewMongoSink(dlCollection(b, client, "dl_every"), dlq.WithInsertFirst(), dlq.WithIndexCheckInterval(0))
				sink = s
				return func(envs []envelope.Envelope) error { return s.Put(ctx, envs) }
			},
			"mongosink-check-5s": func(b *testing.B) func([]envelope.Envelope) error {
				s := dlq.NewMongoSink(dlCollection(b, client, "dl_5s"), dlq.WithInsertFirst())
				sink = s
				return func(envs []envelope.Envelope) error { return s.Put(ctx, envs) }
			},
			"filesink": func(b *testing.B) func([]envelope.Envelope) error {
				s, err := dlq.NewFileSink(filepath.Join(b.TempDir(), "dlq.jsonl"))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				return func(envs []envelope.Envelope) error { return s.Put(ctx, envs) }
			},
		}
		for _, name := range []string{"insertmany", "mongosink-check-every-put", "mongosink-check-5s", "filesink"} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, name), func(b *testing.B) {
				sink = nil
				do := put[name](b)
				n := 0
				b.StopTimer()
				for i := 0; i < b.N; i++ {
					// Distinct payloads across runs and sub-benchmarks:
					// every Put is of first captures.
					envs := dlThroughputEnvelopes(b, int(dlSeq.Add(int64(batch)))-batch, batch)
					n += batch
					b.StartTimer()
					if err := do(envs); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
				}
				if el := b.Elapsed(); el > 0 {
					b.ReportMetric(float64(n)/el.Seconds(), "envelopes/s")
				}
				if sink != nil {
					b.ReportMetric(float64(sink.IndexChecks())/float64(b.N), "listIndexes/put")
				}
			})
		}
	}
}
