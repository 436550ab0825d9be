package envelope

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// fitSample is an envelope with an errInfo of 50 failing properties, each
// repeating a 1,500-byte value (over SmallErrInfo in all), and a 2 KB
// original.
func fitSample(t *testing.T) Envelope {
	t.Helper()
	var props bson.A
	for i := range 50 {
		props = append(props, bson.D{{Key: "propertyName", Value: fmt.Sprintf("p%02d", i)}, {Key: "details", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "minimum"}, {Key: "specifiedAs", Value: bson.D{{Key: "minimum", Value: int32(0)}}},
			{Key: "reason", Value: "comparison failed"}, {Key: "consideredValue", Value: strings.Repeat("v", 1500)},
		}}}})
	}
	env := sampleEnvelope(t)
	env.ErrInfo = mustMarshal(t, bson.D{{Key: "failingDocumentId", Value: int32(5)}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"}, {Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "properties"}, {Key: "propertiesNotSatisfied", Value: props}}}}}}})
	env.FailingKeywords, env.FailingPaths = FailingKeywords(env.ErrInfo), FailingPaths(env.ErrInfo)
	env.Original = mustMarshal(t, bson.D{{Key: "_id", Value: int32(5)}, {Key: "a", Value: strings.Repeat("a", 1000)}, {Key: "b", Value: strings.Repeat("b", 1000)}})
	env.Fingerprint = Fingerprint(env.Original, false)
	return env
}

func mustSize(t *testing.T, env Envelope) int {
	t.Helper()
	n, err := storedSize(env)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func cutFields(env Envelope) []string {
	var out []string
	for _, c := range env.Cut {
		out = append(out, c.Field)
	}
	return out
}

// TestFitBoundaries: at each boundary the envelope gives up exactly the
// next thing in the order fitEnvelope documents, and the original last.
func TestFitBoundaries(t *testing.T) {
	env := fitSample(t)
	full := mustSize(t, env)

	// Exactly at the limit: nothing cut.
	if got := fitEnvelope(env, full); len(got.Cut) != 0 || !bytes.Equal(got.ErrInfo, env.ErrInfo) {
		t.Errorf("at the limit: cut %v", cutFields(got))
	}

	// One byte over: errInfo's repeated values go, nothing else.
	step1 := env
	step1.ErrInfo = dropKeys(env.ErrInfo, isConsideredValueKey, 0)
	step1.Cut = []CutField{{Field: "err_info.consideredValue", Size: len(env.ErrInfo)}}
	got := fitEnvelope(env, full-1)
	if fmt.Sprint(cutFields(got)) != "[err_info.consideredValue]" || !bytes.Equal(got.ErrInfo, step1.ErrInfo) ||
		!bytes.Equal(got.Original, env.Original) {
		t.Errorf("one byte over: cut %v", cutFields(got))
	}
	if s1 := mustSize(t, step1); s1 > full-1 {
		t.Fatalf("step 1 is %d bytes", s1)
	}

	// One byte under step 1: the details arrays keep their first 16 items,
	// counted.
	s1 := mustSize(t, step1)
	got = fitEnvelope(env, s1-1)
	if fmt.Sprint(cutFields(got)) != "[err_info.consideredValue err_info.details]" {
		t.Fatalf("under step 1: cut %v", cutFields(got))
	}
	if c := got.Cut[1]; c.Total != 1+50+50 || c.Kept != 1+16+16 {
		t.Errorf("details cut counts %+v", c)
	}
	if v := got.ErrInfo.Lookup("details", "schemaRulesNotSatisfied", "0", "propertiesNotSatisfied", "0", "propertyName"); v.StringValue() != "p00" {
		t.Errorf("first failing item not kept: %v", got.ErrInfo)
	}
	if _, err := got.ErrInfo.LookupErr("details", "schemaRulesNotSatisfied", "0", "propertiesNotSatisfied", "16"); err == nil {
		t.Error("more than 16 items kept")
	}
	if !bytes.Equal(got.Original, env.Original) || len(got.FailingPaths) != 50 {
		t.Error("original or failing_paths changed while errInfo could give way")
	}

	// Room for the original and nothing of errInfo but its summary: the
	// original stays whole; the lists are cut only when they are long.
	summary := step1
	summary.ErrInfo = errInfoSummary(env.ErrInfo)
	summary.Cut = append(summary.Cut, CutField{Field: "err_info.details", Size: 1, Total: 102, Kept: 4}, CutField{Field: "err_info", Size: 1})
	limit := mustSize(t, summary)
	got = fitEnvelope(env, limit)
	if got.OriginalPieces != nil || !bytes.Equal(got.Original, env.Original) {
		t.Errorf("original set apart although it fits with the errInfo summary: cut %v", cutFields(got))
	}
	if n := mustSize(t, got); n > limit {
		t.Errorf("fitted envelope %d bytes over the limit %d", n, limit)
	}
	if ei := got.ErrInfo; !ei.Lookup("writeguard_truncated").Boolean() || ei.Lookup("failingDocumentId").Int32() != 5 {
		t.Errorf("err_info summary %v", ei)
	}

	// The original alone cannot fit: it is set apart, whole, and the
	// diagnostics give way only as far as they do not fit beside it.
	tight := mustSize(t, Envelope{Original: env.Original}) - 500
	got = fitEnvelope(env, tight)
	fields := cutFields(got)
	if got.OriginalPieces == nil || got.OriginalTruncated || !bytes.Equal(got.Original, env.Original) || slices.Contains(fields, "original") {
		t.Fatalf("cut %v, pieces %+v", fields, got.OriginalPieces)
	}
	if n := mustSize(t, got); n > tight {
		t.Errorf("fitted envelope %d bytes over the limit %d", n, tight)
	}
	// Room for the diagnostics beside the reference, and for no original
	// of 200 KB however they are cut: nothing is cut.
	large := env
	large.Original = mustMarshal(t, bson.D{{Key: "_id", Value: int32(5)}, {Key: "a", Value: strings.Repeat("a", 200*1024)}})
	apart := large
	apart.OriginalPieces = PiecesOf(large.Original)
	limit = mustSize(t, apart)
	got = fitEnvelope(large, limit)
	if got.OriginalPieces == nil || len(got.Cut) != 0 || !bytes.Equal(got.ErrInfo, env.ErrInfo) {
		t.Errorf("cut %v, pieces %+v: want the original apart and errInfo verbatim", cutFields(got), got.OriginalPieces)
	}
}

// TestFitSmallErrInfoVerbatim: an errInfo of at most SmallErrInfo bytes is
// never cut to make room for the original: when the envelope does not
// fit, the original is set apart and errInfo stays verbatim (it used to
// be summarised first, and the original truncated anyway).
func TestFitSmallErrInfoVerbatim(t *testing.T) {
	env := sampleEnvelope(t)
	env.ErrInfo = mustMarshal(t, bson.D{{Key: "failingDocumentId", Value: int32(5)}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"}, {Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "required"}, {Key: "missingProperties", Value: bson.A{"qty"}}}}}}}})
	env.Original = mustMarshal(t, bson.D{{Key: "_id", Value: int32(5)}, {Key: "blob", Value: strings.Repeat("b", 64*1024)}})
	limit := mustSize(t, env) - 100
	got := fitEnvelope(env, limit)
	if got.OriginalPieces == nil || len(got.Cut) != 0 || !bytes.Equal(got.ErrInfo, env.ErrInfo) || !bytes.Equal(got.Original, env.Original) {
		t.Errorf("cut %v, pieces %+v, errInfo verbatim %v", cutFields(got), got.OriginalPieces, bytes.Equal(got.ErrInfo, env.ErrInfo))
	}
	if n := mustSize(t, got); n > limit {
		t.Errorf("fitted envelope %d bytes over the limit %d", n, limit)
	}
}

// TestFitLongLists: failing_paths beyond 100 entries give way (counted)
// before the original.
func TestFitLongLists(t *testing.T) {
	env := sampleEnvelope(t)
	env.ErrInfo, env.FailingPaths = nil, nil
	for i := range 5000 {
		env.FailingPaths = append(env.FailingPaths, fmt.Sprintf("path.number.%04d", i))
	}
	env.Original = mustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "x", Value: strings.Repeat("x", 4000)}})
	limit := mustSize(t, env) - 50000
	got := fitEnvelope(env, limit)
	if fmt.Sprint(cutFields(got)) != "[failing_paths]" || got.OriginalPieces != nil {
		t.Fatalf("cut %v", cutFields(got))
	}
	if c := got.Cut[0]; c.Total != 5000 || c.Kept != 100 || len(got.FailingPaths) != 100 || got.FailingPaths[0] != "path.number.0000" {
		t.Errorf("cut %+v, paths %d", c, len(got.FailingPaths))
	}
}
