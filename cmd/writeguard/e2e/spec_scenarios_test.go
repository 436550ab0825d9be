package e2e

// The drivers' retryable-writes specification scenarios (insertOne,
// insertMany, bulkWrite; testdata/retryable_writes_scenarios.json, see its
// README for the source) run on the bed in replica-set mode: the driver →
// faultproxy (replica-set primary, retryable-write records, fail points)
// → embedded FerretDB. Each scenario runs twice, on a fresh bed each time:
//
//   - raw: the driver alone, retryable writes on. It must meet the
//     scenario's expectations (result or error and labels, the write
//     commands sent and their txnNumbers, the collection afterwards). This
//     validates the bed; a scenario it cannot reproduce is listed in
//     specNotReproduced with the reason.
//   - guarded: the same operation through writeguard.Wrap. It must end with
//     the same collection contents as the raw run (never fewer documents,
//     none applied twice), and every insert's disposition must agree with
//     the store.
//
// The calls have no deadline: with one, the driver (client-side operation
// timeout) retries a retryable write as often as the deadline allows
// instead of once, and the command counts of the specification do not
// hold.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/writeguard/writeguard"
)

// specScenario is one entry of the scenarios file (only the fields the
// runner uses).
type specScenario struct {
	ID       string `json:"id"`
	Summary  string `json:"summary"`
	Requires []struct {
		Min        string   `json:"min_server_version"`
		Max        *string  `json:"max_server_version"`
		Topologies []string `json:"topologies"`
		Auth       *bool    `json:"auth"`
	} `json:"requires"`
	InitialData []json.RawMessage `json:"initial_data"`
	FailPoint   *struct {
		Kind string          `json:"kind"`
		Mode json.RawMessage `json:"mode"`
		Data json.RawMessage `json:"data"`
	} `json:"fail_point"`
	ClientOptions     map[string]any  `json:"client_options"`
	CollectionOptions map[string]any  `json:"collection_options"`
	PreOperations     []specPreOp     `json:"pre_operations"`
	Operation         specOperation   `json:"operation"`
	Expect            specExpect      `json:"expect"`
	ExpectedCommands  *specCommands   `json:"expected_commands"`
	Outcome           json.RawMessage `json:"outcome"`
}

type specPreOp struct {
	Name        string          `json:"name"`
	Arguments   json.RawMessage `json:"arguments"`
	ExpectError *struct {
		IsError bool `json:"is_error"`
	} `json:"expect_error"`
}

type specOperation struct {
	Name      string `json:"name"`
	Arguments struct {
		Document  json.RawMessage   `json:"document"`
		Documents []json.RawMessage `json:"documents"`
		Requests  []map[string]struct {
			Filter      json.RawMessage `json:"filter"`
			Update      json.RawMessage `json:"update"`
			Replacement json.RawMessage `json:"replacement"`
			Document    json.RawMessage `json:"document"`
			Upsert      *bool           `json:"upsert"`
		} `json:"requests"`
		Ordered *bool `json:"ordered"`
	} `json:"arguments"`
}

type specExpect struct {
	Result        map[string]any `json:"result"`
	ResultMayOmit []string       `json:"result_may_omit"`
	Error         *struct {
		IsError              bool           `json:"is_error"`
		LabelsContain        []string       `json:"labels_contain"`
		LabelsOmit           []string       `json:"labels_omit"`
		ErrorCode            *int32         `json:"error_code"`
		PartialResult        map[string]any `json:"partial_result"`
		PartialResultMayOmit []string       `json:"partial_result_may_omit"`
	} `json:"error"`
}

type specCommands struct {
	Count    int      `json:"count"`
	Names    []string `json:"names"`
	Commands []struct {
		Name             string `json:"name"`
		TxnNumberPresent *bool  `json:"txn_number_present"`
	} `json:"commands"`
}

// specNotReproduced lists the scenarios the bed cannot reproduce, and why.
// The runner checks that each of them is indeed not met, so the list
// cannot go stale silently.
var specNotReproduced = map[string]string{}

// specSkipReason says why the bed (a one-member replica set reporting
// MongoDB 7.0, no authentication) does not meet a scenario's requirements,
// or "" when it does.
func specSkipReason(s specScenario) string {
	var reasons []string
	for _, r := range s.Requires {
		switch {
		case r.Auth != nil && *r.Auth:
			reasons = append(reasons, "needs authentication (the handshake's saslContinue): the bed runs without")
		case r.Max != nil && !strings.HasPrefix(*r.Max, "7") && *r.Max < "7":
			reasons = append(reasons, fmt.Sprintf("only for servers %s to %s: the bed reports 7.0 (wire version 21)", r.Min, *r.Max))
		case !slices.Contains(r.Topologies, "replicaset") && len(r.Topologies) > 0:
			reasons = append(reasons, fmt.Sprintf("only for topologies %v: the bed is a replica set", r.Topologies))
		default:
			return ""
		}
	}
	return strings.Join(slices.Compact(reasons), "; ")
}

func loadSpecScenarios(t *testing.T) []specScenario {
	t.Helper()
	raw, err := os.ReadFile("testdata/retryable_writes_scenarios.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []specScenario
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("testdata/retryable_writes_scenarios.json: %v", err)
	}
	return out
}

// extDoc converts a relaxed Extended JSON document to bson.D (numbers
// that fit become int32, as the server stores the spec's documents).
func extDoc(t testing.TB, raw json.RawMessage) bson.D {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var d bson.D
	if err := bson.UnmarshalExtJSON(raw, false, &d); err != nil {
		t.Fatalf("extended JSON %s: %v", raw, err)
	}
	return d
}

// relaxed renders a document for comparison: relaxed Extended JSON, so
// that int32, int64 and integral doubles compare by value.
func relaxed(v any) string {
	b, err := bson.MarshalExtJSON(v, false, false)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// specCmd is a write command the app client started.
type specCmd struct {
	name string
	txn  bool
}

type specCmdLog struct {
	mu   sync.Mutex
	cmds []specCmd
}

func (l *specCmdLog) option(coll string) cbOption {
	return cbClientOptions(func(o *options.ClientOptions) {
		prev := o.Monitor
		o.SetMonitor(&event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			if prev != nil && prev.Started != nil {
				prev.Started(ctx, e)
			}
			switch e.CommandName {
			case "insert", "update", "delete":
			default:
				return
			}
			if c, _ := e.Command.Lookup(e.CommandName).StringValueOK(); c != coll {
				return
			}
			_, err := e.Command.LookupErr("txnNumber")
			l.mu.Lock()
			l.cmds = append(l.cmds, specCmd{name: e.CommandName, txn: err == nil})
			l.mu.Unlock()
		}})
	})
}

func (l *specCmdLog) reset() {
	l.mu.Lock()
	l.cmds = nil
	l.mu.Unlock()
}

func (l *specCmdLog) get() []specCmd {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]specCmd(nil), l.cmds...)
}

// specRun is what one run of a scenario produced.
type specRun struct {
	result   any   // *mongo.InsertOneResult, *mongo.InsertManyResult, *mongo.BulkWriteResult
	err      error // the operation's error
	cmds     []specCmd
	contents []string        // the collection afterwards, relaxed Extended JSON, by _id
	inputs   []bson.D        // the documents of the operation's inserts, in input order
	insertAt []int           // for each of inputs, its index in the operation (bulkWrite request index)
	initial  map[string]bool // _ids of the documents seeded before the run
	backend  string
}

const specColl = "coll"

// runSpec runs scenario s once on a fresh bed, raw or guarded.
func runSpec(t *testing.T, s specScenario, guarded bool) specRun {
	t.Helper()
	log := &specCmdLog{}
	opts := []cbOption{cbReplicaSet(), log.option(specColl), cbClientOptions(func(o *options.ClientOptions) { o.SetAppName("wg-spec") })}
	if rw, ok := s.ClientOptions["retryWrites"].(bool); !ok || rw {
		opts = append(opts, cbRetryWrites())
	}
	b := newCaseBed(t, opts...)
	ctx := context.Background()
	var initial []any
	initialIDs := map[string]bool{}
	for _, d := range s.InitialData {
		doc := extDoc(t, d)
		initial = append(initial, doc)
		for _, e := range doc {
			if e.Key == "_id" {
				initialIDs[relaxed(bson.D{{Key: "v", Value: e.Value}})] = true
			}
		}
	}
	if len(initial) > 0 {
		b.seed(specColl, initial...)
	}
	collOpts := options.Collection()
	unacknowledged := false
	if wc, ok := s.CollectionOptions["writeConcern"].(map[string]any); ok {
		if w, ok := wc["w"].(float64); ok && w == 0 {
			collOpts.SetWriteConcern(writeconcern.Unacknowledged())
			unacknowledged = true
		}
	}
	coll := b.db.Collection(specColl, collOpts)
	var g *cbGuard
	if guarded {
		g = b.guardColl(coll)
	}
	if fp := s.FailPoint; fp != nil {
		cmd := bson.D{{Key: "configureFailPoint", Value: fp.Kind}}
		var mode any
		if err := bson.UnmarshalExtJSON(fp.Mode, false, &mode); err != nil {
			t.Fatalf("fail point mode: %v", err)
		}
		cmd = append(cmd, bson.E{Key: "mode", Value: mode})
		if d := extDoc(t, fp.Data); d != nil {
			cmd = append(cmd, bson.E{Key: "data", Value: d})
		}
		if err := b.failPoint(cmd); err != nil {
			t.Fatalf("configureFailPoint on %s: %v", b.backend(), err)
		}
	}
	for _, pre := range s.PreOperations {
		var args struct {
			Command json.RawMessage `json:"command"`
		}
		_ = json.Unmarshal(pre.Arguments, &args)
		err := b.db.RunCommand(ctx, extDoc(t, args.Command)).Err()
		if pre.ExpectError != nil && pre.ExpectError.IsError && err == nil {
			t.Errorf("pre-operation %s succeeded, want an error", pre.Name)
		}
	}
	log.reset()

	run := specRun{backend: b.backend(), initial: initialIDs}
	op := s.Operation
	switch op.Name {
	case "insertOne":
		doc := extDoc(t, op.Arguments.Document)
		run.inputs, run.insertAt = []bson.D{doc}, []int{0}
		if guarded {
			run.result, run.err = g.InsertOne(ctx, doc)
		} else {
			run.result, run.err = coll.InsertOne(ctx, doc)
		}
	case "insertMany":
		var docs []any
		for i, d := range op.Arguments.Documents {
			doc := extDoc(t, d)
			docs = append(docs, doc)
			run.inputs, run.insertAt = append(run.inputs, doc), append(run.insertAt, i)
		}
		o := options.InsertMany()
		if op.Arguments.Ordered != nil {
			o.SetOrdered(*op.Arguments.Ordered)
		}
		if guarded {
			run.result, run.err = g.InsertMany(ctx, docs, o)
		} else {
			run.result, run.err = coll.InsertMany(ctx, docs, o)
		}
	case "bulkWrite":
		var models []mongo.WriteModel
		for i, req := range op.Arguments.Requests {
			for kind, a := range req {
				switch kind {
				case "insertOne":
					doc := extDoc(t, a.Document)
					run.inputs, run.insertAt = append(run.inputs, doc), append(run.insertAt, i)
					models = append(models, mongo.NewInsertOneModel().SetDocument(doc))
				case "updateOne":
					m := mongo.NewUpdateOneModel().SetFilter(extDoc(t, a.Filter)).SetUpdate(extDoc(t, a.Update))
					if a.Upsert != nil {
						m.SetUpsert(*a.Upsert)
					}
					models = append(models, m)
				case "updateMany":
					m := mongo.NewUpdateManyModel().SetFilter(extDoc(t, a.Filter)).SetUpdate(extDoc(t, a.Update))
					if a.Upsert != nil {
						m.SetUpsert(*a.Upsert)
					}
					models = append(models, m)
				case "replaceOne":
					m := mongo.NewReplaceOneModel().SetFilter(extDoc(t, a.Filter)).SetReplacement(extDoc(t, a.Replacement))
					if a.Upsert != nil {
						m.SetUpsert(*a.Upsert)
					}
					models = append(models, m)
				case "deleteOne":
					models = append(models, mongo.NewDeleteOneModel().SetFilter(extDoc(t, a.Filter)))
				case "deleteMany":
					models = append(models, mongo.NewDeleteManyModel().SetFilter(extDoc(t, a.Filter)))
				default:
					t.Fatalf("bulkWrite request %q not supported by the runner", kind)
				}
			}
		}
		o := options.BulkWrite()
		if op.Arguments.Ordered != nil {
			o.SetOrdered(*op.Arguments.Ordered)
		}
		if guarded {
			run.result, run.err = g.BulkWrite(ctx, models, o)
		} else {
			run.result, run.err = coll.BulkWrite(ctx, models, o)
		}
	default:
		t.Fatalf("operation %q not supported by the runner", op.Name)
	}
	run.cmds = log.get()
	// Turn the fail point off before reading (the direct client does not
	// go through the proxy, but a leftover alwaysOn should not outlive the
	// run).
	if s.FailPoint != nil {
		_ = b.failPoint(bson.D{{Key: "configureFailPoint", Value: s.FailPoint.Kind}, {Key: "mode", Value: "off"}})
	}
	docs := b.docs(specColl)
	// An unacknowledged write is applied after the call returns: wait (at
	// most 2 s) until the documents of the inserts are readable.
	for deadline := time.Now().Add(2 * time.Second); unacknowledged && len(docs) < len(initial)+len(run.inputs) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		docs = b.docs(specColl)
	}
	for _, d := range docs {
		run.contents = append(run.contents, relaxed(d))
	}
	return run
}

// errLabels returns the error labels of err (server or network error).
func errLabels(err error) []string {
	var out []string
	var le interface{ HasErrorLabel(string) bool }
	if !errors.As(err, &le) {
		return nil
	}
	for _, l := range []string{"RetryableWriteError", "NoWritesPerformed", "NetworkError", "TransientTransactionError", "SystemOverloadedError"} {
		if le.HasErrorLabel(l) {
			out = append(out, l)
		}
	}
	return out
}

// resultFields renders the fields of a driver result the spec names.
func resultFields(res any) map[string]string {
	out := map[string]string{}
	switch r := res.(type) {
	case *mongo.InsertOneResult:
		if r != nil {
			out["insertedId"] = relaxed(bson.D{{Key: "v", Value: r.InsertedID}})
		}
	case *mongo.InsertManyResult:
		if r != nil {
			m := bson.D{}
			for i, id := range r.InsertedIDs {
				m = append(m, bson.E{Key: fmt.Sprint(i), Value: id})
			}
			out["insertedIds"] = relaxed(bson.D{{Key: "v", Value: m}})
		}
	case *mongo.BulkWriteResult:
		if r != nil {
			for k, v := range map[string]int64{"deletedCount": r.DeletedCount, "insertedCount": r.InsertedCount,
				"matchedCount": r.MatchedCount, "modifiedCount": r.ModifiedCount, "upsertedCount": r.UpsertedCount} {
				out[k] = relaxed(bson.D{{Key: "v", Value: v}})
			}
			keys := make([]int64, 0, len(r.UpsertedIDs))
			for k := range r.UpsertedIDs {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			m := bson.D{}
			for _, k := range keys {
				m = append(m, bson.E{Key: fmt.Sprint(k), Value: r.UpsertedIDs[k]})
			}
			out["upsertedIds"] = relaxed(bson.D{{Key: "v", Value: m}})
		}
	}
	return out
}

// compareResult lists how got differs from the spec's expected result
// fields; fields in mayOmit are checked only when the driver gives them
// (the Go driver's BulkWriteResult has no insertedIds).
func compareResult(want map[string]any, mayOmit []string, got any) []string {
	have := resultFields(got)
	var diffs []string
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := have[k]
		if !ok {
			if !slices.Contains(mayOmit, k) && !slices.Contains(mayOmit, "$") && k != "insertedIds" {
				diffs = append(diffs, fmt.Sprintf("result.%s missing", k))
			}
			continue
		}
		wb, _ := json.Marshal(map[string]any{"v": want[k]})
		var wd bson.D
		if err := bson.UnmarshalExtJSON(wb, false, &wd); err != nil {
			diffs = append(diffs, fmt.Sprintf("result.%s: %v", k, err))
			continue
		}
		if w := relaxed(wd); w != g {
			diffs = append(diffs, fmt.Sprintf("result.%s = %s, want %s", k, g, w))
		}
	}
	return diffs
}

// checkRaw lists how a raw run misses the scenario's expectations.
func checkRaw(t *testing.T, s specScenario, r specRun) []string {
	var diffs []string
	if e := s.Expect.Error; e != nil && e.IsError {
		if r.err == nil {
			diffs = append(diffs, "succeeded, want an error")
		} else {
			labels := errLabels(r.err)
			for _, l := range e.LabelsContain {
				if !slices.Contains(labels, l) {
					diffs = append(diffs, fmt.Sprintf("error labels %v lack %s", labels, l))
				}
			}
			for _, l := range e.LabelsOmit {
				if slices.Contains(labels, l) {
					diffs = append(diffs, fmt.Sprintf("error labels %v have %s", labels, l))
				}
			}
			if e.ErrorCode != nil {
				var se mongo.ServerError
				if !errors.As(r.err, &se) || !se.HasErrorCode(int(*e.ErrorCode)) {
					diffs = append(diffs, fmt.Sprintf("error %v, want code %d", r.err, *e.ErrorCode))
				}
			}
			if e.PartialResult != nil {
				diffs = append(diffs, compareResult(e.PartialResult, e.PartialResultMayOmit, r.result)...)
			}
		}
	} else {
		if r.err != nil {
			diffs = append(diffs, fmt.Sprintf("error %v, want success", r.err))
		} else if s.Expect.Result != nil {
			diffs = append(diffs, compareResult(s.Expect.Result, s.Expect.ResultMayOmit, r.result)...)
		}
	}
	if ec := s.ExpectedCommands; ec != nil {
		var names []string
		for _, c := range r.cmds {
			names = append(names, c.name)
		}
		if len(r.cmds) != ec.Count || !slices.Equal(names, ec.Names) {
			diffs = append(diffs, fmt.Sprintf("write commands %v, want %v", names, ec.Names))
		} else {
			for i, c := range ec.Commands {
				if c.TxnNumberPresent != nil && r.cmds[i].txn != *c.TxnNumberPresent {
					diffs = append(diffs, fmt.Sprintf("command %d (%s): txnNumber present %v, want %v", i+1, c.Name, r.cmds[i].txn, *c.TxnNumberPresent))
				}
			}
		}
	}
	if string(s.Outcome) != "" && string(s.Outcome) != "null" {
		var want []json.RawMessage
		if err := json.Unmarshal(s.Outcome, &want); err != nil {
			t.Fatalf("%s outcome: %v", s.ID, err)
		}
		var ws []string
		for _, d := range want {
			ws = append(ws, relaxed(extDoc(t, d)))
		}
		if !slices.Equal(ws, r.contents) {
			diffs = append(diffs, fmt.Sprintf("collection %v, want %v", r.contents, ws))
		}
	}
	return diffs
}

// isCompletedBulk reports whether g is a bulk write that wrote every
// model and updated or deleted something (see checkGuarded).
func isCompletedBulk(g specRun) bool {
	bw, ok := g.result.(*mongo.BulkWriteResult)
	return ok && g.err == nil && bw.MatchedCount+bw.DeletedCount+bw.UpsertedCount > 0
}

// checkGuarded lists how a guarded run falls short of the raw one. Every
// document the raw run left in the collection must be there, identical
// (so never fewer documents, and no update applied twice); a document only
// the guarded run stored must be one of its inserts reported written (a
// write the driver gave up on and writeguard's retry completed); and every
// insert's disposition must agree with the store: written or
// already_written (or written_unconfirmed) means stored; any other
// disposition without MaybeWritten means this call did not store it.
func checkGuarded(raw, g specRun) []string {
	var diffs []string
	if len(g.contents) < len(raw.contents) && !isCompletedBulk(g) {
		diffs = append(diffs, fmt.Sprintf("guarded stored %d documents, raw %d", len(g.contents), len(raw.contents)))
	}
	byID := func(contents []string) map[string]string {
		m := map[string]string{}
		for _, c := range contents {
			var d bson.Raw
			if err := bson.UnmarshalExtJSON([]byte(c), false, &d); err == nil {
				m[relaxed(bson.D{{Key: "v", Value: d.Lookup("_id")}})] = c
			}
		}
		return m
	}
	rawByID, gByID := byID(raw.contents), byID(g.contents)
	// A guarded bulk write that wrote every model (no error) may have
	// updated or deleted documents the raw run left alone: writeguard sends
	// one server command per model kind, so the raw run's failing insert
	// command stopped the ordered write before its updates and deletes,
	// which the guarded run completed once after retrying the insert.
	completed := isCompletedBulk(g)
	for id, doc := range rawByID {
		if completed {
			continue
		}
		if gd, ok := gByID[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("raw stored %s, guarded did not", doc))
		} else if gd != doc {
			diffs = append(diffs, fmt.Sprintf("document %s: guarded %s, raw %s", id, gd, doc))
		}
	}
	var rep *writeguard.Report
	if g.err != nil && !errors.As(g.err, &rep) {
		return append(diffs, fmt.Sprintf("guarded error %v is not a Report", g.err))
	}
	// stored reports whether input insert j is in the guarded collection:
	// by _id, or, for a document sent without one, by its other fields.
	stored := func(doc bson.D) (string, bool) {
		for _, e := range doc {
			if e.Key == "_id" {
				id := relaxed(bson.D{{Key: "v", Value: e.Value}})
				_, ok := gByID[id]
				return id, ok
			}
		}
		want := relaxed(doc)
		for id, c := range gByID {
			var d bson.D
			if err := bson.UnmarshalExtJSON([]byte(c), false, &d); err == nil {
				rest := slices.DeleteFunc(d, func(e bson.E) bool { return e.Key == "_id" })
				if relaxed(rest) == want {
					return id, true
				}
			}
		}
		return "", false
	}
	written := map[string]bool{}
	for j, doc := range g.inputs {
		id, present := stored(doc)
		ok := rep == nil
		if rep != nil {
			o := rep.Outcomes[g.insertAt[j]]
			switch o.Disposition {
			case writeguard.Written, writeguard.AlreadyWritten, writeguard.WrittenUnconfirmed:
				ok = true
				if !present {
					diffs = append(diffs, fmt.Sprintf("insert %d: %s but not stored", g.insertAt[j], o.Disposition))
				}
			case writeguard.OutcomeUnknown, writeguard.Unacknowledged:
			default:
				if present && !o.MaybeWritten && !g.initial[id] {
					diffs = append(diffs, fmt.Sprintf("insert %d: %s (not maybe-written) but stored by this call", g.insertAt[j], o.Disposition))
				}
			}
		} else if !present {
			diffs = append(diffs, fmt.Sprintf("insert %d: the call succeeded but %s is not stored", g.insertAt[j], relaxed(doc)))
		}
		if ok && present {
			written[id] = true
		}
	}
	for id, doc := range gByID {
		if _, inRaw := rawByID[id]; !inRaw && !written[id] {
			diffs = append(diffs, fmt.Sprintf("guarded stored %s, which raw did not and no written insert explains", doc))
		}
	}
	sort.Strings(diffs)
	return diffs
}

func TestSpecScenarios(t *testing.T) {
	if cbRealURI() != "" {
		t.Skip("backend: MONGODB_URI is set; the spec scenarios run on the bed only (the drivers run them on real servers)")
	}
	scenarios := loadSpecScenarios(t)
	var (
		reproduced, guardedOK int
		notReproduced         []string
		guardedBad            []string
	)
	for _, s := range scenarios {
		t.Run(s.ID, func(t *testing.T) {
			if why := specSkipReason(s); why != "" {
				notReproduced = append(notReproduced, fmt.Sprintf("%s: %s", s.ID, why))
				t.Logf("not reproduced on the bed: %s", why)
				return
			}
			raw := runSpec(t, s, false)
			diffs := checkRaw(t, s, raw)
			if why, listed := specNotReproduced[s.ID]; listed {
				if len(diffs) == 0 {
					t.Errorf("listed as not reproduced (%s) but the bed meets it now: drop it from specNotReproduced", why)
				}
				notReproduced = append(notReproduced, fmt.Sprintf("%s: %s", s.ID, why))
				t.Logf("not reproduced on the bed: %s (%s)", why, strings.Join(diffs, "; "))
				return
			}
			if len(diffs) > 0 {
				t.Errorf("%s: the raw driver on the bed (%s) misses the scenario (%s):\n  %s", s.ID, raw.backend, s.Summary, strings.Join(diffs, "\n  "))
				notReproduced = append(notReproduced, s.ID+": unexpected: "+strings.Join(diffs, "; "))
				return
			}
			reproduced++
			g := runSpec(t, s, true)
			if gd := checkGuarded(raw, g); len(gd) > 0 {
				guardedBad = append(guardedBad, s.ID)
				t.Errorf("%s: guarded falls short of raw (%s):\n  %s", s.ID, s.Summary, strings.Join(gd, "\n  "))
				return
			}
			guardedOK++
		})
	}
	for _, n := range notReproduced {
		t.Logf("not reproduced: %s", n)
	}
	if len(guardedBad) > 0 {
		t.Logf("guarded below raw: %v", guardedBad)
	}
	t.Logf("spec scenarios: bed reproduces %d/%d; guarded ≥ raw on %d/%d", reproduced, len(scenarios), guardedOK, reproduced)
}
