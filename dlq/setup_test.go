package dlq

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/policy"
)

func TestSameKeys(t *testing.T) {
	want := []keyField{{"status", 1}, {"namespace", 1}}
	for _, c := range []struct {
		key  bson.D
		same bool
	}{
		{bson.D{{Key: "status", Value: int32(1)}, {Key: "namespace", Value: int32(1)}}, true},
		{bson.D{{Key: "status", Value: 1.0}, {Key: "namespace", Value: int64(1)}}, true},
		{bson.D{{Key: "namespace", Value: int32(1)}, {Key: "status", Value: int32(1)}}, false},
		{bson.D{{Key: "status", Value: int32(-1)}, {Key: "namespace", Value: int32(1)}}, false},
		{bson.D{{Key: "status", Value: int32(1)}}, false},
		{bson.D{{Key: "status", Value: "text"}, {Key: "namespace", Value: int32(1)}}, false},
	} {
		if got := sameKeys(mustMarshal(t, c.key), want); got != c.same {
			t.Errorf("sameKeys(%v) = %v", c.key, got)
		}
	}
}

func TestSameValidator(t *testing.T) {
	v := mustMarshal(t, Validator())
	ci := &collInfo{}
	ci.Options.Validator, ci.Options.ValidationLevel, ci.Options.ValidationAction = v, ValidationLevel, ValidationAction
	if !sameValidator(ci) {
		t.Error("same validator not recognised")
	}
	// Key order does not matter (the canonical form of Fingerprint).
	var d bson.D
	_ = bson.Unmarshal(v, &d)
	schema := d[0].Value.(bson.D)
	for i, j := 0, len(schema)-1; i < j; i, j = i+1, j-1 {
		schema[i], schema[j] = schema[j], schema[i]
	}
	ci.Options.Validator = mustMarshal(t, d)
	if !sameValidator(ci) {
		t.Error("reordered validator not recognised")
	}
	ci.Options.ValidationAction = "error"
	if sameValidator(ci) {
		t.Error("validationAction error taken as the same")
	}
	ci.Options.ValidationAction, ci.Options.Validator = ValidationAction, mustMarshal(t, bson.D{{Key: "a", Value: 1}})
	if sameValidator(ci) {
		t.Error("other validator taken as the same")
	}
}

// TestEnsureCollectionBadOptions fails before any I/O (the client never
// connects: there is no server at this address).
func TestEnsureCollectionBadOptions(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database("x")
	for _, c := range []struct {
		opt  SetupOption
		want string
	}{
		{WithTTL("", time.Millisecond), "at least 1s"},
		{WithTTL("last_seen", -time.Hour), "at least 1s"},
		{WithTTL("", 1<<31*time.Second), "maximum"},
	} {
		_, err := EnsureCollection(context.Background(), db, "dlq", c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	if _, err := EnsureCollection(context.Background(), db, ""); err == nil {
		t.Error("empty name: no error")
	}
	if _, err := EnsureCollection(context.Background(), nil, "dlq"); err == nil {
		t.Error("nil database: no error")
	}
}

func TestSetupReportString(t *testing.T) {
	rep := SetupReport{Namespace: "app.dlq", Features: []FeatureResult{
		{Feature: FeatureCollection, State: FeatureApplied, Detail: "created"},
		{Feature: FeatureValidator, State: FeatureUnsupported, Code: 238, CodeName: "NotImplemented", Message: "no"},
	}}
	want := "app.dlq:\n  collection: applied, created\n  validator: unsupported (238 NotImplemented: no)"
	if got := rep.String(); got != want {
		t.Errorf("String:\n%s\nwant\n%s", got, want)
	}
	if rep.State(FeatureValidator) != FeatureUnsupported || rep.State(FeatureTTLIndex) != "" {
		t.Error("State wrong")
	}
}

func TestServerErrorCodes(t *testing.T) {
	ce := mongo.CommandError{Code: 238, Name: "NotImplemented", Message: "nope"}
	if !isUnsupported(ce) || !hasCode(ce, 238) {
		t.Error("238 not unsupported")
	}
	if isUnsupported(mongo.CommandError{Code: 13, Name: "Unauthorized"}) {
		t.Error("13 taken as unsupported")
	}
	if c, _, msg := serverError(context.Canceled); c != 0 || msg == "" {
		t.Errorf("non-server error: %d %q", c, msg)
	}
}

// TestValidatorAcceptsBothForms: the DLQ's own validator, evaluated by the
// bed's $jsonSchema implementation, accepts a stored envelope whose
// original is a sub-document and one whose original is exact bytes, and
// rejects one with neither.
func TestValidatorAcceptsBothForms(t *testing.T) {
	v, err := jsonschema.Compile(Validator())
	if err != nil {
		t.Fatal(err)
	}
	plain := mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}})
	dotted := mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "a.b", Value: 1}})
	for _, orig := range []bson.Raw{plain, dotted} {
		doc, err := StoredDocument(envelope.New(envelope.Capture{Document: orig, Failure: failure121(nil), Namespace: "db.c", Operation: "insertOne", Now: t1}))
		if err != nil {
			t.Fatal(err)
		}
		if errInfo, err := v.ValidateRaw(doc); err != nil || errInfo != nil {
			t.Errorf("validator rejects %s: %v %v", doc, errInfo, err)
		}
		var d bson.D
		if err := bson.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		var without bson.D
		for _, e := range d {
			if e.Key != "original" && e.Key != "original_raw" {
				without = append(without, e)
			}
		}
		if errInfo, _ := v.ValidateRaw(mustMarshal(t, without)); errInfo == nil {
			t.Error("validator accepts an envelope without an original")
		}
	}
}

// failure121 is a 121 DocumentValidationFailure with errInfo.
func failure121(errInfo bson.Raw) *policy.Failure {
	return &policy.Failure{Code: 121, CodeName: "DocumentValidationFailure", Message: "Document failed validation", ErrInfo: errInfo}
}

// Stats on a nil collection is an error naming it, not a panic.
func TestStatsNilCollection(t *testing.T) {
	if _, err := Stats(context.Background(), nil, Filter{}); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("Stats(nil): %v, want an error naming the nil collection", err)
	}
}
