package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// trialDLQ makes an embedded data directory whose DLQ holds three good
// envelopes (originals "good-0".."good-2") and four edited by hand as in
// the first-time user's trial: attempts a string ("ed-attempts"),
// namespace an int ("ed-ns-int"), namespace removed ("ed-ns-unset"), and
// multiplicity 1000 on an insert whose _id the caller gave ("ed-mult",
// original _id "line-1"). It returns the directory.
func trialDLQ(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	c, db := openDemoDLQ(t, dir)
	defer c.Close(ctx)
	dlq := db.Collection(demo.DefaultDLQ)
	now := time.Now().UTC().Truncate(time.Millisecond)
	env := func(id string) envelope.Envelope {
		orig, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "sku", Value: "S"}})
		return envelope.Envelope{Kind: envelope.KindInsertOne, Original: orig, DocumentID: bson.Raw(orig).Lookup("_id"), Code: 121,
			Namespace: demo.DefaultDatabase + "." + demo.DefaultCollection, Operation: "insertMany", FirstSeen: now, LastSeen: now}
	}
	if err := deadletter.NewMongoSink(dlq).Put(ctx, []envelope.Envelope{env("good-0"), env("good-1"), env("good-2")}); err != nil {
		t.Fatal(err)
	}
	for _, ed := range []struct {
		id, orig, field string
		v               any // nil: remove the field
	}{
		{"ed-attempts", "a-1", "attempts", "three"},
		{"ed-ns-int", "n-1", "namespace", int32(12)},
		{"ed-ns-unset", "u-1", "namespace", nil},
		{"ed-mult", "line-1", "multiplicity", int32(1000)},
	} {
		raw, err := envelope.StoredDocument(env(ed.orig))
		if err != nil {
			t.Fatal(err)
		}
		var d, out bson.D
		_ = bson.Unmarshal(raw, &d)
		for _, e := range d {
			switch {
			case e.Key != ed.field:
				out = append(out, e)
			case ed.v != nil:
				out = append(out, bson.E{Key: e.Key, Value: ed.v})
			}
		}
		if _, err := dlq.InsertOne(ctx, append(bson.D{{Key: "_id", Value: ed.id}}, out...)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// targetIDs returns the _ids the demo's target collection holds.
func targetIDs(t *testing.T, dir string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := conn.Open(ctx, conn.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	cur, err := c.Client.Database(demo.DefaultDatabase).Collection(demo.DefaultCollection).Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for cur.Next(ctx) {
		ids = append(ids, cur.Current.Lookup("_id").String())
	}
	return ids
}

// TestDLQReplayAccountsForEveryEnvelope (trial findings B1 and A1): of
// seven envelopes, three good ones are replayed and the four edited by
// hand are each accounted for and left pending: the undecodable ones
// (attempts a string: skipped by the replay; namespace an int: never
// seen by it) named with their _id, the one without namespace skipped
// with its _id and reason, the caller-_id insert of multiplicity 1000
// refused (its line is not written 1000 times, nor once under an
// invented _id). "pending left" says 4, 2 of them undecodable, and the
// exit status is 3, not 0.
func TestDLQReplayAccountsForEveryEnvelope(t *testing.T) {
	dir := trialDLQ(t)
	code, out, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--no-validator")
	if code != exitCheck {
		t.Errorf("exit %d, want 3\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{"pending left (this filter): 4 (2 of them undecodable)", "documents", "multiplicity 1000 on an insert whose _id the caller gave"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{`envelope _id "ed-ns-unset": no namespace`, `envelope _id "ed-ns-int" cannot be decoded: field namespace holds a BSON 32-bit integer`,
		`envelope _id "ed-attempts" cannot be decoded: field attempts`, "2 envelopes of this filter cannot be decoded and stay pending"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if ids := targetIDs(t, dir); len(ids) != 3 {
		t.Errorf("target holds %v; want the 3 good documents only", ids)
	}
	// The envelope without namespace keeps its reason, as a skip does.
	code, js, _ := runCmd(t, context.Background(), "dlq", "list", "--data-dir", dir, "--status", "pending", "--json")
	var items []struct {
		ID           string `json:"id"`
		ReplayReason string `json:"replay_reason"`
	}
	if err := json.Unmarshal([]byte(js), &items); code != 0 || err != nil {
		t.Fatalf("list: exit %d, %v\n%s", code, err, js)
	}
	reasons := map[string]string{}
	for _, it := range items {
		reasons[it.ID] = it.ReplayReason
	}
	if !strings.HasPrefix(reasons["ed-ns-unset"], "skipped: no namespace") || !strings.HasPrefix(reasons["ed-mult"], "refused: multiplicity 1000") {
		t.Errorf("recorded reasons: %q", reasons)
	}
	// The same through --json: pending counts the undecodable ones, the
	// skipped envelope without namespace is in the namespaces' outcomes.
	code, js, errOut = runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--no-validator", "--json")
	var rep struct {
		Pending, Undecodable int64
		Namespaces           []struct {
			Namespace         string `json:"namespace"`
			Skipped, Refused  int64
			Replayed, Written int64
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(js), &rep); err != nil || code != exitCheck || rep.Pending != 4 || rep.Undecodable != 2 {
		t.Fatalf("--json: exit %d, %v, %+v\n%s\n%s", code, err, rep, js, errOut)
	}
	var skipped, refused int64
	for _, ns := range rep.Namespaces {
		skipped += ns.Skipped
		refused += ns.Refused
	}
	if skipped != 2 || refused != 1 {
		t.Errorf("second replay: %+v; want 2 skipped (attempts, no namespace), 1 refused", rep.Namespaces)
	}
}

// TestDLQReplayValidatorIgnoresMalformedNamespace (trial finding C2): an
// envelope without namespace no longer makes "dlq replay --validator
// FILE" a usage error blaming the (valid) file: the envelope is named
// with its _id and reason, the others are evaluated (dry run) and
// replayed.
func TestDLQReplayValidatorIgnoresMalformedNamespace(t *testing.T) {
	dir := trialDLQ(t)
	widened := filepath.Join("testdata", "widened_validator.json")
	code, out, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--validator", widened, "--dry-run")
	if code == exitUsage || strings.Contains(errOut, "faultproxy") || strings.Contains(errOut, "-validator") ||
		!strings.Contains(errOut, `envelope _id "ed-ns-unset": no namespace`) || !strings.Contains(out, "dry run") {
		t.Errorf("dry run: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--validator", widened)
	if code != exitCheck || strings.Contains(errOut, "faultproxy") || !strings.Contains(out, "(id ed-ns-unset): no namespace") {
		t.Errorf("replay: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
