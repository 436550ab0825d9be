package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// hostileDLQ makes an embedded data directory whose DLQ holds three good
// envelopes and three hand-edited ones: original a string, attempts a
// string, first_seen a number.
func hostileDLQ(t *testing.T, secret string) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	c, db := openDemoDLQ(t, dir)
	defer c.Close(ctx)
	dlq := db.Collection(demo.DefaultDLQ)
	now := time.Now().UTC().Truncate(time.Millisecond)
	var envs []envelope.Envelope
	for i := range 6 {
		orig, _ := bson.Marshal(bson.D{{Key: "_id", Value: int32(i)}, {Key: "sku", Value: "S"}})
		envs = append(envs, envelope.Envelope{Original: orig, DocumentID: bson.Raw(orig).Lookup("_id"), Code: 121,
			Namespace: demo.DefaultDatabase + "." + demo.DefaultCollection, Operation: "insertMany", FirstSeen: now, LastSeen: now})
	}
	if err := deadletter.NewMongoSink(dlq).Put(ctx, envs[:3]); err != nil {
		t.Fatal(err)
	}
	for i, bad := range []struct {
		id    any
		field string
		v     any
	}{
		{"bad-original", "original", secret},
		{bson.NewObjectID(), "attempts", "many " + secret},
		{int64(7), "first_seen", int32(5)},
	} {
		raw, err := envelope.StoredDocument(envs[3+i])
		if err != nil {
			t.Fatal(err)
		}
		var d bson.D
		_ = bson.Unmarshal(raw, &d)
		for k := range d {
			if d[k].Key == bad.field {
				d[k].Value = bad.v
			}
		}
		if _, err := dlq.InsertOne(ctx, append(bson.D{{Key: "_id", Value: bad.id}}, d...)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestDLQUndecodableEnvelopes: three hand-edited envelopes (a field of the
// wrong type) hold up nothing: stats, list, show and discard all exit 0,
// name them by _id and field (never the value), show them as stored, and
// discard takes them out of the way by _id or all at once; the good
// envelopes then replay. Before the change every dlq command exited 1 on
// the first of them ("decode envelope: ..."), discard included.
func TestDLQUndecodableEnvelopes(t *testing.T) {
	const secret = "SECRET-VALUE-42"
	dir := hostileDLQ(t, secret)
	ctx := context.Background()
	noSecret := func(what, out string) {
		t.Helper()
		if strings.Contains(out, secret) {
			t.Errorf("%s printed a value of an undecodable envelope:\n%s", what, out)
		}
	}

	st := dlqJSON(t, 0, "stats", "--data-dir", dir)
	if num(st["envelopes"]) != 3 || num(st["undecodable"]) != 3 || num(st["pending"]) != 3 {
		t.Errorf("stats: %v; want 3 envelopes and 3 undecodable", st)
	}
	code, out, errOut := runCmd(t, ctx, "dlq", "stats", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "3 envelopes cannot be decoded") || !strings.Contains(out, `_id "bad-original"`) {
		t.Errorf("stats table: %d %s %s", code, out, errOut)
	}
	noSecret("stats", out)

	code, out, errOut = runCmd(t, ctx, "dlq", "list", "--data-dir", dir, "--json")
	var items []listed
	if err := json.Unmarshal([]byte(out), &items); code != 0 || err != nil || len(items) != 6 {
		t.Fatalf("list --json: %d %v %s %s", code, err, out, errOut)
	}
	fields := map[string]string{}
	for _, it := range items {
		if it.DecodeError != nil {
			fields[it.DecodeError.Field] = it.DecodeError.ID
		}
	}
	if fields["original"] != `"bad-original"` || fields["first_seen"] != `{"$numberLong":"7"}` || fields["attempts"] == "" || len(fields) != 3 {
		t.Errorf("list --json decode errors by field: %v", fields)
	}
	noSecret("list --json", out)
	code, out, _ = runCmd(t, ctx, "dlq", "list", "--data-dir", dir)
	if code != 0 || strings.Count(out, "UNDECODABLE") != 3 || !strings.Contains(out, "field original holds a BSON string; want an embedded document") ||
		!strings.Contains(out, "6 envelopes listed, 3 undecodable") {
		t.Errorf("list: %d\n%s", code, out)
	}
	noSecret("list", out)
	code, out, _ = runCmd(t, ctx, "dlq", "list", "--data-dir", dir, "--undecodable", "--json")
	if err := json.Unmarshal([]byte(out), &items); code != 0 || err != nil || len(items) != 3 {
		t.Errorf("list --undecodable: %d %v %s", code, err, out)
	}

	code, out, _ = runCmd(t, ctx, "dlq", "show", "bad-original", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "field original") || !strings.Contains(out, "stored document:") || !strings.Contains(out, secret) {
		t.Errorf("show bad-original: %d\n%s", code, out)
	}
	show := dlqJSON(t, 0, "show", `{"$numberLong":"7"}`, "--data-dir", dir)
	if p, _ := show["decode_error"].(map[string]any); p == nil || p["field"] != "first_seen" || show["document"] == nil {
		t.Errorf("show --json of _id 7: %v", show)
	}

	d := dlqJSON(t, 0, "discard", "--data-dir", dir, "--id", "bad-original")
	if num(d["discarded"]) != 1 {
		t.Errorf("discard --id: %v", d)
	}
	d = dlqJSON(t, 0, "discard", "--data-dir", dir, "--undecodable")
	if num(d["discarded"]) != 2 || num(d["pending"]) != 3 {
		t.Errorf("discard --undecodable: %v; want the 2 left, 3 good ones pending", d)
	}
	// Discarded, they stop asking for attention: stats counts them apart.
	st = dlqJSON(t, 0, "stats", "--data-dir", dir)
	if st["undecodable"] != nil || num(st["undecodable_discarded"]) != 3 {
		t.Errorf("stats after the discards: %v; want no undecodable, 3 undecodable_discarded", st)
	}
	code, out, _ = runCmd(t, ctx, "dlq", "stats", "--data-dir", dir)
	if code != 0 || strings.Contains(out, "list --undecodable") || !strings.Contains(out, "3 envelopes that cannot be decoded were discarded") {
		t.Errorf("stats table after the discards: %d\n%s", code, out)
	}
	rep := dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator")
	if num(rep["pending"]) != 0 {
		t.Errorf("replay after the discards: %v", rep)
	}
	st = dlqJSON(t, 0, "stats", "--data-dir", dir, "--status", "replayed")
	if num(st["envelopes"]) != 3 {
		t.Errorf("replayed: %v", st)
	}
}

// TestDLQStatsAndListNameOneProblem: an envelope broken twice by hand (no
// original, a fingerprint that is a number) is reported with the same
// first problem by dlq stats and dlq list (stats used to read only the
// original of such an envelope, and named another field than list).
func TestDLQStatsAndListNameOneProblem(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := conn.Open(ctx, conn.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	db := c.Client.Database(demo.DefaultDatabase)
	if _, err := deadletter.EnsureCollection(ctx, db, demo.DefaultDLQ); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(demo.DefaultDLQ).InsertOne(ctx, bson.D{{Key: "_id", Value: "bad-fp"}, {Key: "fingerprint", Value: int32(7)},
		{Key: "status", Value: envelope.StatusPending}, {Key: "namespace", Value: "d.c"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := dlqJSON(t, 0, "stats", "--data-dir", dir)
	probs, _ := st["undecodable_envelopes"].([]any)
	if len(probs) != 1 {
		t.Fatalf("stats: %v; want one undecodable envelope", st)
	}
	statsField, _ := probs[0].(map[string]any)["field"].(string)
	code, out, errOut := runCmd(t, ctx, "dlq", "list", "--data-dir", dir, "--undecodable", "--json")
	var items []listed
	if err := json.Unmarshal([]byte(out), &items); code != 0 || err != nil || len(items) != 1 || items[0].DecodeError == nil {
		t.Fatalf("list --undecodable: %d %v %s %s", code, err, out, errOut)
	}
	if statsField == "" || statsField != items[0].DecodeError.Field {
		t.Errorf("stats names field %q, list %q: want the same", statsField, items[0].DecodeError.Field)
	}
}

// openDemoDLQ starts the embedded server on dir and makes the demo's
// dead-letter collection there (EnsureCollection); the caller closes the
// connection before running the command on dir.
func openDemoDLQ(t *testing.T, dir string) (*conn.Conn, *mongo.Database) {
	t.Helper()
	ctx := context.Background()
	c, err := conn.Open(ctx, conn.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	db := c.Client.Database(demo.DefaultDatabase)
	if _, err := deadletter.EnsureCollection(ctx, db, demo.DefaultDLQ); err != nil {
		_ = c.Close(ctx)
		t.Fatal(err)
	}
	return c, db
}
