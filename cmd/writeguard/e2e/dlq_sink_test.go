package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// TestDLEnsureCollectionFerretDB: on FerretDB the validator and the TTL
// index are unsupported (238 NotImplemented) and the collection and its
// indexes are still made; a second run reports them already there.
func TestDLEnsureCollectionFerretDB(t *testing.T) {
	b := newDLBed(t, nil)
	rep, err := dlq.EnsureCollection(b.ctx, b.ddb, "dlq2")
	if err != nil {
		t.Fatalf("EnsureCollection: %v\n%s", err, rep)
	}
	t.Logf("first run:\n%s", rep)
	want := map[string]dlq.FeatureState{
		dlq.FeatureCollection:       dlq.FeatureApplied,
		dlq.FeatureValidator:        dlq.FeatureUnsupported,
		dlq.FeatureFingerprintIndex: dlq.FeatureApplied,
		dlq.FeatureTTLIndex:         dlq.FeatureUnsupported,
		dlq.FeatureStatusIndex:      dlq.FeatureApplied,
		dlq.FeaturePieces:           dlq.FeatureUnsupported, // no TTL index on FerretDB
	}
	for f, st := range want {
		if got := rep.State(f); got != st {
			t.Errorf("first run: %s = %q, want %q", f, got, st)
		}
	}
	for _, f := range []string{dlq.FeatureValidator, dlq.FeatureTTLIndex} {
		if fr, _ := rep.Feature(f); fr.Code != 238 || fr.Message == "" {
			t.Errorf("%s: code %d message %q, want 238 and the server's message", f, fr.Code, fr.Message)
		}
	}
	if rep.Namespace != b.dbName+".dlq2" || len(rep.Features) != 6 {
		t.Errorf("report: %s", rep)
	}

	rep, err = dlq.EnsureCollection(b.ctx, b.ddb, "dlq2")
	if err != nil {
		t.Fatalf("second EnsureCollection: %v", err)
	}
	t.Logf("second run:\n%s", rep)
	want[dlq.FeatureCollection] = dlq.FeatureAlready
	want[dlq.FeatureFingerprintIndex] = dlq.FeatureAlready
	want[dlq.FeatureStatusIndex] = dlq.FeatureAlready
	for f, st := range want {
		if got := rep.State(f); got != st {
			t.Errorf("second run: %s = %q, want %q", f, got, st)
		}
	}

	// The fingerprint index is unique.
	cur, err := b.ddb.Collection("dlq2").Indexes().List(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var idx []bson.M
	if err := cur.All(b.ctx, &idx); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ix := range idx {
		if ix["name"] == dlq.FingerprintIndexName && ix["unique"] == true {
			found = true
		}
	}
	if !found {
		t.Errorf("no unique %s index: %v", dlq.FingerprintIndexName, idx)
	}

	// Options: no validator, no TTL, no status index.
	rep, err = dlq.EnsureCollection(b.ctx, b.ddb, "dlq3", dlq.WithoutValidator(), dlq.WithTTL("", 0), dlq.WithoutStatusIndex())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{dlq.FeatureValidator, dlq.FeatureTTLIndex, dlq.FeatureStatusIndex, dlq.FeaturePieces} {
		if rep.State(f) != dlq.FeatureDisabled {
			t.Errorf("%s = %q, want disabled", f, rep.State(f))
		}
	}
	// A non-unique index on fingerprint is a failure with a clear message.
	if _, err := b.ddb.Collection("dlq4").Indexes().CreateOne(b.ctx, mongo.IndexModel{Keys: bson.D{{Key: "fingerprint", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	rep, err = dlq.EnsureCollection(b.ctx, b.ddb, "dlq4")
	if err == nil || rep.State(dlq.FeatureFingerprintIndex) != dlq.FeatureFailed {
		t.Errorf("non-unique fingerprint index: err %v, report\n%s", err, rep)
	}
}

// TestDLSinkCaptureGuardedInsertMany: a guarded InsertMany whose invalid
// documents the (emulated) validator rejects dead-letters them into the
// Mongo-backed DLQ with every field of the envelope; a recapture of the
// same payloads upserts (attempts 2, last_seen later, status back to
// pending).
func TestDLSinkCaptureGuardedInsertMany(t *testing.T) {
	b := newDLBed(t, dlSchema)
	g := b.guard()
	docs := []any{
		dlDoc("sku", "A", "qty", int32(1)),
		dlDoc("sku", "B"), // required
		dlDoc("sku", "C", "qty", int32(2)),
		dlDoc("sku", "D", "qty", int32(0)), // minimum
		dlDoc("_id", "E", "sku", "E"),      // required, caller's _id
		dlDoc("sku", "F", "qty", int32(3)),
	}
	rep := b.capture(g, docs...)
	if rep == nil || rep.Count(writeguard.Written) != 3 || rep.Count(writeguard.DeadLettered) != 3 {
		t.Fatalf("report: %v", rep)
	}
	if n := b.count(dlTarget, bson.D{}); n != 3 {
		t.Errorf("target holds %d documents, want 3", n)
	}
	envs := b.envelopes()
	if len(envs) != 3 {
		t.Fatalf("%d envelopes, want 3", len(envs))
	}
	byIndex := map[int]envelope.Envelope{}
	for _, e := range envs {
		byIndex[e.BatchIndex] = e
	}
	for _, c := range []struct {
		index      int
		keywords   []string
		idAssigned bool
	}{{1, []string{"required"}, true}, {3, []string{"minimum"}, true}, {4, []string{"required"}, false}} {
		e, ok := byIndex[c.index]
		if !ok {
			t.Errorf("no envelope for index %d", c.index)
			continue
		}
		sent := rep.Outcomes[c.index].Document
		if !bytes.Equal(e.Original, sent) {
			t.Errorf("index %d: original %v, want the document sent %v", c.index, e.Original, sent)
		}
		if !slices.Equal(e.FailingKeywords, c.keywords) || !slices.Equal(e.FailingPaths, []string{"qty"}) {
			t.Errorf("index %d: keywords %v paths %v", c.index, e.FailingKeywords, e.FailingPaths)
		}
		if e.Code != 121 || e.ErrMsg == "" || e.Namespace != b.ns() || e.Operation != "insertMany" {
			t.Errorf("index %d: code %d errmsg %q ns %q op %q", c.index, e.Code, e.ErrMsg, e.Namespace, e.Operation)
		}
		if e.IDAssigned != c.idAssigned || !e.DocumentID.Equal(sent.Lookup("_id")) {
			t.Errorf("index %d: id_assigned %v document_id %v", c.index, e.IDAssigned, e.DocumentID)
		}
		if e.Fingerprint != envelope.Fingerprint(sent, c.idAssigned) {
			t.Errorf("index %d: fingerprint differs from envelope.Fingerprint", c.index)
		}
		if e.Attempts != 1 || e.Status != envelope.StatusPending || e.SchemaVersion != envelope.SchemaVersion ||
			e.FirstSeen.IsZero() || !e.FirstSeen.Equal(e.LastSeen) || len(e.ErrInfo) == 0 {
			t.Errorf("index %d: attempts %d status %q schema %d first %v last %v errInfo %d bytes",
				c.index, e.Attempts, e.Status, e.SchemaVersion, e.FirstSeen, e.LastSeen, len(e.ErrInfo))
		}
	}

	// Discard one, then recapture the same three payloads (new _ids for
	// the two without one: the fingerprint leaves them out).
	n, err := dlq.Discard(b.ctx, b.dlq, dlq.Filter{Keywords: []string{"minimum"}})
	if err != nil || n != 1 {
		t.Fatalf("Discard: %d, %v", n, err)
	}
	time.Sleep(5 * time.Millisecond)
	if rep := b.capture(g, dlDoc("sku", "B"), dlDoc("sku", "D", "qty", int32(0)), dlDoc("_id", "E", "sku", "E")); rep.Count(writeguard.DeadLettered) != 3 {
		t.Fatalf("recapture: %v", rep)
	}
	again := b.envelopes()
	if len(again) != 3 {
		t.Fatalf("%d envelopes after recapture, want 3", len(again))
	}
	for fp, e := range again {
		old := envs[fp]
		if e.Attempts != 2 || e.Status != envelope.StatusPending || !e.LastSeen.After(old.LastSeen) || !e.FirstSeen.Equal(old.FirstSeen) {
			t.Errorf("recaptured %v: attempts %d status %q first %v→%v last %v→%v", e.FailingKeywords,
				e.Attempts, e.Status, old.FirstSeen, e.FirstSeen, old.LastSeen, e.LastSeen)
		}
		if !bytes.Equal(e.Original, old.Original) {
			t.Error("recapture replaced the first capture's original")
		}
	}
}

// TestDLSinkConcurrentCapture: 8 goroutines write the same invalid
// payload through guarded InsertOne at once: one envelope, attempts 8.
func TestDLSinkConcurrentCapture(t *testing.T) {
	b := newDLBed(t, dlSchema)
	g := b.guard()
	const n = 8
	for round := 0; round < 3; round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := g.InsertOne(b.ctx, dlDoc("sku", fmt.Sprintf("race-%d", round), "qty", int32(-1)))
				if !errors.Is(err, writeguard.ErrDeadLettered) {
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: InsertOne: %v", round, err)
		}
		got, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Envelopes != int64(round+1) || got.Attempts != int64(n*(round+1)) {
			t.Errorf("round %d: %d envelopes with %d attempts, want %d and %d", round, got.Envelopes, got.Attempts, round+1, n*(round+1))
		}
	}
}

// TestDLSinkPutRace: concurrent first captures of one fingerprint, sent
// straight to MongoSink.Put behind a barrier, in both modes (upserts,
// insert-first). Through one shared sink (one process): one envelope
// whose attempts count every capture. Through a sink each (several
// processes): still one envelope and no error — the losers' 11000 on the
// fingerprint index is retried — but FerretDB loses concurrent $inc
// updates, so attempts is only ≥ 1 there (exact on MongoDB:
// TestDLRealPutRace).
func TestDLSinkPutRace(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []dlq.SinkOption
	}{{"upserts", nil}, {"insert-first", []dlq.SinkOption{dlq.WithInsertFirst()}}} {
		t.Run(mode.name, func(t *testing.T) {
			b := newDLBed(t, nil)
			shared := dlq.NewMongoSink(b.dlq, mode.opts...)
			const n, rounds = 8, 5
			race := func(round int, one bool) dlq.Summary {
				orig, _ := bson.Marshal(dlDoc("_id", fmt.Sprintf("race-%d-%v", round, one), "v", int32(round)))
				env := envelope.Envelope{Original: orig, Fingerprint: envelope.Fingerprint(orig, false), Code: 121,
					Namespace: b.ns(), Operation: "insertOne", FirstSeen: time.Now().UTC(), LastSeen: time.Now().UTC(), Attempts: 1}
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := 0; i < n; i++ {
					sink := shared
					if !one {
						sink = dlq.NewMongoSink(b.dlq, mode.opts...)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if err := sink.Put(b.ctx, []envelope.Envelope{env}); err != nil {
							t.Errorf("Put: %v", err)
						}
					}()
				}
				close(start)
				wg.Wait()
				got, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{Fingerprints: []string{env.Fingerprint}})
				if err != nil {
					t.Fatal(err)
				}
				if got.Envelopes != 1 {
					t.Errorf("round %d (one sink %v): %d envelopes, want 1", round, one, got.Envelopes)
				}
				return got
			}
			for round := 0; round < rounds; round++ {
				if got := race(round, true); got.Attempts != n {
					t.Errorf("round %d, one sink: %d attempts, want %d", round, got.Attempts, n)
				}
			}
			b.cmds.reset()
			var counted []int64
			for round := 0; round < rounds; round++ {
				counted = append(counted, race(round, false).Attempts)
			}
			t.Logf("a sink per goroutine: %d Puts sent %d insert and %d update commands; attempts counted per round %v of %d (FerretDB loses concurrent $inc)",
				n*rounds, b.cmds.get("insert", b.dbName+"."+dlDLQ), b.cmds.get("update", b.dbName+"."+dlDLQ), counted, n)
		})
	}
}

// TestDLSinkThousandInOnePut: with WithInsertFirst, one Put of 1,000 new
// envelopes is one insert command, and a Put of 200 of them again
// (recaptures) one insert command (all duplicates) plus one update
// command. By default (upserts) one Put is one update command, whatever
// its size; only 20 envelopes are used there, as FerretDB gets
// superlinearly slow with upserts (measured: 20 new envelopes 0.08 s, 40
// more 1.3 s, 200 more 7.7 s). Times are logged.
func TestDLSinkThousandInOnePut(t *testing.T) {
	mk := func(b *dlBed, n int, tag string) []envelope.Envelope {
		envs := make([]envelope.Envelope, n)
		now := time.Now().UTC().Truncate(time.Millisecond)
		for i := range envs {
			orig, _ := bson.Marshal(dlDoc("_id", bson.NewObjectID(), "sku", fmt.Sprintf("%s%04d", tag, i), "qty", int32(0)))
			envs[i] = envelope.Envelope{Original: orig, Fingerprint: envelope.Fingerprint(orig, true), IDAssigned: true, Code: 121,
				Namespace: b.ns(), Operation: "insertMany", BatchIndex: i, FirstSeen: now, LastSeen: now, Attempts: 1,
				FailingKeywords: []string{"minimum"}, FailingPaths: []string{"qty"}}
		}
		return envs
	}
	put := func(b *dlBed, sink *dlq.MongoSink, envs []envelope.Envelope, wantIns, wantUpd int) time.Duration {
		ns := b.dbName + "." + dlDLQ
		b.cmds.reset()
		t0 := time.Now()
		if err := sink.Put(b.ctx, envs); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		if ins, upd := b.cmds.get("insert", ns), b.cmds.get("update", ns); ins != wantIns || upd != wantUpd {
			t.Errorf("Put of %d sent %d insert and %d update commands, want %d and %d", len(envs), ins, upd, wantIns, wantUpd)
		}
		return d
	}
	check := func(b *dlBed, envelopes, attempts int64) {
		st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Envelopes != envelopes || st.Attempts != attempts {
			t.Errorf("%d envelopes, %d attempts; want %d, %d", st.Envelopes, st.Attempts, envelopes, attempts)
		}
	}

	b := newDLBed(t, nil)
	const n, again = 1000, 40 // FerretDB scans the collection per recapture update: keep CI fast
	fast := dlq.NewMongoSink(b.dlq, dlq.WithInsertFirst())
	envs := mk(b, n, "S")
	first := put(b, fast, envs, 1, 0)
	later := envs[0].LastSeen.Add(time.Second)
	for i := range envs[:again] {
		envs[i].LastSeen = later
	}
	second := put(b, fast, envs[:again], 1, 1)
	check(b, n, n+again)
	if got := b.count(dlDLQ, bson.D{{Key: "last_seen", Value: later}}); got != again {
		t.Errorf("%d envelopes with the later last_seen, want %d", got, again)
	}
	t.Logf("FerretDB, insert-first: Put of %d new envelopes %v; Put of %d recaptures into %d %v", n, first, again, n, second)

	b = newDLBed(t, nil)
	const m = 20
	envs = mk(b, m, "U")
	first = put(b, b.sink, envs, 0, 1)
	second = put(b, b.sink, envs, 0, 1)
	check(b, m, 2*m)
	t.Logf("FerretDB, upserts: Put of %d new envelopes %v; Put of the %d again %v", m, first, m, second)
}

// TestDLSinkOversized: a ~16 MiB rejected document too large for its
// envelope is stored whole, apart (original_pieces), never cut: the
// stored envelope fits, and the original reads back byte for byte.
func TestDLSinkOversized(t *testing.T) {
	b := newDLBed(t, nil)
	big := bytes.Repeat([]byte{'x'}, 16*1024*1024-1024)
	orig, err := bson.Marshal(dlDoc("_id", "big-1", "sku", "BIG", "blob", bson.Binary{Data: big}, "qty", int32(0)))
	if err != nil {
		t.Fatal(err)
	}
	env := envelope.Envelope{Original: orig, Fingerprint: envelope.Fingerprint(orig, false), Code: 121,
		Namespace: b.ns(), Operation: "insertOne", Attempts: 1, DocumentID: bson.Raw(orig).Lookup("_id")}
	if err := b.sink.Put(b.ctx, []envelope.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	var raw bson.Raw
	if err := b.dlq.FindOne(b.ctx, bson.D{{Key: "fingerprint", Value: env.Fingerprint}}).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) > envelope.MaxEnvelopeSize {
		t.Errorf("stored envelope is %d bytes", len(raw))
	}
	got, err := envelope.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.OriginalTruncated || got.OriginalPieces == nil || got.OriginalPieces.Size != int64(len(orig)) {
		t.Fatalf("truncated %v, pieces %+v", got.OriginalTruncated, got.OriginalPieces)
	}
	if back, err := dlq.ReadOriginal(b.ctx, b.dlq, got); err != nil || !bytes.Equal(back, orig) {
		t.Errorf("ReadOriginal: %d bytes, %v", len(back), err)
	}
}

// TestDLFallbackFileThenReplay: the DLQ refuses writes, so the guarded
// collection's fallback FileSink gets the envelopes; the file is loaded
// back into the DLQ and replayed once the schema is widened.
func TestDLFallbackFileThenReplay(t *testing.T) {
	b := newDLBed(t, dlSchema)
	// The DLQ is written through the proxy here, so that it can fail.
	b.proxy.SetScript(faultproxy.MustScript(
		faultproxy.Validator(b.ns(), dlSchema),
		faultproxy.On("update").In(b.dbName+"."+dlDLQ).Always().Do(faultproxy.ErrorReply(faultproxy.CommandError{Code: 13, CodeName: "Unauthorized"})),
		faultproxy.On("insert").In(b.dbName+"."+dlDLQ).Always().Do(faultproxy.ErrorReply(faultproxy.CommandError{Code: 13, CodeName: "Unauthorized"})),
	))
	path := filepath.Join(t.TempDir(), "fallback.jsonl")
	fs, err := dlq.NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	g, err := writeguard.Wrap(b.adb.Collection(dlTarget), writeguard.WithDeadLetter(dlq.NewMongoSink(b.adb.Collection(dlDLQ))),
		writeguard.WithFallbackDeadLetter(fs), writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	rep := b.capture(g, dlDoc("sku", "A"), dlDoc("sku", "B", "qty", int32(5)), dlDoc("_id", int64(7), "sku", "C", "qty", 1.5))
	if rep.Count(writeguard.DeadLettered) != 2 {
		t.Fatalf("report: %v", rep)
	}
	if n := b.count(dlDLQ, bson.D{}); n != 0 {
		t.Fatalf("the failing DLQ holds %d envelopes", n)
	}
	envs, err := dlq.ReadFile(path)
	if err != nil || len(envs) != 2 {
		t.Fatalf("ReadFile: %d envelopes, %v", len(envs), err)
	}
	for _, e := range envs {
		if !bytes.Equal(e.Original, rep.Outcomes[e.BatchIndex].Document) {
			t.Errorf("file original differs from the document sent")
		}
	}
	if id := envs[1].DocumentID; id.Type != bson.TypeInt64 || id.Int64() != 7 {
		t.Errorf("document_id %v lost its type", id)
	}
	// Load the file into the DLQ (directly), widen, replay.
	if err := b.sink.Put(b.ctx, envs); err != nil {
		t.Fatal(err)
	}
	b.setValidator(nil)
	res, err := replayRun(b, b.replayTarget())
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != 2 || b.count(dlTarget, bson.D{}) != 3 {
		t.Errorf("replayed %d; target holds %d documents, want 3", res.Replayed, b.count(dlTarget, bson.D{}))
	}
}

// TestDLStatsAndDiscard: the backlog grouped by keyword, path, code,
// namespace and status; Discard by filter.
func TestDLStatsAndDiscard(t *testing.T) {
	b := newDLBed(t, dlSchema)
	g := b.guard()
	b.capture(g,
		dlDoc("sku", "A"), dlDoc("sku", "B"), dlDoc("sku", "C"), // required ×3
		dlDoc("sku", "D", "qty", int32(0)), dlDoc("sku", "E", "qty", int32(-5)), // minimum ×2
		dlDoc("sku", "F", "qty", "seven"), // bsonType
		dlDoc("sku", "G", "qty", int32(1)),
	)
	b.capture(g, dlDoc("sku", "A")) // recapture: attempts 2
	// Another namespace's envelope, put straight into the DLQ.
	orig, _ := bson.Marshal(dlDoc("_id", int32(1), "name", "x"))
	other := envelope.Envelope{Original: orig, Code: 121, Namespace: b.dbName + ".users", Operation: "insertOne",
		FailingKeywords: []string{"required"}, FailingPaths: []string{"email"}, FirstSeen: time.Now().Add(-48 * time.Hour).UTC()}
	if err := b.sink.Put(b.ctx, []envelope.Envelope{other}); err != nil {
		t.Fatal(err)
	}

	st, err := dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if st.Envelopes != 7 || st.Attempts != 8 || st.Pending != 7 {
		t.Errorf("envelopes %d attempts %d pending %d; want 7, 8, 7", st.Envelopes, st.Attempts, st.Pending)
	}
	wantKW := []dlq.Group{{Key: "required", Envelopes: 4, Attempts: 5}, {Key: "minimum", Envelopes: 2, Attempts: 2}, {Key: "bsonType", Envelopes: 1, Attempts: 1}}
	if !slices.Equal(st.ByKeyword, wantKW) {
		t.Errorf("by keyword %v, want %v", st.ByKeyword, wantKW)
	}
	wantPath := []dlq.Group{{Key: "qty", Envelopes: 6, Attempts: 7}, {Key: "email", Envelopes: 1, Attempts: 1}}
	if !slices.Equal(st.ByPath, wantPath) {
		t.Errorf("by path %v, want %v", st.ByPath, wantPath)
	}
	if len(st.ByCode) != 1 || st.ByCode[0].Code != 121 || st.ByCode[0].Envelopes != 7 {
		t.Errorf("by code %v", st.ByCode)
	}
	wantNS := []dlq.Group{{Key: b.ns(), Envelopes: 6, Attempts: 7}, {Key: b.dbName + ".users", Envelopes: 1, Attempts: 1}}
	if !slices.Equal(st.ByNamespace, wantNS) {
		t.Errorf("by namespace %v, want %v", st.ByNamespace, wantNS)
	}
	if age := st.OldestPendingAge; age < 47*time.Hour || age > 49*time.Hour {
		t.Errorf("oldest pending is %v old, want ~48h", age)
	}

	// Filters narrow the summary.
	st, err = dlq.Stats(b.ctx, b.dlq, dlq.Filter{Namespaces: []string{b.ns()}, Paths: []string{"qty"}, NewerThan: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if st.Envelopes != 6 || st.OldestPendingAge > time.Hour {
		t.Errorf("filtered: %d envelopes, oldest %v", st.Envelopes, st.OldestPendingAge)
	}

	// Discard.
	if _, err := dlq.Discard(b.ctx, b.dlq, dlq.Filter{}); !errors.Is(err, dlq.ErrEmptyFilter) {
		t.Errorf("empty filter: %v", err)
	}
	if _, err := dlq.Discard(b.ctx, b.dlq, dlq.Filter{Codes: []int32{-1}}); !errors.Is(err, dlq.ErrBadFilter) {
		t.Errorf("bad filter: %v", err)
	}
	n, err := dlq.Discard(b.ctx, b.dlq, dlq.Filter{Keywords: []string{"minimum", "bsonType"}})
	if err != nil || n != 3 {
		t.Fatalf("Discard: %d, %v; want 3", n, err)
	}
	if n, _ := dlq.Discard(b.ctx, b.dlq, dlq.Filter{Keywords: []string{"minimum"}}); n != 0 {
		t.Errorf("second Discard marked %d", n)
	}
	if got := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusDiscarded}, {Key: "discarded_at", Value: bson.D{{Key: "$exists", Value: true}}}}); got != 3 {
		t.Errorf("%d discarded envelopes with discarded_at, want 3", got)
	}
	st, err = dlq.Stats(b.ctx, b.dlq, dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus := []dlq.Group{{Key: envelope.StatusPending, Envelopes: 4, Attempts: 5}, {Key: envelope.StatusDiscarded, Envelopes: 3, Attempts: 3}}
	if !slices.Equal(st.ByStatus, wantStatus) || st.Pending != 4 {
		t.Errorf("by status %v pending %d", st.ByStatus, st.Pending)
	}
	n, err = dlq.Discard(b.ctx, b.dlq, dlq.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil || n != 4 {
		t.Errorf("discard all pending: %d, %v", n, err)
	}
}

// replayRun runs a replay of the bed's DLQ into target and logs the
// result.
func replayRun(b *dlBed, target writeguard.Collection, opts ...replay.Option) (replay.Result, error) {
	b.t.Helper()
	res, err := replay.Run(context.Background(), b.dlq, target, opts...)
	b.t.Logf("replay: %+v (err %v)", res.Counts, err)
	return res, err
}

// TestDLEnsureCollectionRefusesCapped: a capped collection removes its
// oldest documents to make room, envelopes a sink confirmed included, so
// EnsureCollection refuses it as the dead-letter queue, naming why.
func TestDLEnsureCollectionRefusesCapped(t *testing.T) {
	b := newDLBed(t, nil)
	if err := b.ddb.CreateCollection(b.ctx, "dlqcapped", options.CreateCollection().SetCapped(true).SetSizeInBytes(1<<20)); err != nil {
		t.Fatalf("create capped: %v", err)
	}
	_, err := dlq.EnsureCollection(b.ctx, b.ddb, "dlqcapped")
	if err == nil || !strings.Contains(err.Error(), "capped") {
		t.Fatalf("EnsureCollection on a capped collection: %v, want an error naming it capped", err)
	}
}
