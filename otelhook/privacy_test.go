package otelhook_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

const marker = "MARKER-123-45-6789"

// rejectBadSSN rejects documents flagged bad with a $jsonSchema errInfo
// quoting the offending value (consideredValue), as servers ≥ 5.0 do.
func rejectBadSSN(doc bson.Raw) (bson.Raw, bool) {
	if v, err := doc.LookupErr("bad"); err != nil || !v.Boolean() {
		return nil, false
	}
	info, _ := bson.Marshal(bson.D{{Key: "failingDocumentId", Value: doc.Lookup("_id")}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"},
		{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "properties"},
			{Key: "propertiesNotSatisfied", Value: bson.A{bson.D{
				{Key: "propertyName", Value: "ssn"},
				{Key: "details", Value: bson.A{bson.D{
					{Key: "operatorName", Value: "pattern"},
					{Key: "specifiedAs", Value: bson.D{{Key: "pattern", Value: "^[0-9-]+$"}}},
					{Key: "reason", Value: "regular expression did not match"},
					{Key: "consideredValue", Value: doc.Lookup("ssn")},
				}}},
			}}},
		}}},
	}}})
	return info, true
}

// TestNoDocumentValues runs a guarded InsertMany whose documents, _ids,
// errInfo (consideredValue), duplicate keyValue and driver error messages
// all hold a marker, with a lost reply (read-back of own writes), two
// dead-lettered documents and one duplicate, and checks that the marker
// is nowhere in the spans, the metrics or the log records.
func TestNoDocumentValues(t *testing.T) {
	hx := newHarness(t)
	fake := mocks.NewFake("shop.people").Validator(rejectBadSSN).Unique("ssn").Script(mocks.LoseReply())
	if err := fake.Seed(bson.D{{Key: "_id", Value: marker + "-seed"}, {Key: "ssn", Value: marker + "-dup"}}); err != nil {
		t.Fatal(err)
	}
	g := hx.guard(t, fake)
	var docs []bson.D
	for i := 0; i < 4; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("%s-id-%d", marker, i)}, {Key: "ssn", Value: fmt.Sprintf("%s-%d", marker, i)}})
	}
	docs[1] = append(docs[1], bson.E{Key: "bad", Value: true})
	docs[2] = append(docs[2], bson.E{Key: "bad", Value: true})
	docs = append(docs, bson.D{{Key: "_id", Value: marker + "-id-dup"}, {Key: "ssn", Value: marker + "-dup"}})

	_, err := g.InsertMany(bg, docs, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a *Report", err)
	}
	want := map[writeguard.Disposition]int{writeguard.AlreadyWritten: 2, writeguard.DeadLettered: 2, writeguard.Conflicted: 1}
	if got := r.Counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dispositions %v, want %v", got, want)
	}
	// The test has teeth: the values reach the driver's error and the
	// dead-letter envelopes (and never the Report's own text).
	if !strings.Contains(r.Err.Error(), marker) {
		t.Fatalf("the driver's error does not quote the marker; the test would prove nothing: %v", r.Err)
	}
	if strings.Contains(err.Error(), marker) {
		t.Errorf("Report.Error() quotes a document value: %v", err)
	}
	envs := hx.sink.all()
	if len(envs) != 2 || !strings.Contains(envs[0].ErrInfo.String(), marker) {
		t.Fatalf("envelopes %d, errInfo %v: want 2 quoting the marker", len(envs), envs)
	}

	dump := hx.dump(t)
	if !strings.Contains(dump, "insertMany shop.people") || !strings.Contains(dump, "writeguard.dispositions") {
		t.Fatalf("nothing recorded:\n%s", dump)
	}
	if strings.Contains(dump, "MARKER") {
		t.Errorf("a document value leaked into the telemetry:\n%s", dump)
	}
	if logs := hx.logs.String(); strings.Contains(logs, "MARKER") {
		t.Errorf("a document value leaked into the logs:\n%s", logs)
	}
}
