package dlq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/envelope"
)

// richEnvelope has an original and errInfo with every BSON type that
// plain JSON would lose or confuse, and the given document_id.
func richEnvelope(tb testing.TB, id bson.RawValue) envelope.Envelope {
	tb.Helper()
	dec, err := bson.ParseDecimal128("1.10")
	if err != nil {
		tb.Fatal(err)
	}
	orig := mustMarshal(tb, bson.D{
		{Key: "_id", Value: id},
		{Key: "i32", Value: int32(1)},
		{Key: "i64", Value: int64(1)},
		{Key: "f64", Value: 1.0},
		{Key: "dec", Value: dec},
		{Key: "when", Value: bson.NewDateTimeFromTime(t0)},
		{Key: "bin", Value: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}},
		{Key: "re", Value: bson.Regex{Pattern: "^a", Options: "i"}},
		{Key: "ts", Value: bson.Timestamp{T: 1, I: 2}},
		{Key: "nil", Value: nil},
		{Key: "min", Value: bson.MinKey{}},
		{Key: "nested", Value: bson.D{{Key: "z", Value: "last"}, {Key: "a", Value: bson.A{int32(1), "two", 3.5}}}},
		{Key: "html", Value: "<b>&</b>"},
		{Key: "utf8", Value: "naïve ☃"},
	})
	env := sampleEnvelope(tb)
	env.Original = orig
	env.DocumentID = id
	env.IDAssigned = false
	env.Fingerprint = envelope.Fingerprint(orig, false)
	env.ErrInfo = mustMarshal(tb, bson.D{{Key: "failingDocumentId", Value: id}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$lt"}, {Key: "specifiedAs", Value: bson.D{{Key: "i64", Value: bson.D{{Key: "$lt", Value: int64(0)}}}}},
		{Key: "consideredValue", Value: int64(1)}}}})
	env.FailingKeywords = envelope.FailingKeywords(env.ErrInfo)
	env.FailingPaths = envelope.FailingPaths(env.ErrInfo)
	return env
}

func rawValue(tb testing.TB, v any) bson.RawValue {
	tb.Helper()
	doc := mustMarshal(tb, bson.D{{Key: "v", Value: v}})
	return doc.Lookup("v")
}

// TestFileSinkRoundTrip: every envelope written comes back identical,
// byte for byte in original and err_info, with document_id's BSON type.
func TestFileSinkRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	s, err := NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := bson.ParseDecimal128("42")
	ids := []bson.RawValue{
		rawValue(t, bson.NewObjectID()),
		rawValue(t, "order-1"),
		rawValue(t, int32(7)),
		rawValue(t, int64(7)),
		rawValue(t, 7.0),
		rawValue(t, dec),
		rawValue(t, bson.D{{Key: "tenant", Value: "a"}, {Key: "n", Value: int64(1)}}),
		rawValue(t, bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{1}, 16)}),
	}
	var want []envelope.Envelope
	for _, id := range ids {
		want = append(want, richEnvelope(t, id))
	}
	want[1].OriginalTruncated, want[1].OriginalSize, want[1].OriginalDropped = true, 99, []string{"blob"}
	want[2].ReplayedAt = t1
	want[3].ErrInfo, want[3].Labels, want[3].CodeName = nil, nil, ""
	if err := s.Put(context.Background(), want[:3]); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), want[3:]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Put(context.Background(), want[:1]); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v, want ErrClosed", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if n := bytes.Count(data, []byte{'\n'}); n != len(want) {
		t.Fatalf("%d lines, want %d", n, len(want))
	}
	if !bytes.Contains(data, []byte(`"$numberLong":"1"`)) || !bytes.Contains(data, []byte(`"<b>&</b>"`)) {
		t.Errorf("not canonical Extended JSON without HTML escaping:\n%s", data[:min(len(data), 600)])
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d envelopes, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if !bytes.Equal(g.Original, w.Original) {
			t.Errorf("%d: original differs:\n got %v\nwant %v", i, g.Original, w.Original)
		}
		if !bytes.Equal(g.ErrInfo, w.ErrInfo) {
			t.Errorf("%d: err_info differs", i)
		}
		if g.DocumentID.Type != w.DocumentID.Type || !g.DocumentID.Equal(w.DocumentID) {
			t.Errorf("%d: document_id %v (%v), want %v (%v)", i, g.DocumentID, g.DocumentID.Type, w.DocumentID, w.DocumentID.Type)
		}
		if envelope.Fingerprint(g.Original, g.IDAssigned) != w.Fingerprint {
			t.Errorf("%d: fingerprint of the read original differs", i)
		}
		// Everything else, field by field; a 121 without errInfo gets a
		// note of what was withheld (nothing, and why).
		if wantNote := len(w.ErrInfo) == 0 && w.Code == 121; wantNote != (g.WithheldNote != "") {
			t.Errorf("%d: withheld_note %q, want one: %v", i, g.WithheldNote, wantNote)
		}
		g.WithheldNote = ""
		g.Original, g.ErrInfo, g.DocumentID = nil, nil, bson.RawValue{}
		w.Original, w.ErrInfo, w.DocumentID = nil, nil, bson.RawValue{}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%d: envelope differs:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// TestFileSinkConcurrent: concurrent Puts all land, one line each, none
// interleaved.
func TestFileSinkConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	s, err := NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	const workers, puts = 8, 10
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < puts; i++ {
				env := sampleEnvelope(t)
				env.Namespace = fmt.Sprintf("db.c%d", w)
				if err := s.Put(context.Background(), []envelope.Envelope{env, env}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != workers*puts*2 {
		t.Errorf("%d envelopes, want %d", len(got), workers*puts*2)
	}
}

// TestReadFileCutShort: a last line cut short by a crash is reported with
// its number, and the envelopes before it are returned.
func TestReadFileCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	s, err := NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), []envelope.Envelope{sampleEnvelope(t), sampleEnvelope(t)}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	line, err := envelope.MarshalLine(sampleEnvelope(t))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.Write([]byte("\n"))       // an empty line is skipped
	_, _ = f.Write(line[:len(line)/2]) // cut short
	_ = f.Close()
	got, err := ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("err = %v, want a line 4 cut-short error", err)
	}
	if len(got) != 2 {
		t.Errorf("%d envelopes before the bad line, want 2", len(got))
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file: no error")
	}
}

// TestFileSinkRedactAndErrors: redaction applies; a done context and an
// invalid original write nothing.
func TestFileSinkRedactAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	s, err := NewFileSink(path, WithRedact(func(bson.Raw) bson.Raw { return mustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}}) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, []envelope.Envelope{sampleEnvelope(t)}); !errors.Is(err, context.Canceled) {
		t.Errorf("done context: %v", err)
	}
	bad := sampleEnvelope(t)
	bad.ErrInfo = bson.Raw{9, 0, 0, 0, 1}
	if err := s.Put(context.Background(), []envelope.Envelope{sampleEnvelope(t), bad}); err == nil {
		t.Error("invalid err_info: no error")
	}
	if err := s.Put(context.Background(), []envelope.Envelope{sampleEnvelope(t)}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].OriginalRedacted || got[0].Original.Lookup("sku").Type != 0 {
		t.Errorf("got %d envelopes, redacted %v", len(got), len(got) > 0 && got[0].OriginalRedacted)
	}
}

func TestFilterQuery(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	q, err := Filter{}.Query(now)
	if err != nil || len(q) != 0 {
		t.Errorf("zero filter: %v, %v", q, err)
	}
	fp := strings.Repeat("ab", 32)
	f := Filter{
		Keywords:        []string{"required", "$lt"},
		Paths:           []string{"qty"},
		Codes:           []int32{121},
		Namespaces:      []string{"shop.orders"},
		Statuses:        []string{envelope.StatusPending},
		Fingerprints:    []string{fp},
		FirstSeenBefore: now.Add(-time.Hour),
		OlderThan:       2 * time.Hour, // tighter than FirstSeenBefore
		NewerThan:       24 * time.Hour,
	}
	q, err = f.Query(now)
	if err != nil {
		t.Fatal(err)
	}
	want := bson.D{
		{Key: "failing_keywords", Value: bson.D{{Key: "$in", Value: []string{"required", "$lt"}}}},
		{Key: "failing_paths", Value: bson.D{{Key: "$in", Value: []string{"qty"}}}},
		{Key: "code", Value: bson.D{{Key: "$in", Value: []int32{121}}}},
		{Key: "namespace", Value: bson.D{{Key: "$in", Value: []string{"shop.orders"}}}},
		{Key: "status", Value: bson.D{{Key: "$in", Value: []string{envelope.StatusPending}}}},
		{Key: "fingerprint", Value: bson.D{{Key: "$in", Value: []string{fp}}}},
		{Key: "first_seen", Value: bson.D{{Key: "$lt", Value: now.Add(-2 * time.Hour)}, {Key: "$gte", Value: now.Add(-24 * time.Hour)}}},
	}
	if got, w := mustMarshal(t, q), mustMarshal(t, want); !bytes.Equal(got, w) {
		t.Errorf("query\n got %v\nwant %v", got, w)
	}
	if f.IsZero() || !(Filter{}).IsZero() {
		t.Error("IsZero wrong")
	}
	if got := (Filter{}).WithDefaultStatus(envelope.StatusPending).Statuses; len(got) != 1 || got[0] != envelope.StatusPending {
		t.Errorf("WithDefaultStatus: %v", got)
	}
	if got := (Filter{Statuses: []string{envelope.StatusReplayed}}).WithDefaultStatus(envelope.StatusPending).Statuses; got[0] != envelope.StatusReplayed {
		t.Errorf("WithDefaultStatus overrode: %v", got)
	}

	bad := []struct {
		f    Filter
		want string
	}{
		{Filter{Keywords: []string{""}}, "empty keyword"},
		{Filter{Paths: []string{" "}}, "empty path"},
		{Filter{Namespaces: []string{""}}, "empty namespace"},
		{Filter{Codes: []int32{0}}, "code 0"},
		{Filter{Statuses: []string{"done"}}, `status "done"`},
		{Filter{Fingerprints: []string{"ABC"}}, "64 lowercase hex"},
		{Filter{OlderThan: -time.Second}, "negative OlderThan"},
		{Filter{NewerThan: -time.Second}, "negative NewerThan"},
		{Filter{FirstSeenAfter: now, FirstSeenBefore: now}, "no envelope can match"},
		{Filter{OlderThan: time.Hour, NewerThan: time.Hour}, "no envelope can match"},
		{Filter{FirstSeenAfter: now.Add(-time.Minute), OlderThan: time.Hour}, "select no instant"},
	}
	for _, b := range bad {
		_, err := b.f.Query(now)
		if !errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: err = %v, want ErrBadFilter mentioning %q", b.f, err, b.want)
		}
	}
}
