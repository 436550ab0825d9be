package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// orderSchema is the order-line validator of the failure benchmarks: a
// document with qty < 1, a bad currency or a missing field fails it.
func orderSchema() bson.D {
	return bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "bsonType", Value: "object"},
		{Key: "required", Value: bson.A{"order_id", "line", "sku", "qty", "unit_price", "currency"}},
		{Key: "properties", Value: bson.D{
			{Key: "order_id", Value: bson.D{{Key: "bsonType", Value: "string"}, {Key: "pattern", Value: "^ORD-[0-9]+$"}}},
			{Key: "line", Value: bson.D{{Key: "bsonType", Value: "int"}, {Key: "minimum", Value: 1}}},
			{Key: "qty", Value: bson.D{{Key: "bsonType", Value: "int"}, {Key: "minimum", Value: 1}, {Key: "maximum", Value: 10000}}},
			{Key: "unit_price", Value: bson.D{{Key: "bsonType", Value: "double"}, {Key: "minimum", Value: 0}}},
			{Key: "currency", Value: bson.D{{Key: "enum", Value: bson.A{"EUR", "USD", "GBP"}}}},
			{Key: "tags", Value: bson.D{{Key: "bsonType", Value: "array"}, {Key: "items", Value: bson.D{{Key: "bsonType", Value: "string"}}}}},
		}},
	}}}
}

// invalidOrderLine is an order line that fails orderSchema on two
// properties (qty and currency).
func invalidOrderLine(seq int) orderLine {
	l := newOrderLine(seq)
	l.Qty = -1
	l.Currency = "XXX"
	return l
}

// orderErrInfo returns the errInfo a MongoDB 5.0+ server gives for
// invalidOrderLine under orderSchema (built by faultproxy's $jsonSchema
// emulation).
func orderErrInfo(tb testing.TB) bson.Raw {
	tb.Helper()
	v, err := jsonschema.Compile(orderSchema())
	if err != nil {
		tb.Fatal(err)
	}
	var d bson.D
	if err := bson.Unmarshal(withID(tb, invalidOrderLine(7)), &d); err != nil {
		tb.Fatal(err)
	}
	info := v.Validate(d)
	if info == nil {
		tb.Fatal("the invalid order line passes the schema")
	}
	raw, err := bson.Marshal(info)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// withID marshals doc with a new ObjectID _id first, as writeguard
// prepares a document.
func withID(tb testing.TB, doc any) bson.Raw {
	tb.Helper()
	body, err := bson.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := bson.Marshal(bson.D{{Key: "_id", Value: bson.NewObjectID()}})
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out[:len(out)-1], body[4:]...)
	n := len(out)
	out[0], out[1], out[2], out[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return out
}

// failures returns representative failures, extracted by policy.Extract
// from the errors the driver really returns.
func failures(tb testing.TB) map[string]policy.Failure {
	tb.Helper()
	one := func(reply bson.D) policy.Failure {
		raw, err := bson.Marshal(reply)
		if err != nil {
			tb.Fatal(err)
		}
		err = mocks.ReplyError(mocks.OpInsertMany, raw)
		fs := policy.Extract(err)
		if len(fs) == 0 {
			tb.Fatalf("no failure extracted from %v", err)
		}
		return fs[0]
	}
	return map[string]policy.Failure{
		"121-validation": one(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0}, {Key: "writeErrors", Value: bson.A{
			bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 121}, {Key: "errInfo", Value: orderErrInfo(tb)}, {Key: "errmsg", Value: "Document failed validation"}}}}}),
		"11000-duplicate": one(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0}, {Key: "writeErrors", Value: bson.A{
			bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 11000}, {Key: "keyPattern", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "keyValue", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "errmsg", Value: "E11000 duplicate key error"}}}}}),
		"10107-stepdown-labelled": one(bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: 10107}, {Key: "codeName", Value: "NotWritablePrimary"},
			{Key: "errmsg", Value: "not primary"}, {Key: "errorLabels", Value: bson.A{"RetryableWriteError"}}}),
		"462-overload": one(bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: 462}, {Key: "codeName", Value: "IngressRequestRateLimitExceeded"},
			{Key: "errmsg", Value: "Rate limiter 'ingressRequestRateLimiter' rate exceeded"}, {Key: "errorLabels", Value: bson.A{"SystemOverloadedError", "RetryableError"}}}),
		"network":      policy.Extract(mocks.NetworkError(mocks.OpInsertMany))[0],
		"8000-unknown": one(bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: 8000}, {Key: "codeName", Value: "AtlasError"}, {Key: "errmsg", Value: "quota"}}),
	}
}

// BenchmarkClassify is policy.Default().Classify on failures of each kind
// (goal: 0 allocs/op).
func BenchmarkClassify(b *testing.B) {
	table := policy.Default()
	fs := failures(b)
	for _, name := range []string{"121-validation", "11000-duplicate", "10107-stepdown-labelled", "462-overload", "network", "8000-unknown"} {
		f := fs[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var c policy.Class
			for b.Loop() {
				c = table.Classify(f)
			}
			_ = c
		})
	}
}

// hundredErrors is the driver's mongo.BulkWriteException for an unordered
// insertMany of which all 100 documents failed validation (code 121 with
// errInfo).
func hundredErrors(tb testing.TB) error {
	tb.Helper()
	info := orderErrInfo(tb)
	wes := make(bson.A, 100)
	for i := range wes {
		wes[i] = bson.D{{Key: "index", Value: int32(i)}, {Key: "code", Value: int32(121)}, {Key: "errInfo", Value: info}, {Key: "errmsg", Value: "Document failed validation"}}
	}
	raw, err := bson.Marshal(bson.D{{Key: "ok", Value: 1.0}, {Key: "n", Value: int32(0)}, {Key: "writeErrors", Value: wes}})
	if err != nil {
		tb.Fatal(err)
	}
	return mocks.ReplyError(mocks.OpInsertMany, raw)
}

// BenchmarkExtractBulkWriteException100 is policy.Extract of a
// BulkWriteException with 100 write errors (one Failure each).
func BenchmarkExtractBulkWriteException100(b *testing.B) {
	err := hundredErrors(b)
	if n := len(policy.Extract(err)); n != 100 {
		b.Fatalf("Extract gave %d failures, want 100", n)
	}
	b.ReportAllocs()
	var fs []policy.Failure
	for b.Loop() {
		fs = policy.Extract(err)
	}
	_ = fs
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/failure")
}

// corpusErrInfos returns every errInfo of ../testdata/errinfo_corpus.json
// (Extended JSON, decoded to BSON); entries with no errInfo are left out.
func corpusErrInfos(tb testing.TB) []bson.Raw {
	tb.Helper()
	data, err := os.ReadFile("../testdata/errinfo_corpus.json")
	if err != nil {
		tb.Fatal(err)
	}
	var entries []struct {
		ID      string          `json:"id"`
		ErrInfo json.RawMessage `json:"errInfo"`
	}
	if err := json.Unmarshal(data, &entries); err != nil {
		tb.Fatal(err)
	}
	var out []bson.Raw
	for _, e := range entries {
		if len(e.ErrInfo) == 0 || bytes.Equal(bytes.TrimSpace(e.ErrInfo), []byte("null")) {
			continue
		}
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON(e.ErrInfo, false, &raw); err != nil {
			tb.Fatalf("corpus entry %s: %v", e.ID, err)
		}
		out = append(out, raw)
	}
	if len(out) == 0 {
		tb.Fatal("no errInfo in the corpus")
	}
	return out
}

// BenchmarkFailingKeywordsCorpus runs envelope.FailingKeywords over every
// errInfo of the corpus per op; ns/entry and allocs/entry are per errInfo.
func BenchmarkFailingKeywordsCorpus(b *testing.B) {
	infos := corpusErrInfos(b)
	b.ReportAllocs()
	var kw []string
	for b.Loop() {
		for _, info := range infos {
			kw = envelope.FailingKeywords(info)
		}
	}
	_ = kw
	n := float64(b.N) * float64(len(infos))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/entry")
	b.ReportMetric(float64(len(infos)), "entries")
}

// BenchmarkEnvelopeBuild builds one dead-letter envelope as writeguard
// does for a 121: FailingKeywords, FailingPaths, Fingerprint and the
// struct.
func BenchmarkEnvelopeBuild(b *testing.B) {
	info := orderErrInfo(b)
	doc := withID(b, invalidOrderLine(7))
	id := doc.Lookup("_id")
	now := time.Now().UTC().Truncate(time.Millisecond)
	b.ReportAllocs()
	var env envelope.Envelope
	for b.Loop() {
		env = envelope.Envelope{
			SchemaVersion:   envelope.SchemaVersion,
			Fingerprint:     envelope.Fingerprint(doc, true),
			Original:        doc,
			DocumentID:      id,
			IDAssigned:      true,
			ErrInfo:         info,
			FailingKeywords: envelope.FailingKeywords(info),
			FailingPaths:    envelope.FailingPaths(info),
			Code:            121,
			CodeName:        "DocumentValidationFailure",
			ErrMsg:          "Document failed validation",
			Namespace:       "bench.orders",
			Operation:       "insertMany",
			FirstSeen:       now,
			LastSeen:        now,
			Attempts:        1,
			Status:          envelope.StatusPending,
		}
	}
	_ = env
}

// BenchmarkFingerprint is envelope.Fingerprint of an order line with a
// writeguard-assigned _id (dropped from the hash).
func BenchmarkFingerprint(b *testing.B) {
	doc := withID(b, newOrderLine(7))
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	var fp string
	for b.Loop() {
		fp = envelope.Fingerprint(doc, true)
	}
	_ = fp
}
