package mocks

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// reads is how the Fake answers reads: a lagging secondary behind its
// default read preference, scripted read failures, and a count of reads
// by where they went.
type reads struct {
	lag      int     // reads not from the primary miss the last lag documents stored
	failures []error // the next reads fail with these, one each
	primary  int     // reads made through ReadPrimary
	other    int     // reads made through Find
}

// Lag makes the Fake's own Find answer as a secondary n writes behind
// would (a collection handle whose read preference is secondaryPreferred):
// it does not see the last n documents stored. Reads through ReadPrimary
// see everything. It returns f.
func (f *Fake) Lag(n int) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads.lag = n
	return f
}

// FailReads makes the next len(errs) reads (Find or ReadPrimary's Find)
// fail with errs, one each, in order. It returns f.
func (f *Fake) FailReads(errs ...error) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads.failures = append(f.reads.failures, errs...)
	return f
}

// Reads returns how many reads went to the primary (through ReadPrimary)
// and how many followed the Fake's own read preference (Find).
func (f *Fake) Reads() (primary, other int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads.primary, f.reads.other
}

// PrimaryFinder is the view ReadPrimary returns: Find reads what the
// primary holds, with read concern local.
type PrimaryFinder struct{ f *Fake }

// ReadPrimary returns a view of f whose Find reads the primary (read
// preference primary, read concern local), whatever f's own read
// preference: writeguard reads through it every read that decides a
// disposition (writeguard.PrimaryReader).
func (f *Fake) ReadPrimary() interface {
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
} {
	return PrimaryFinder{f}
}

// Find reads what the primary holds.
func (p PrimaryFinder) Find(ctx context.Context, filter any, _ ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	return p.f.find(filter, true)
}

func (f *Fake) find(filter any, primary bool) (*mongo.Cursor, error) {
	fr, err := bson.Marshal(filter)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if primary {
		f.reads.primary++
	} else {
		f.reads.other++
	}
	if len(f.reads.failures) > 0 {
		err := f.reads.failures[0]
		f.reads.failures = f.reads.failures[1:]
		f.mu.Unlock()
		return nil, err
	}
	visible := f.docs
	if !primary {
		visible = visible[:max(0, len(visible)-f.reads.lag)]
	}
	var out []any
	for _, d := range visible {
		if matches(d, fr) {
			out = append(out, d)
		}
	}
	f.mu.Unlock()
	return mongo.NewCursorFromDocuments(out, nil, nil)
}
