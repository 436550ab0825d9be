package dlq

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	t1 = t0.Add(time.Minute)
)

// sampleEnvelope is a rejected insert's envelope as the guarded collection
// builds it (envelope.New), with every field of a capture set.
func sampleEnvelope(tb testing.TB) envelope.Envelope {
	tb.Helper()
	oid := bson.NewObjectID()
	orig := mustMarshal(tb, bson.D{{Key: "_id", Value: oid}, {Key: "sku", Value: "A-1"}, {Key: "qty", Value: int32(0)}})
	var errInfo bson.Raw
	err := bson.UnmarshalExtJSON([]byte(`{"failingDocumentId": {"$oid": "`+oid.Hex()+`"}, "details": {"operatorName": "$jsonSchema",
		"schemaRulesNotSatisfied": [{"operatorName": "properties", "propertiesNotSatisfied": [{"propertyName": "qty",
		"details": [{"operatorName": "minimum", "specifiedAs": {"minimum": 1}, "reason": "comparison failed", "consideredValue": 0}]}]}]}}`), false, &errInfo)
	if err != nil {
		tb.Fatal(err)
	}
	return envelope.New(envelope.Capture{
		Document: orig, DocumentID: orig.Lookup("_id"), IDAssigned: true,
		Failure: &policy.Failure{Code: 121, CodeName: "DocumentValidationFailure", Message: "Document failed validation",
			ErrInfo: errInfo, Labels: []string{"SomeLabel"}},
		Namespace: "shop.orders", Operation: "insertMany", BatchIndex: 3, Now: t0,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
	})
}

func mustMarshal(tb testing.TB, v any) bson.Raw {
	tb.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return b
}
