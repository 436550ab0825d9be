package replay

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
)

// outcome of one envelope in a batch.
type outcome uint8

const (
	outPending outcome = iota
	outReplayed
	outReplayedDup
	outInvalid
	outInvalidByTarget
	outDuplicate // to resolve by reading the target
	outConflict
	outFailed
	outSkipped
	outRefused
	outHeld
	// outLost: an update, replace or delete whose claim was lost before
	// its send (see fence): not sent, not marked, left to its new owner.
	outLost
)

// The hold reasons (envelope.FieldReplayHold) of an update, replace or
// delete whose replay may or may not have been applied: in flight when
// its runner died, or failed in a way that does not say (a lost reply, a
// timeout after sending: policy.Failure.Ambiguous).
const (
	holdInFlight = "in_flight_when_runner_died"
	holdUnknown  = "write_outcome_unknown"
)

var outcomeNames = [...]string{"pending", "replayed", "replayed_by_duplicate", "still_invalid", "dead_lettered_by_target",
	"duplicate", "conflict", "failed", "skipped", "refused", "held", "lost"}

func (o outcome) String() string { return outcomeNames[o] }

// entry is one envelope of a batch on its way.
type entry struct {
	env    *stored
	call   string // the envelope's call_options bytes: entries are sent grouped by them
	model  mongo.WriteModel
	insert bool
	docID  bson.RawValue
	out    outcome
	code   int32
	reason string
	// codeName is the server's codeName of code, if any.
	codeName string
	// docErr is set when the failure is the server's answer for this
	// document or model (a write error), not for the whole command.
	docErr bool
	// ambiguous is set when the write may have been applied although it
	// failed (policy.Failure.Ambiguous: a lost reply, a timeout or an
	// interruption after sending, a write concern error).
	ambiguous bool
	// written is the number of writes of the envelope this send applied
	// (its copies included; one found there already, by its _id, not
	// counted): Counts.Written.
	written int
	// failed is set when the outcome is a failed replay of the envelope
	// (counted in replay_failures); quarantine when that count reaches
	// the limit.
	failed, quarantine bool
}

// prepare turns a batch into entries and returns those to send (the
// others are skipped, refused or held). inFlight maps envelope keys to
// the time of an earlier send token (claimed.inFlight).
func (r *runner) prepare(ctx context.Context, envs []stored, inFlight map[string]time.Time) (entries, send []*entry) {
	entries = make([]*entry, len(envs))
	for i := range envs {
		e := &entry{env: &envs[i], call: string(envs[i].CallOptions)}
		entries[i] = e
		if envs[i].decodeErr != "" {
			e.out, e.reason = outSkipped, envs[i].decodeErr
			continue
		}
		// A write sent by a runner that died before marking it: applied
		// or not, nobody knows, unless a try was recorded since (the
		// runner died after marking, before releasing its lease). Held
		// whatever this run would do with it (skip it, refuse it), as
		// the in-flight lease, the only record of it, goes once the
		// envelope is marked. An insert (an original with an _id) needs
		// no hold: its _id makes a second write a duplicate key.
		if at, ok := inFlight[leaseKey(envs[i].ID)]; ok && envs[i].ReplayTriedAt.Before(at) {
			if _, err := envs[i].Original.LookupErr("_id"); err != nil {
				e.out, e.reason = outHeld, holdInFlight
				continue
			}
		}
		env := &envs[i].Envelope
		if len(env.Withheld) > 0 && r.cfg.withheld != nil {
			supplied, reason := supplyWithheld(ctx, r.cfg.withheld, env)
			if reason != "" {
				e.out, e.reason = outSkipped, reason
				continue
			}
			env = supplied
			envs[i].Original = supplied.Original // the duplicate-key read-back compares with it
		}
		m, insert, reason := buildModel(env, r.cfg.redacted)
		if reason != "" {
			e.out, e.reason = outSkipped, reason
			continue
		}
		if why := r.guard(envs[i].Namespace, m); why != "" {
			e.out, e.reason = outRefused, why
			continue
		}
		if why := env.MultiplicityProblem(); why != "" {
			e.out, e.reason = outRefused, why // never amplified: see withCopies
			continue
		}
		e.model, e.insert = m, insert
		if insert {
			e.docID, _ = envs[i].Original.LookupErr("_id")
		}
		send = append(send, e)
	}
	return entries, send
}

// sendAll sends the entries of send, grouped by their call options, and
// returns those it sent. The updates, replaces and deletes, which are not
// idempotent by _id as inserts are, are fenced first (see fence): their
// send tokens say "in flight" while they are sent (kept in st), and those
// whose claim was lost are not sent (outLost). It returns the first error
// of a whole write, and the error of fencing (nothing is sent then).
func (r *runner) sendAll(ctx context.Context, cl claimed, st *batchState, send []*entry) (sent []*entry, writeErr, err error) {
	if len(send) == 0 {
		return nil, nil, nil
	}
	if err := r.fence(ctx, cl, st, send); err != nil {
		return nil, nil, err
	}
	for _, e := range send {
		if e.out != outLost {
			sent = append(sent, e)
		}
	}
	for _, group := range byCallOptions(sent) {
		r.send(ctx, group, &writeErr)
	}
	return sent, writeErr, nil
}

// holdAmbiguous holds the updates, replaces and deletes of send that
// failed and may have been applied: the next run does not run them again,
// as after a death. It reports whether every write failed, none with an
// error of its own.
func holdAmbiguous(send []*entry) (targetDown bool) {
	failed, docErrs := 0, 0
	for _, e := range send {
		if e.out != outFailed {
			continue
		}
		failed++
		if e.docErr {
			docErrs++
		}
		if !e.insert && e.ambiguous {
			e.out = outHeld
			e.reason = holdUnknown
		}
	}
	return len(send) > 0 && failed == len(send) && docErrs == 0
}

// send writes one group of entries of equal call options with one
// unordered BulkWrite (each envelope is one write of its own: see
// envelope.CallOptions; an envelope of Multiplicity n is n writes, see
// withCopies) and classifies each entry's outcome; *writeErr keeps the
// last whole error.
func (r *runner) send(ctx context.Context, group []*entry, writeErr *error) {
	group, copies := withCopies(group) // an envelope of several identical inputs: all of them
	if copies != nil {
		defer foldCopies(group, copies)
	}
	models := make([]mongo.WriteModel, len(group))
	for i, e := range group {
		models[i] = e.model
	}
	opts, _, err := envelope.ParseCallOptions(bson.Raw(group[0].call))
	if err != nil {
		for _, e := range group {
			e.out, e.reason = outSkipped, "call options not replayable: "+err.Error()
		}
		return
	}
	if opts == nil {
		opts = options.BulkWrite()
	}
	_, err = r.target.BulkWrite(ctx, models, opts.SetOrdered(false))
	if err != nil {
		*writeErr = err
	}
	classify(group, err)
	resolveDuplicates(ctx, r.target, group)
	for _, e := range group {
		if e.out == outReplayed {
			e.written = 1 // foldCopies adds an envelope's copies
		}
	}
}

// byCallOptions splits entries into groups of equal call options, in
// order of first appearance.
func byCallOptions(entries []*entry) [][]*entry {
	var groups [][]*entry
	at := map[string]int{}
	for _, e := range entries {
		i, ok := at[e.call]
		if !ok {
			i = len(groups)
			at[e.call] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], e)
	}
	return groups
}

// supplyWithheld asks the caller's function for the complete original of
// an envelope with withheld fields and checks that it holds them all. It
// returns a copy of env carrying it, or why the envelope is skipped.
func supplyWithheld(ctx context.Context, f WithheldFunc, env *envelope.Envelope) (*envelope.Envelope, string) {
	doc, err := f(ctx, *env)
	if err != nil {
		return nil, "withheld fields not supplied: " + err.Error()
	}
	if err := doc.Validate(); err != nil {
		return nil, "supplied original is not valid BSON: " + err.Error()
	}
	if err := envelope.MissingWithheld(env, doc); err != nil {
		return nil, err.Error()
	}
	out := *env
	out.Original, out.Withheld = doc, nil
	return &out, ""
}
