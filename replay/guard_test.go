package replay

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
)

// guardRunner returns a runner over the DLQ shop.dlq for a target in
// shop.orders, with opts applied as Run applies them.
func guardRunner(t *testing.T, opts ...Option) *runner {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	cfg := newConfig(opts)
	if len(cfg.errs) > 0 {
		t.Fatal(cfg.errs)
	}
	dlq := client.Database("shop").Collection("dlq")
	cfg.leases = dlq.Database().Collection("dlq" + LeaseCollectionSuffix)
	if len(cfg.into) == 0 {
		cfg.into = []string{"shop.orders"}
	}
	return &runner{cfg: cfg, dlq: dlq}
}

func modelEnv(t *testing.T, ns string, orig bson.D) stored {
	t.Helper()
	return stored{ID: bson.RawValue{Type: bson.TypeInt32, Value: []byte{1, 0, 0, 0}},
		Envelope: envelope.Envelope{Original: mustMarshal(t, orig), Namespace: ns, Code: 121, Status: envelope.StatusPending}}
}

// TestGuardRefusesForgedAdminUser: an envelope anyone who can write the
// DLQ could forge, aimed at admin.system.users, is refused even when the
// operator names that namespace; so is one aimed at the DLQ, a local or
// config collection, or a system collection of the target's database.
func TestGuardRefusesForgedAdminUser(t *testing.T) {
	r := guardRunner(t, WithInto("shop.orders", "admin.system.users", "shop.dlq", "local.oplog.rs", "config.x", "shop.system.views", "shop.dlq_leases"))
	user := bson.D{{Key: "_id", Value: "admin.mallory"}, {Key: "user", Value: "mallory"}, {Key: "db", Value: "admin"},
		{Key: "roles", Value: bson.A{bson.D{{Key: "role", Value: "root"}, {Key: "db", Value: "admin"}}}}}
	for ns, want := range map[string]string{
		"admin.system.users": "admin database",
		"local.oplog.rs":     "local database",
		"config.x":           "config database",
		"shop.system.views":  "system collection",
		"shop.dlq":           "dead-letter collection",
		"shop.dlq_leases":    "dead-letter collection or one of its side collections",
		"shop":               "not <database>.<collection>",
		"shop.other":         "not named for this replay",
	} {
		envs := []stored{modelEnv(t, ns, user)}
		entries, send := r.prepare(context.Background(), envs, nil)
		if len(send) != 0 || entries[0].out != outRefused || !strings.Contains(entries[0].reason, want) {
			t.Errorf("%s: sent %d, outcome %v, reason %q; want refused: %q", ns, len(send), entries[0].out, entries[0].reason, want)
		}
	}
	if _, send := r.prepare(context.Background(), []stored{modelEnv(t, "shop.orders", user)}, nil); len(send) != 1 {
		t.Error("an insert into the named target namespace is refused")
	}
	// A target in a refused namespace: every envelope is refused.
	r.cfg.targetRefused = "target " + refusedNamespace("admin.system.users", r.dlq, r.cfg.leases)
	if entries, send := r.prepare(context.Background(), []stored{modelEnv(t, "shop.orders", user)}, nil); len(send) != 0 || !strings.Contains(entries[0].reason, "target namespace") {
		t.Errorf("refused target: %q", entries[0].reason)
	}
}

// TestGuardRefusesIDLessDeleteMany: a forged {op: deleteMany, filter: {}}
// is refused by default (deletes not allowed), and still when deletes are
// allowed (a multi-document write); only WithMultiDocument lets it run.
// updateOne/deleteOne/replaceOne without an _id condition need it too.
func TestGuardRefusesIDLessDeleteMany(t *testing.T) {
	delAll := bson.D{{Key: "op", Value: "deleteMany"}, {Key: "filter", Value: bson.D{}}}
	for _, c := range []struct {
		opts []Option
		orig bson.D
		want string // "" when sent
	}{
		{nil, delAll, "deleteMany not allowed (allowed: inserts"},
		{[]Option{WithOperations(Deletes)}, delAll, "deleteMany may change many documents"},
		{[]Option{WithOperations(Deletes), WithMultiDocument()}, delAll, ""},
		{[]Option{WithOperations(Deletes)}, bson.D{{Key: "op", Value: "deleteOne"}, {Key: "filter", Value: bson.D{{Key: "sku", Value: "x"}}}}, "deleteOne filter has no _id condition"},
		{[]Option{WithOperations(Deletes)}, bson.D{{Key: "op", Value: "deleteOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 7}}}}, ""},
		{[]Option{WithOperations(Updates)}, bson.D{{Key: "op", Value: "updateOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: 0}}}}},
			{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}}}, "updateOne filter has no _id condition"},
		{[]Option{WithOperations(Updates)}, bson.D{{Key: "op", Value: "updateOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}}},
			{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}}}, ""},
		{[]Option{WithOperations(Updates)}, bson.D{{Key: "op", Value: "replaceOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 1}}},
			{Key: "replacement", Value: bson.D{{Key: "a", Value: 1}}}}, "replaceOne not allowed (allowed: updates"},
		{[]Option{WithOperations(Updates)}, bson.D{{Key: "_id", Value: 1}}, "insert not allowed (allowed: updates"},
	} {
		r := guardRunner(t, c.opts...)
		entries, send := r.prepare(context.Background(), []stored{modelEnv(t, "shop.orders", c.orig)}, nil)
		switch {
		case c.want == "" && len(send) != 1:
			t.Errorf("%v with %d options: refused (%q), want sent", c.orig, len(c.opts), entries[0].reason)
		case c.want != "" && (len(send) != 0 || entries[0].out != outRefused || !strings.HasPrefix(entries[0].reason, c.want)):
			t.Errorf("%v with %d options: outcome %v, reason %q; want refused: %q", c.orig, len(c.opts), entries[0].out, entries[0].reason, c.want)
		}
	}
}

func TestHasIDCondition(t *testing.T) {
	for _, c := range []struct {
		filter bson.D
		want   bool
	}{
		{bson.D{{Key: "_id", Value: 1}}, true},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "x", Value: 1}}, true},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "k", Value: 1}}}}, true},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: 1}}}}, true},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}}, true},
		{bson.D{{Key: "_id", Value: bson.D{}}}, true},
		{bson.D{}, false},
		{bson.D{{Key: "x", Value: 1}}, false},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: 1}}}}, false},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$ne", Value: 1}}}}, false},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$exists", Value: true}}}}, false},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$eq", Value: 1}, {Key: "$ne", Value: 2}}}}, false},
		{bson.D{{Key: "_id", Value: bson.Regex{Pattern: "."}}}, false},
		{bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "x", Value: 1}}}}}, false},
	} {
		if got := hasIDCondition(bson.Raw(mustMarshal(t, c.filter))); got != c.want {
			t.Errorf("hasIDCondition(%v) = %v, want %v", c.filter, got, c.want)
		}
	}
}

// TestHeldInFlight: an update whose earlier claim was in flight, with no
// try recorded since, is held, even by a run that would refuse it; one
// tried since (its runner died after marking it) and inserts (replayed by
// _id) are not.
func TestHeldInFlight(t *testing.T) {
	r := guardRunner(t, WithOperations(Inserts|Updates))
	upd := bson.D{{Key: "op", Value: "updateOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 1}}},
		{Key: "update", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}}}
	e := modelEnv(t, "shop.orders", upd)
	ins := modelEnv(t, "shop.orders", bson.D{{Key: "_id", Value: 1}})
	at := r.cfg.now()
	inFlight := map[string]time.Time{leaseKey(e.ID): at}
	entries, send := r.prepare(context.Background(), []stored{e, ins}, inFlight)
	if len(send) != 1 || entries[0].out != outHeld || entries[0].reason != holdInFlight || !entries[1].insert {
		t.Errorf("outcomes %v, %v; want the update held, the insert sent", entries[0].out, entries[1].out)
	}
	// Held too when this run would refuse it (updates not allowed): the
	// in-flight lease, the only record, goes once it is marked.
	r2 := guardRunner(t)
	if entries, _ := r2.prepare(context.Background(), []stored{e}, inFlight); entries[0].out != outHeld {
		t.Errorf("an in-flight update this run would refuse: outcome %v, want held", entries[0].out)
	}
	e.ReplayTriedAt = at.Add(1)
	if _, send := r.prepare(context.Background(), []stored{e}, inFlight); len(send) != 1 {
		t.Error("an update tried since the in-flight claim is held")
	}
}

// TestMarkUpdate: what each outcome records in the envelope.
func TestMarkUpdate(t *testing.T) {
	r := guardRunner(t, WithQuarantineAfter(3))
	r.cfg.run = "run-1"
	now := r.cfg.now()
	e := &entry{env: &stored{Envelope: envelope.Envelope{ReplayFailures: 2}}, out: outInvalid, code: 121, codeName: "DocumentValidationFailure"}
	r.judge([]*entry{e})
	got := bson.Raw(mustMarshal(t, r.markUpdate(e, now)))
	if got.Lookup("$set", "status").StringValue() != envelope.StatusQuarantined || got.Lookup("$set", "replay_failures").Int32() != 3 ||
		got.Lookup("$set", "replay_reason").StringValue() != "quarantined after 3 failed replays (limit 3); last: still_invalid: 121 DocumentValidationFailure" ||
		got.Lookup("$inc", "attempts").Int32() != 1 {
		t.Errorf("still invalid at the limit: %v", got)
	}
	e = &entry{env: &stored{}, out: outFailed, code: 6, codeName: "HostUnreachable"}
	r.judge([]*entry{e})
	got = bson.Raw(mustMarshal(t, r.markUpdate(e, now)))
	if _, err := got.LookupErr("$set", "replay_failures"); err == nil || e.failed {
		t.Errorf("a whole-command failure counts as a failed replay: %v", got)
	}
	e = &entry{env: &stored{}, out: outRefused, reason: "deleteMany not allowed"}
	r.judge([]*entry{e})
	got = bson.Raw(mustMarshal(t, r.markUpdate(e, now)))
	if got.Lookup("$set", "replay_reason").StringValue() != "refused: deleteMany not allowed" {
		t.Errorf("refused: %v", got)
	}
	e = &entry{env: &stored{}, out: outReplayed}
	got = bson.Raw(mustMarshal(t, r.markUpdate(e, now)))
	if got.Lookup("$set", "status").StringValue() != envelope.StatusReplayed || got.Lookup("$unset", "replay_reason").Type == 0 {
		t.Errorf("replayed: %v", got)
	}
}
