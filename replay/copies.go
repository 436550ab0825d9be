package replay

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
)

// holdPartialCopies is the hold reason of an update, replace or delete
// envelope of several copies (envelope.Envelope.Multiplicity) of which
// some were applied and some not: sending them all again would apply the
// applied ones twice.
const holdPartialCopies = "copies_partly_applied"

// withCopies returns group with, after each entry of an envelope of
// Multiplicity n > 1, its n-1 other copies (entries of their own, sent
// in the same write): an insert's copy k is the original with _id
// envelope.CopyID(_id, k), the same on every replay, so a copy written
// by an earlier replay is recognised by its _id; a model's copies are
// the model again. of maps each copy to its envelope's entry. An
// envelope's number of copies is trusted only once prepare has checked it
// (envelope.Envelope.MultiplicityProblem: at most
// envelope.MaxMultiplicity, and 1 for an insert whose _id the caller
// gave); one that fails the check is refused, never sent.
func withCopies(group []*entry) (all []*entry, of map[*entry]*entry) {
	for _, e := range group {
		all = append(all, e)
		for k := 1; k < e.env.Copies(); k++ {
			if of == nil {
				of = map[*entry]*entry{}
			}
			c := copyEntry(e, k)
			of[c] = e
			all = append(all, c)
		}
	}
	return all, of
}

// copyEntry returns the entry of copy k of e's envelope.
func copyEntry(e *entry, k int) *entry {
	c := *e
	if !e.insert {
		return &c
	}
	id := envelope.CopyID(e.docID, k)
	st := *e.env
	st.Original = envelope.WithID(e.env.Original, id)
	c.env, c.docID = &st, id
	c.model = mongo.NewInsertOneModel().SetDocument(st.Original)
	return &c
}

// foldCopies gives each envelope's entry the outcome of all its copies
// (of: from withCopies): replayed when every copy was written (or was
// already there), else the outcome of the first copy that was not;
// an update, replace or delete some of whose copies were applied and
// others not is held (holdPartialCopies). An insert needs no hold: a
// replay sends its copies again, and those already written are
// duplicates of their own _id. Each envelope's entry gets the number of
// its writes applied (entry.written).
func foldCopies(all []*entry, of map[*entry]*entry) {
	type tally struct {
		n, applied, written int
		failed              *entry
	}
	t := map[*entry]*tally{}
	for _, c := range all {
		p := c
		if q, ok := of[c]; ok {
			p = q
		}
		tl := t[p]
		if tl == nil {
			tl = &tally{}
			t[p] = tl
		}
		tl.n++
		tl.written += c.written
		if c.out == outReplayed || c.out == outReplayedDup {
			tl.applied++
		} else if tl.failed == nil {
			tl.failed = c
		}
	}
	for p, tl := range t {
		p.written = tl.written
		if tl.n <= 1 || tl.failed == nil {
			continue
		}
		f := tl.failed
		p.out, p.code, p.codeName, p.reason, p.docErr, p.ambiguous = f.out, f.code, f.codeName, f.reason, f.docErr, f.ambiguous
		if tl.applied == 0 {
			continue
		}
		p.reason = fmt.Sprintf("%d of %d copies written; %s", tl.applied, tl.n, p.reason)
		if !p.insert {
			p.out, p.reason = outHeld, holdPartialCopies+": "+p.reason
		}
	}
}
