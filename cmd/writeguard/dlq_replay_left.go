package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
)

// This file accounts for the envelopes of a "dlq replay" filter that
// replay.Run never sees (trial findings B1, C2): those whose namespace is
// not "<database>.<collection>" (missing, empty, hand-edited) and those
// that cannot be decoded at all (dlq.Summary.Undecodable). Each is named
// with its _id and reason and counted as still pending, which makes the
// exit status 3.

// wellFormedNamespace reports whether ns is "<database>.<collection>"
// with both parts non-empty (what faultproxy.Validator and a replay
// target need).
func wellFormedNamespace(ns string) bool {
	db, coll, ok := strings.Cut(ns, ".")
	return ok && db != "" && coll != ""
}

// validatorScript returns the proxy script enforcing validator on the
// well-formed namespaces of groups; an envelope of another namespace is
// skipped by the replay (malformed), not a fault of --validator.
func validatorScript(groups []deadletter.Group, validator bson.D) (*faultproxy.Script, error) {
	var items []faultproxy.ScriptItem
	for _, g := range groups {
		if wellFormedNamespace(g.Key) {
			items = append(items, faultproxy.Validator(g.Key, validator))
		}
	}
	return faultproxy.NewScript(items...)
}

// malformedReason is the skip reason of an envelope whose namespace is
// ns, not "<database>.<collection>".
func malformedReason(ns string) string {
	if ns == "" {
		return "no namespace (missing or empty): no collection to write into"
	}
	return fmt.Sprintf("namespace %q is not of the form database.collection", ns)
}

// malformed accounts for the envelopes of group g, whose namespace is not
// "<database>.<collection>": nothing is written, each is named on stderr
// with its _id and reason and, outside a dry run, counted skipped in the
// returned outcome (Problems: the first 100) and left pending with the
// reason recorded (envelope.FieldReplayReason).
func (rr *replayRun) malformed(ctx context.Context, g deadletter.Group) (*replayOut, error) {
	why := malformedReason(g.Key)
	q, err := rr.sel.Query(time.Now())
	if err != nil {
		return nil, err
	}
	if g.Key == "" { // null matches a missing field too
		q = append(q, bson.E{Key: "namespace", Value: bson.D{{Key: "$in", Value: bson.A{"", nil}}}})
	} else {
		q = append(q, bson.E{Key: "namespace", Value: g.Key})
	}
	cur, err := rr.dlq.Find(ctx, q, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "fingerprint", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	res := replay.Result{}
	for cur.Next(ctx) {
		res.Scanned++
		res.Skipped++
		id := cur.Current.Lookup("_id")
		fp, _ := cur.Current.Lookup("fingerprint").StringValueOK()
		fmt.Fprintf(rr.stderr, "writeguard dlq replay: skipping envelope _id %s: %s (left pending)\n", envelope.IDString(id), why)
		if len(res.Problems) < 100 {
			id = bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)}
			res.Problems = append(res.Problems, replay.Problem{EnvelopeID: id, Fingerprint: fp, Outcome: "skipped", Reason: why})
		}
	}
	if err := cur.Err(); err != nil || rr.f.dryRun || res.Scanned == 0 {
		return nil, err
	}
	// The reason is recorded as replay.Run records a skip's (list
	// --json, show): "skipped: <why>". No lease: no replay ever claims
	// an envelope of a namespace it cannot write.
	set := bson.D{{Key: "$set", Value: bson.D{{Key: envelope.FieldReplayReason, Value: "skipped: " + why}}}}
	if _, err := rr.dlq.UpdateMany(ctx, q, set); err != nil {
		return nil, err
	}
	return &replayOut{Namespace: g.Key, Validation: "none: skipped (" + why + ")", Result: res}, nil
}

// leftPending returns how many envelopes of the filter are still pending
// after the replay: decodable ones with status pending, and every one
// that cannot be decoded (dlq.Stats counts those apart, in Undecodable,
// whatever their status reads, and replay never writes them).
func leftPending(left deadletter.Summary) int64 { return left.Pending + left.Undecodable }

// reportUndecodable names on w the envelopes of the filter that cannot
// be decoded (the first dlq.MaxDecodeErrors), which stay pending: replay
// skips those whose namespace it can read, and never sees the others.
func reportUndecodable(w io.Writer, left deadletter.Summary) {
	if left.Undecodable == 0 {
		return
	}
	fmt.Fprintf(w, "writeguard dlq replay: %s of this filter cannot be decoded and stay pending "+
		"(dlq list --undecodable, dlq show ID, dlq discard --undecodable):\n", plural(left.Undecodable, "envelope"))
	for _, de := range left.UndecodableErrors {
		fmt.Fprintf(w, "  %s\n", scrubbed(de.Error()))
	}
	if more := left.Undecodable - int64(len(left.UndecodableErrors)); more > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", more)
	}
}

// printMalformed prints the outcome of the envelopes of a namespace that
// is not "<database>.<collection>" (malformed): nothing written, each
// skipped with its _id and reason.
func printMalformed(w io.Writer, o replayOut) {
	fmt.Fprintf(w, "not replayed (namespace %q, not database.collection): %s skipped, left pending with the reason recorded\n",
		o.Namespace, plural(o.Skipped, "envelope"))
	for i, p := range o.Problems {
		if i == 10 {
			fmt.Fprintf(w, "  ... %d more (--json lists up to 100)\n", len(o.Problems)-10)
			break
		}
		fmt.Fprintf(w, "  %s %s (id %s): %s\n", p.Outcome, p.Fingerprint[:min(12, len(p.Fingerprint))], rawString(p.EnvelopeID), scrubbed(p.Reason))
	}
}
