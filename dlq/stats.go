package dlq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
)

// Group is one line of a Summary breakdown: the envelopes sharing Key, and
// the sum of their attempts (rejections: each capture, and each replay
// that was rejected again).
type Group struct {
	// Key is the value grouped by: a keyword, a path, a namespace, a
	// status.
	Key string
	// Envelopes is the number of envelopes with Key.
	Envelopes int64
	// Attempts is the sum of their attempts (rejections: captures, and
	// replays rejected again).
	Attempts int64
}

// CodeGroup is Group for error codes: Code, the first CodeName seen with
// it, envelopes and attempts.
type CodeGroup struct {
	// Code is the server's error code (121 DocumentValidationFailure for
	// schema failures).
	Code int32
	// CodeName is the first code_name seen with Code ("" when none was).
	CodeName string
	// Envelopes is the number of envelopes with Code.
	Envelopes int64
	// Attempts is the sum of their attempts (rejections: captures, and
	// replays rejected again).
	Attempts int64
}

// Summary is the result of Stats: how many envelopes a Filter selects,
// and how many of them per status, failing keyword, failing path, code and
// namespace. Each breakdown is sorted by Envelopes, largest first, then by
// key. An envelope with several failing keywords (paths) counts once under
// each, so the keyword (path) groups can add up to more than Envelopes.
type Summary struct {
	// Envelopes is the number of envelopes selected; Attempts the sum of
	// their attempts.
	Envelopes int64
	Attempts  int64

	// ByStatus groups them by status (pending, replayed, discarded,
	// quarantined).
	ByStatus []Group
	// ByKeyword groups them by failing keyword (failing_keywords: the
	// leaf JSON Schema keywords and query operators of errInfo).
	ByKeyword []Group
	// ByPath groups them by failing path (failing_paths, dotted).
	ByPath []Group
	// ByCode groups them by server error code.
	ByCode []CodeGroup
	// ByNamespace groups them by "<database>.<collection>" of the write.
	ByNamespace []Group

	// Pending is the number of selected envelopes with status pending.
	Pending int64
	// Quarantined is the number of selected envelopes with status
	// quarantined (replay failed on them too often: see
	// envelope.StatusQuarantined).
	Quarantined int64
	// Held is the number of selected pending envelopes that replay holds
	// for an operator (envelope.FieldReplayHold set: an update, replace or delete
	// whose replay was in flight when its runner died).
	Held int64
	// OldestPending is the first_seen of the oldest selected pending
	// envelope, and OldestPendingAge its age at the time of the call;
	// both zero when no pending envelope is selected.
	OldestPending    time.Time
	OldestPendingAge time.Duration

	// InPieces is the number of selected envelopes whose original was too
	// large to be stored with them and is kept whole in pieces
	// (envelope.Envelope.OriginalPieces); Pieces summarises the side
	// collection of pieces, whatever the filter: its orphans and the
	// originals that lack pieces (see PiecesCollectionSuffix).
	InPieces int64
	Pieces   PieceSummary

	// Undecodable is the number of selected envelopes whose summarised
	// fields cannot be decoded (a field of the wrong BSON type: see
	// envelope.DecodeError); they are counted here and nowhere else (not in
	// Envelopes). UndecodableErrors names the first MaxDecodeErrors of
	// them.
	Undecodable       int64
	UndecodableErrors []*envelope.DecodeError
	// DiscardedUndecodable is the number of selected envelopes that cannot
	// be decoded and whose status reads "discarded" (an operator set them
	// aside, e.g. with writeguard dlq discard --undecodable): counted here
	// and not in Undecodable, so that a discarded envelope stops asking
	// for attention.
	DiscardedUndecodable int64
}

// addUndecodable counts an envelope that cannot be decoded: in
// DiscardedUndecodable when its status reads "discarded", else in
// Undecodable, keeping a copy of the first MaxDecodeErrors errors (de.ID
// refers to the cursor's buffer).
func (st *Summary) addUndecodable(doc bson.Raw, de *envelope.DecodeError) {
	if status, ok := doc.Lookup("status").StringValueOK(); ok && status == envelope.StatusDiscarded {
		st.DiscardedUndecodable++
		return
	}
	st.Undecodable++
	if len(st.UndecodableErrors) < MaxDecodeErrors {
		de.ID = bson.RawValue{Type: de.ID.Type, Value: append([]byte(nil), de.ID.Value...)}
		st.UndecodableErrors = append(st.UndecodableErrors, de)
	}
}

// MaxDecodeErrors is how many DecodeErrors Stats keeps in
// Summary.UndecodableErrors.
const MaxDecodeErrors = 100

// Stats summarises the envelopes of dlq that f selects (every status when
// f lists none). It reads the few fields it needs with one find (a cursor,
// in batches) and counts in Go: one round trip per 16 MiB of projected
// rows, memory proportional to the number of distinct keys, about 1 s per
// 100,000 envelopes on a local MongoDB. It is done client-side rather than
// with $group because FerretDB, a target of the embedded test server,
// supports only $sum/$count accumulators and computes only the first
// accumulator of a $group, so one pipeline could not give every figure;
// the same code then gives the same answers on every server. For DLQs of
// many millions of envelopes, narrow f.
//
// An envelope whose summarised fields cannot be decoded (see
// envelope.DecodeError)
// is counted in Summary.Undecodable (Summary.DiscardedUndecodable when its
// status reads "discarded") and does not stop the count.
//
// Summary.Pieces costs one more find on the side collection of pieces
// (their fields but the data) and, when it holds any, one on the DLQ.
//
// It returns an error naming a nil dlq, f's error (wrapping ErrBadFilter), or the driver's.
func Stats(ctx context.Context, dlq *mongo.Collection, f Filter) (Summary, error) {
	if dlq == nil {
		return Summary{}, errors.New("dlq: Stats: the dead-letter collection is nil")
	}
	now := time.Now()
	q, err := f.Query(now)
	if err != nil {
		return Summary{}, err
	}
	var st Summary
	// The original is not read for the counts: the envelopes whose
	// original is missing or not a document are found with a query of
	// their own (they are few) and left out of the counts.
	if err := badOriginals(ctx, dlq, q, &st); err != nil {
		return Summary{}, err
	}
	t := newTally(&st)
	if err := countEnvelopes(ctx, dlq, q, t); err != nil {
		return Summary{}, err
	}
	t.finish(now)
	if st.Pieces, _, err = summarisePieces(ctx, dlq, now, OrphanGrace); err != nil {
		return Summary{}, err
	}
	return st, nil
}

// countEnvelopes hands t every envelope of q that has an original, read
// with one find of every field but the large ones (the original, errInfo,
// the call options, in either form), so that an envelope that list or
// show finds undecodable is undecodable here too.
func countEnvelopes(ctx context.Context, dlq *mongo.Collection, q bson.D, t *tally) error {
	proj := bson.D{
		{Key: "original", Value: 0}, {Key: "original" + rawFormSuffix, Value: 0},
		{Key: "err_info", Value: 0}, {Key: "err_info" + rawFormSuffix, Value: 0},
		{Key: "call_options", Value: 0}, {Key: "call_options" + rawFormSuffix, Value: 0},
	}
	q = bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "$or", Value: hasOriginal()}}}}}
	cur, err := dlq.Find(ctx, q, options.Find().SetProjection(proj).SetBatchSize(10000))
	if err != nil {
		return fmt.Errorf("dlq: stats: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if err := t.add(cur.Current); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("dlq: stats: %w", err)
	}
	return nil
}

// tally counts envelopes into a Summary, one at a time (add), then sorts
// its breakdowns (finish).
type tally struct {
	st                                *Summary
	byStatus, byKeyword, byPath, byNS groupCounter
	byCode                            map[int32]*CodeGroup
}

func newTally(st *Summary) *tally {
	return &tally{st: st, byStatus: groupCounter{}, byKeyword: groupCounter{}, byPath: groupCounter{}, byNS: groupCounter{},
		byCode: map[int32]*CodeGroup{}}
}

// add counts one stored envelope (a projection without its original);
// one that cannot be decoded is counted apart (Summary.addUndecodable).
// It returns an error other than an envelope.DecodeError.
func (t *tally) add(raw bson.Raw) error {
	e, err := envelope.DecodeProjected(raw)
	if err != nil {
		var de *envelope.DecodeError
		if !errors.As(err, &de) {
			return fmt.Errorf("dlq: stats: %w", err)
		}
		t.st.addUndecodable(raw, de)
		return nil
	}
	attempts := max(int64(e.Attempts), 1)
	if e.OriginalPieces != nil {
		t.st.InPieces++
	}
	t.st.Envelopes++
	t.st.Attempts += attempts
	t.byStatus.add(e.Status, attempts)
	t.byNS.add(e.Namespace, attempts)
	for _, k := range dedupe(e.FailingKeywords) {
		t.byKeyword.add(k, attempts)
	}
	for _, p := range dedupe(e.FailingPaths) {
		t.byPath.add(p, attempts)
	}
	cg := t.byCode[e.Code]
	if cg == nil {
		cg = &CodeGroup{Code: e.Code, CodeName: e.CodeName}
		t.byCode[e.Code] = cg
	}
	if cg.CodeName == "" {
		cg.CodeName = e.CodeName
	}
	cg.Envelopes++
	cg.Attempts += attempts
	hold, _ := raw.Lookup(envelope.FieldReplayHold).StringValueOK()
	t.addState(e.Status, hold, e.FirstSeen)
	return nil
}

// addState counts an envelope in Quarantined, Pending and Held, and
// keeps the oldest pending first_seen.
func (t *tally) addState(status, hold string, firstSeen time.Time) {
	st := t.st
	if status == envelope.StatusQuarantined {
		st.Quarantined++
	}
	if status != envelope.StatusPending {
		return
	}
	st.Pending++
	if hold != "" {
		st.Held++
	}
	if !firstSeen.IsZero() && (st.OldestPending.IsZero() || firstSeen.Before(st.OldestPending)) {
		st.OldestPending = firstSeen
	}
}

// finish sets the oldest pending envelope's age at now and sorts every
// breakdown: by Envelopes, largest first, then by key.
func (t *tally) finish(now time.Time) {
	st := t.st
	if !st.OldestPending.IsZero() {
		st.OldestPending = st.OldestPending.UTC()
		st.OldestPendingAge = now.Sub(st.OldestPending)
	}
	st.ByStatus = t.byStatus.sorted()
	st.ByKeyword = t.byKeyword.sorted()
	st.ByPath = t.byPath.sorted()
	st.ByNamespace = t.byNS.sorted()
	st.ByCode = make([]CodeGroup, 0, len(t.byCode))
	for _, g := range t.byCode {
		st.ByCode = append(st.ByCode, *g)
	}
	sort.Slice(st.ByCode, func(i, j int) bool {
		a, b := st.ByCode[i], st.ByCode[j]
		if a.Envelopes != b.Envelopes {
			return a.Envelopes > b.Envelopes
		}
		return a.Code < b.Code
	})
}

// rawFormSuffix names the field that holds a document field's exact bytes
// when the server would not take it as a sub-document (original_raw; see
// envelope.InsertFields).
const rawFormSuffix = "_raw"

// hasOriginal is the $or that selects envelopes with an original: a
// document, or its exact bytes (original_raw, binary).
func hasOriginal() bson.A {
	return bson.A{
		bson.D{{Key: "original", Value: bson.D{{Key: "$type", Value: "object"}}}},
		bson.D{{Key: "original" + rawFormSuffix, Value: bson.D{{Key: "$type", Value: "binData"}}}},
	}
}

// badOriginals adds to st the envelopes of q whose original is missing or
// not a document. They are read whole but for errInfo, as dlq list reads
// them, so that both name the same first problem of a hand-edited
// envelope.
func badOriginals(ctx context.Context, dlq *mongo.Collection, q bson.D, st *Summary) error {
	bad := bson.D{{Key: "$and", Value: bson.A{q, bson.D{{Key: "$nor", Value: hasOriginal()}}}}}
	cur, err := dlq.Find(ctx, bad, options.Find().SetProjection(bson.D{{Key: "err_info", Value: 0}, {Key: "err_info" + rawFormSuffix, Value: 0}}))
	if err != nil {
		return fmt.Errorf("dlq: stats: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		_, err := envelope.Decode(cur.Current)
		var de *envelope.DecodeError
		if !errors.As(err, &de) {
			// original is absent and original_raw is not binary.
			id, _ := cur.Current.LookupErr("_id")
			v, _ := cur.Current.LookupErr("original" + rawFormSuffix)
			de = &envelope.DecodeError{ID: id, Field: "original" + rawFormSuffix, Type: v.Type, Want: "binary (the original's BSON bytes)", Err: envelope.ErrWrongType}
		}
		st.addUndecodable(cur.Current, de)
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("dlq: stats: %w", err)
	}
	return nil
}

type groupCounter map[string]*Group

func (c groupCounter) add(key string, attempts int64) {
	g := c[key]
	if g == nil {
		g = &Group{Key: key}
		c[key] = g
	}
	g.Envelopes++
	g.Attempts += attempts
}

func (c groupCounter) sorted() []Group {
	out := make([]Group, 0, len(c))
	for _, g := range c {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Envelopes != out[j].Envelopes {
			return out[i].Envelopes > out[j].Envelopes
		}
		return out[i].Key < out[j].Key
	})
	return out
}

func dedupe(s []string) []string {
	if len(s) < 2 {
		return s
	}
	seen := make(map[string]bool, len(s))
	out := s[:0:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// String formats the code as "121 DocumentValidationFailure" (or just
// the number when the name is unknown).
func (g CodeGroup) String() string {
	if g.CodeName == "" {
		return strconv.Itoa(int(g.Code))
	}
	return strconv.Itoa(int(g.Code)) + " " + g.CodeName
}
