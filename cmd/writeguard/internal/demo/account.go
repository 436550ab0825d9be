package demo

import (
	"context"
	"fmt"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/jsonschema"
)

// account counts the dispositions, reads every _id of the target and every
// envelope of the dead-letter collection, and checks that each row is in
// exactly one place.
func account(ctx context.Context, db *mongo.Database, cfg Config, rows []Row, out []rowOutcome, res *Result) error {
	res.Dispositions = map[string]int{}
	for _, o := range out {
		res.Dispositions[string(o.disp)]++
	}
	settleDuplicateRows(rows, out, res)
	if res.Server == conn.KindEmbedded {
		checkStoredRowsValid(rows, out, res)
	}
	countDispositions(out, res)
	inTarget, err := readTargetIDs(ctx, db.Collection(cfg.Collection), res)
	if err != nil {
		return err
	}
	inDLQ, err := readDLQ(ctx, db.Collection(cfg.DLQ), res)
	if err != nil {
		return err
	}
	expected, misplaced := placeRows(rows, out, inTarget, inDLQ, res)
	checkTarget(rows, inTarget, expected, res)
	res.Problems = append(res.Problems, truthProblems(rows, out, inTarget, expected, res)...)
	checkTotals(misplaced, res)
	return nil
}

// settleDuplicateRows: rows sharing an _id are the same order line. Among
// the rows of one _id that reached the target, one stored it; the others
// are duplicate rows, whatever writeguard could tell: after a lost reply a
// duplicate reads back identical and is reported already_written. Such
// rows are counted as conflicts (DuplicatesReadBack says how many).
func settleDuplicateRows(rows []Row, out []rowOutcome, res *Result) {
	seen := map[string]int{}
	groups := map[string][]int{}
	for i, r := range rows {
		seen[r.ID]++
		if seen[r.ID] > 1 {
			res.DuplicateRows++
		}
		if d := out[i].disp; d.Stored() {
			groups[r.ID] = append(groups[r.ID], i)
		}
	}
	for id, g := range groups {
		if len(g) < 2 {
			continue
		}
		writer := g[0]
		for _, i := range g {
			if out[i].disp == writeguard.Written {
				writer = i
				break
			}
		}
		for _, i := range g {
			switch {
			case i == writer:
			case out[i].disp == writeguard.AlreadyWritten:
				res.DuplicatesReadBack++
				out[i].disp = writeguard.ConflictSkipped
			default:
				res.Problems = append(res.Problems, fmt.Sprintf("lines %d and %d (same _id %s) were both reported %s (attempts %d/%d, last failure code %d/%d, batches %d/%d)",
					rows[writer].Line, rows[i].Line, id, out[i].disp, out[writer].attempts, out[i].attempts, out[writer].code, out[i].code, out[writer].batch, out[i].batch))
			}
		}
	}
}

// checkStoredRowsValid: on the embedded server the validator is the
// proxy's emulation: check that no stored row is one it rejects (a bypass
// would otherwise pass as "written").
func checkStoredRowsValid(rows []Row, out []rowOutcome, res *Result) {
	v, err := jsonschema.Compile(Validator())
	if err != nil {
		return
	}
	var bad []string
	for i, r := range rows {
		if d := out[i].disp; (d.Stored() || d == writeguard.ConflictSkipped) && v.Validate(r.Doc) != nil {
			bad = append(bad, fmt.Sprintf("line %d (%s, attempts %d, batch at row %d)", r.Line, d, out[i].attempts, out[i].batch+1))
		}
	}
	if len(bad) > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d rows the validator rejects were stored: %v", len(bad), bad[:min(5, len(bad))]))
	}
}

// countDispositions fills the per-disposition counts and the dead-lettered
// rows' keywords.
func countDispositions(out []rowOutcome, res *Result) {
	res.Keywords, res.KeywordPaths, res.Other = map[string]int{}, map[string]int{}, map[string]int{}
	for _, o := range out {
		switch d := o.disp; {
		case d == writeguard.Written:
			res.Written++
		case d == writeguard.AlreadyWritten:
			res.AlreadyWritten++
		case d == writeguard.DeadLettered:
			res.DeadLettered++
			for _, k := range o.keywords {
				res.Keywords[k]++
			}
			for _, k := range o.kwPaths {
				res.KeywordPaths[k]++
			}
		case d == writeguard.ConflictSkipped:
			res.Conflicts++
		case d == writeguard.Failed:
			res.Failed++
		case d == writeguard.Exhausted:
			res.Exhausted++
		case d == writeguard.OutcomeUnknown:
			res.Unknown++
		case d == writeguard.NotAttempted:
			res.NotAttempted++
		default:
			res.Other[string(d)]++
		}
	}
	if len(res.Other) == 0 {
		res.Other = nil
	}
}

// readTargetIDs reads the target's _ids once (FerretDB cannot use an
// index for a per-id lookup; one scan is cheaper than 40,000 of them) and
// counts each.
func readTargetIDs(ctx context.Context, target *mongo.Collection, res *Result) (map[string]int, error) {
	inTarget := map[string]int{}
	cur, err := target.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(20000))
	if err != nil {
		return nil, fmt.Errorf("read the target's ids: %w", err)
	}
	for cur.Next(ctx) {
		res.Target.Documents++
		id, _ := cur.Current.Lookup("_id").StringValueOK()
		inTarget[id]++
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read the target's ids: %w", err)
	}
	_ = cur.Close(ctx)
	res.Target.DistinctIDs = len(inTarget)
	return inTarget, nil
}

// readDLQ reads the dead-letter collection's document ids for this
// namespace, and its statistics.
func readDLQ(ctx context.Context, coll *mongo.Collection, res *Result) (map[string]bool, error) {
	inDLQ := map[string]bool{}
	dcur, err := coll.Find(ctx, bson.D{{Key: "namespace", Value: res.Namespace}},
		options.Find().SetProjection(bson.D{{Key: "document_id", Value: 1}}).SetBatchSize(20000))
	if err != nil {
		return nil, fmt.Errorf("read the dead-letter collection: %w", err)
	}
	for dcur.Next(ctx) {
		id, _ := dcur.Current.Lookup("document_id").StringValueOK()
		inDLQ[id] = true
	}
	if err := dcur.Err(); err != nil {
		return nil, fmt.Errorf("read the dead-letter collection: %w", err)
	}
	_ = dcur.Close(ctx)

	sum, err := dlq.Stats(ctx, coll, dlq.Filter{Namespaces: []string{res.Namespace}})
	if err != nil {
		return nil, fmt.Errorf("dead-letter stats: %w", err)
	}
	res.DLQ.Summary = sum
	res.DLQ.Envelopes, res.DLQ.Captures, res.DLQ.Pending = sum.Envelopes, sum.Attempts, sum.Pending
	res.DLQ.ByKeyword, res.DLQ.ByPath, res.DLQ.ByCode = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, g := range sum.ByKeyword {
		res.DLQ.ByKeyword[g.Key] = g.Envelopes
	}
	for _, g := range sum.ByPath {
		res.DLQ.ByPath[g.Key] = g.Envelopes
	}
	for _, g := range sum.ByCode {
		res.DLQ.ByCode[fmt.Sprint(g.Code)] = g.Envelopes
	}
	return inDLQ, nil
}

// placeRows checks that every row is where its disposition says, and
// returns the _ids expected in the target and up to 5 misplaced rows.
func placeRows(rows []Row, out []rowOutcome, inTarget map[string]int, inDLQ map[string]bool, res *Result) (map[string]bool, []string) {
	expected := map[string]bool{}
	accounted := 0
	var misplaced []string
	for i, o := range out {
		id := rows[i].ID
		ok := true
		switch d := o.disp; {
		case d.Stored(), d == writeguard.ConflictSkipped:
			expected[id] = true
			ok = inTarget[id] > 0
		case d == writeguard.DeadLettered:
			ok = inDLQ[id]
		default:
			// failed, exhausted, unknown, not_attempted, ...: reported as
			// not written, with the document in the Report.
		}
		if ok {
			accounted++
		} else if len(misplaced) < 5 {
			misplaced = append(misplaced, fmt.Sprintf("line %d (%s, _id %s)", rows[i].Line, o.disp, id))
		}
	}
	res.Lost = res.Input - accounted
	res.Target.Expected = len(expected)
	return expected, misplaced
}

// checkTarget counts the target's duplicates, and the documents no row
// claims, no row reported or that are missing.
func checkTarget(rows []Row, inTarget map[string]int, expected map[string]bool, res *Result) {
	inputIDs := make(map[string]bool, len(rows))
	for _, r := range rows {
		inputIDs[r.ID] = true
	}
	for id, n := range inTarget {
		if n > 1 {
			res.Duplicates += n - 1
		}
		switch {
		case !inputIDs[id]:
			res.Target.Unexpected++
		case !expected[id]:
			res.Target.Unreported++
		}
	}
	for id := range expected {
		if inTarget[id] == 0 {
			res.Target.Missing++
		}
	}
	// A document in the target that no row claims is one too many.
	res.Duplicates += res.Target.Unexpected
}

// checkTotals records the problems the counts show, and sets OK.
func checkTotals(misplaced []string, res *Result) {
	total := res.Written + res.AlreadyWritten + res.DeadLettered + res.Conflicts + res.Failed + res.Exhausted + res.Unknown + res.NotAttempted
	for _, n := range res.Other {
		total += n
	}
	if total != res.Input {
		res.Problems = append(res.Problems, fmt.Sprintf("dispositions add up to %d, not %d rows in", total, res.Input))
	}
	if res.Lost != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d rows lost (not where their disposition says), e.g. %v", res.Lost, misplaced))
	}
	if res.Duplicates != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d documents in the target beyond one per row's _id", res.Duplicates))
	}
	sort.Strings(res.Problems)
	res.OK = len(res.Problems) == 0
}

// truthProblems checks that the dispositions are true: a row reported not
// stored whose _id is in the target (and that no other row stored) must be
// flagged MaybeWritten; a row reported conflict_skipped must share its _id
// with another row; and, where the demo injected the faults (all of them
// transient: stepdowns, lost replies, write conflicts, shard failures), no
// row may end failed, exhausted or unknown.
func truthProblems(rows []Row, out []rowOutcome, inTarget map[string]int, expected map[string]bool, res *Result) []string {
	var problems, untrue []string
	for i, o := range out {
		id := rows[i].ID
		if !o.disp.Stored() && o.disp != writeguard.ConflictSkipped && !expected[id] && inTarget[id] > 0 && !o.maybe {
			untrue = append(untrue, fmt.Sprintf("line %d (%s, _id %s)", rows[i].Line, o.disp, id))
		}
	}
	if len(untrue) > 0 {
		problems = append(problems, fmt.Sprintf("%d rows reported not written are stored, e.g. %v", len(untrue), untrue[:min(5, len(untrue))]))
	}
	// A conflict needs another writer of the _id: a row no other row
	// shares an _id with that ends conflict_skipped met its own write.
	rowsOf := map[string]int{}
	for _, r := range rows {
		rowsOf[r.ID]++
	}
	var own []string
	for i, o := range out {
		if o.disp == writeguard.ConflictSkipped && rowsOf[rows[i].ID] == 1 {
			own = append(own, fmt.Sprintf("line %d (_id %s, attempts %d, last code %d)", rows[i].Line, rows[i].ID, o.attempts, o.code))
		}
	}
	if len(own) > 0 {
		problems = append(problems, fmt.Sprintf("%d rows reported conflict_skipped share their _id with no other row: they met their own write, e.g. %v", len(own), own[:min(5, len(own))]))
	}
	if n := res.Failed + res.Exhausted + res.Unknown; res.FaultsActive && n > 0 {
		problems = append(problems, fmt.Sprintf("%d rows ended failed (%d), exhausted (%d) or unknown (%d) although every injected fault is transient",
			n, res.Failed, res.Exhausted, res.Unknown))
	}
	return problems
}
