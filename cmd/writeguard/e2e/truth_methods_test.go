package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// truthPoison is the number of poison documents among the oracle's inputs.
const truthPoison = 4

// markPoison marks n of the valid inputs as poison (field poison: true;
// the script rejects every insert command carrying one) and returns their
// input numbers.
func markPoison(rng *rand.Rand, inputs []chaosInput, n int) map[int]bool {
	out := map[int]bool{}
	for len(out) < n {
		i := rng.IntN(len(inputs))
		if inputs[i].kind != chaosGood || out[i] {
			continue
		}
		inputs[i].doc = append(inputs[i].doc, bson.E{Key: "poison", Value: true})
		out[inputs[i].n] = true
	}
	return out
}

// carriesPoison matches a command with a poison document among its
// statements.
func carriesPoison(cmd *faultproxy.Command) bool {
	for _, st := range cmd.Statements() {
		if v, err := st.LookupErr("poison"); err == nil && v.Type == bson.TypeBoolean && v.Boolean() {
			return true
		}
	}
	return false
}

// The oracle's second phase: the methods of one write (UpdateOne ...
// FindOneAndDelete), some marked idempotent and most not, each call on its
// own target (the documents with g = its number), under transient faults
// on the update, delete and findAndModify commands: errors before the
// write, interruptions after it, lost replies, dropped connections, write
// concern errors. Every Outcome is checked against the store: a write
// reported stored is applied; one reported not applied is not; nothing is
// applied twice ($inc counts each application in c).

const truthTargets = 360

type methodCase struct {
	name       string
	idempotent bool
	many       bool // the write touches both documents of the target
	delete     bool
	run        func(ctx context.Context, g *writeguard.Guarded, i int) error
}

func methodCases() []methodCase {
	inc := func() bson.D { return cbD("$inc", cbD("c", 1), "$set", cbD("v", 1)) }
	set := func() bson.D { return cbD("$set", cbD("v", 1)) }
	byID := func(i int) bson.D { return cbD("_id", i) }
	byG := func(i int) bson.D { return cbD("g", i) }
	fam := func(sr *mongo.SingleResult) error {
		if err := sr.Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return err
		}
		return nil
	}
	return []methodCase{
		{name: "updateOne", run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			_, err := g.UpdateOne(ctx, byID(i), inc())
			return err
		}},
		{name: "updateByID", idempotent: true, run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			_, err := g.UpdateByID(writeguard.WithIdempotent(ctx), i, set())
			return err
		}},
		{name: "updateMany", many: true, run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			_, err := g.UpdateMany(ctx, byG(i), inc())
			return err
		}},
		{name: "replaceOne", idempotent: true, run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			_, err := g.ReplaceOne(writeguard.IdempotentModels(ctx, 0), byID(i), cbD("g", i, "v", 1, "c", 0))
			return err
		}},
		{name: "deleteOne", idempotent: true, delete: true, run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			_, err := g.DeleteOne(writeguard.WithIdempotent(ctx), byID(i))
			return err
		}},
		{name: "deleteMany", many: true, delete: true, run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			_, err := g.DeleteMany(ctx, byG(i))
			return err
		}},
		{name: "findOneAndUpdate", run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			return fam(g.FindOneAndUpdate(ctx, byID(i), inc()))
		}},
		// Marked idempotent, yet never sent again once it may have been
		// applied (a findAndModify's result is a document a second run
		// cannot give back): the oracle expects it written or unknown.
		{name: "findOneAndReplace", run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			return fam(g.FindOneAndReplace(writeguard.WithIdempotent(ctx), byID(i), cbD("g", i, "v", 1, "c", 0)))
		}},
		{name: "findOneAndDelete", delete: true, run: func(ctx context.Context, g *writeguard.Guarded, i int) error {
			return fam(g.FindOneAndDelete(ctx, byID(i)))
		}},
	}
}

func methodScript(ns string, seed int64) []faultproxy.ScriptItem {
	retryable := []string{"RetryableWriteError"}
	ce := func(code int32, name string, labels []string) faultproxy.CommandError {
		return faultproxy.CommandError{Code: code, CodeName: name, Message: name, Labels: labels}
	}
	var items []faultproxy.ScriptItem
	for k, cmd := range []string{"update", "delete", "findAndModify"} {
		faults := []faultproxy.Rate{
			{P: 0.04, Fault: faultproxy.ErrorReply(ce(189, "PrimarySteppedDown", retryable))},
			{P: 0.03, Fault: faultproxy.CloseAfterForward()},
			{P: 0.02, Fault: faultproxy.CloseBeforeForward()},
			{P: 0.02, Fault: faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 6, CodeName: "HostUnreachable", Labels: retryable})},
		}
		if cmd != "findAndModify" {
			faults = append(faults,
				faultproxy.Rate{P: 0.02, Fault: faultproxy.ApplyThenError(1, ce(11600, "InterruptedAtShutdown", nil))},
				faultproxy.Rate{P: 0.02, Fault: faultproxy.ApplyThenClose(1)})
		}
		items = append(items, faultproxy.On(cmd).In(ns).Always().Do(faultproxy.RandomSchedule(seed*31+int64(k), faults...)))
	}
	return items
}

type methodCall struct {
	target int
	mc     methodCase
	err    error
	out    writeguard.Outcome
}

func truthMethods(t *testing.T, b *caseBed, seed int64, workers int) {
	const coll = "truth_methods"
	var docs []any
	for i := range truthTargets {
		docs = append(docs, cbD("_id", i, "g", i, "v", 0, "c", 0), cbD("_id", 100000+i, "g", i, "v", 0, "c", 0))
	}
	b.seed(coll, docs...)
	g := b.guard(coll, writeguard.WithBackoff(policy.Backoff{Base: 5 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 8}))
	b.script(methodScript(b.ns(coll), seed)...)
	cases := methodCases()
	var calls []*methodCall
	for i := range truthTargets {
		calls = append(calls, &methodCall{target: i, mc: cases[i%len(cases)]})
	}
	var mu sync.Mutex
	concurrently(workers, calls, func(c *methodCall) {
		err := c.mc.run(b.ctx, g.Guarded, c.target)
		mu.Lock()
		defer mu.Unlock()
		c.err = err
		var r *writeguard.Report
		switch {
		case err == nil:
			c.out = writeguard.Outcome{Disposition: writeguard.Written}
		case errors.As(err, &r) && len(r.Outcomes) == 1:
			c.out = r.Outcomes[0]
		default:
			c.out = writeguard.Outcome{Disposition: "NO_REPORT", MaybeWritten: true}
		}
	})

	byG := map[int][]bson.Raw{}
	for _, d := range b.docs(coll) {
		gi := int(d.Lookup("g").AsInt64())
		byG[gi] = append(byG[gi], d)
	}
	disp := map[string]int{}
	untrue, twice := 0, 0
	for _, c := range calls {
		disp[c.mc.name+":"+string(c.out.Disposition)]++
		applied, n := applications(c, byG[c.target])
		if n > 1 {
			twice++
			t.Errorf("methods: %s on %d applied %d times (%s)", c.mc.name, c.target, n, c.out.Disposition)
		}
		var why string
		switch d := c.out.Disposition; {
		case d.Stored() && !applied:
			why = "reported stored, not applied"
		case d == writeguard.OutcomeUnknown && !c.out.MaybeWritten:
			why = "unknown without MaybeWritten"
		case !d.Stored() && d != writeguard.OutcomeUnknown && applied && !c.out.MaybeWritten:
			why = "reported not applied, applied"
		case d == writeguard.NotAttempted && c.out.Attempts != 0:
			why = "not_attempted but sent"
		case d == "NO_REPORT":
			why = fmt.Sprintf("no Report: %v", c.err)
		case c.mc.idempotent && !d.Stored():
			why = "an idempotent write not written under transient faults"
		}
		if why != "" {
			untrue++
			t.Errorf("methods: %s on %d: %s (maybe=%v attempts=%d): %s", c.mc.name, c.target, c.out.Disposition, c.out.MaybeWritten, c.out.Attempts, why)
		}
	}
	var keys []string
	for k, n := range disp {
		keys = append(keys, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(keys)
	t.Logf("truth oracle: methods, seed %d, %d writers, %d calls: %s; untrue %d, applied twice %d; faults %v",
		seed, workers, len(calls), strings.Join(keys, " "), untrue, twice, b.proxy.Stats().Faults)
}

// applications reads a target's documents: whether c's write is applied,
// and how many times ($inc of c; 1 for the other writes once applied).
func applications(c *methodCall, docs []bson.Raw) (bool, int) {
	if c.mc.delete {
		want := 1
		if c.mc.many {
			want = 2
		}
		gone := 2 - len(docs)
		return gone == want, min(gone, 1)
	}
	applied, n := false, 0
	for _, d := range docs {
		own := d.Lookup("_id").AsInt64() == int64(c.target)
		if !own && !c.mc.many {
			continue
		}
		if d.Lookup("v").AsInt64() == 1 {
			applied = true
		}
		if k := int(d.Lookup("c").AsInt64()); k > n {
			n = k
		}
	}
	if applied && n == 0 {
		n = 1
	}
	return applied, n
}
