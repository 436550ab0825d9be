package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/internal/readback"
	"github.com/writeguard/writeguard/policy"
)

// Lease is one slot of an envelope's claim sequence, as stored in the
// lease collection: a claim by a runner, or the send token the holder of
// a claim takes just before it sends the envelope's update, replace or
// delete (InFlight). Its _id is "<key>.<n>": key identifies the envelope
// (the hex of its _id's BSON type and bytes) and n numbers the slots of
// that envelope still on record. The unique _id is what makes a slot
// atomic: two runners that both insert slot n (two claims of an expired
// claim n−1, or a runner's send token and another's claim taking over
// claim n−1) have the server store one of them, and the other gets a
// duplicate key (11000). That is the fence: a claim taken over can no
// longer get its send token. A conditional update of the envelope would
// not do: servers that run an update as an unlocked read-modify-write
// (FerretDB v1) let two runners both "win" it.
type Lease struct {
	// ID is "<Key>.<N>".
	ID string `bson:"_id"`
	// Key is the hex of the envelope _id's BSON type byte and value bytes.
	Key string `bson:"key"`
	// N numbers the slots of the envelope, from 0.
	N int `bson:"n"`
	// EnvelopeID is the envelope's _id in the dead-letter collection.
	EnvelopeID bson.RawValue `bson:"envelope_id"`
	// Owner is the runner holding the lease (WithOwner).
	Owner string `bson:"owner"`
	// Run is the run the runner belongs to (WithRunID).
	Run string `bson:"run"`
	// ClaimedAt is when the slot was taken, by the server's clock.
	ClaimedAt time.Time `bson:"claimed_at"`
	// Until is when the lease expires (the server's clock): from then on
	// another runner may take the next slot. Its holder moves it forward
	// while it works (every third of the lease).
	Until time.Time `bson:"until"`
	// InFlight marks a send token: slot N+1 of a claim N, inserted by the
	// claim's holder just before it sends the envelope's update, replace
	// or delete to the target. A send token still on record with no try
	// of the envelope recorded since its ClaimedAt is a write whose
	// result nobody saw: the runner died (or lost the DLQ) between
	// sending it and marking the envelope. The next runner holds the
	// envelope for an operator instead of running it again
	// (envelope.FieldReplayHold).
	InFlight bool `bson:"in_flight,omitempty"`
}

// leaseKey returns Lease.Key of an envelope _id.
func leaseKey(id bson.RawValue) string { return hex.EncodeToString([]byte(readback.Key(id))) }

// randomID returns 16 random hex digits.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claimed is what a runner got from one claim: the envelopes it holds (as
// read after the claim) and their lease ids.
type claimed struct {
	envs   []stored
	leases []string
	// leaseOf maps an envelope's key to the id of this runner's claim;
	// claimOf to the claim itself.
	leaseOf map[string]string
	claimOf map[string]Lease
	// stale are the ids of the earlier slots of the envelopes, deleted
	// once the envelopes are marked (those taken before the claim only).
	stale []string
	// inFlight maps the key of an envelope with an earlier send token
	// (Lease.InFlight) to the latest one's ClaimedAt; known holds the ids
	// of those send tokens, as seen at the claim.
	inFlight map[string]time.Time
	known    map[string]bool
	// at is the time of the claim (the server's).
	at time.Time
	// held counts the candidates another runner held.
	held int
}

// leaseState is the latest slot on record of one envelope, and the
// latest of its send tokens (zero when none) with the ids of all of them.
type leaseState struct {
	n        int
	until    time.Time
	inFlight time.Time
	tokens   []string
}

// claim takes a lease on each candidate no other runner holds, then reads
// back the envelopes it got that the query still selects (another runner
// may have replayed one between the candidates' read and the claim) and
// releases the others. Times are the server's (serverClock).
func (r *runner) claim(ctx context.Context, q bson.D, ids []bson.RawValue) (claimed, error) {
	var cl claimed
	if err := r.cfg.clock.sync(ctx); err != nil {
		return cl, err
	}
	tried, states, held, err := r.nextSlots(ctx, ids)
	cl.held = held
	if err != nil {
		return cl, err
	}
	docs := make([]any, len(tried))
	for i := range tried {
		docs[i] = tried[i]
	}
	won, lost, err := r.insertLeases(ctx, docs, tried)
	cl.held += lost
	if err != nil || len(won) == 0 {
		return cl, err
	}
	cl.at = won[0].ClaimedAt
	cl.inFlight, cl.known, cl.claimOf = map[string]time.Time{}, map[string]bool{}, make(map[string]Lease, len(won))
	for _, l := range won {
		cl.claimOf[l.Key] = l
		for n := range l.N {
			cl.stale = append(cl.stale, l.Key+"."+strconv.Itoa(n))
		}
		st := states[l.Key]
		if !st.inFlight.IsZero() {
			cl.inFlight[l.Key] = st.inFlight
		}
		for _, id := range st.tokens {
			cl.known[id] = true
		}
	}
	return r.readClaimed(ctx, q, won, cl)
}

// nextSlots returns the claims to insert for ids: for each envelope no
// live lease holds, the slot after its latest on record (the server's
// time now, until a lease ahead); the lease states read; and how many a
// live lease held.
func (r *runner) nextSlots(ctx context.Context, ids []bson.RawValue) ([]Lease, map[string]leaseState, int, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = leaseKey(id)
	}
	states, err := r.leaseStates(ctx, keys)
	if err != nil {
		return nil, nil, 0, err
	}
	now := r.cfg.serverNow()
	var tried []Lease
	held := 0
	for i, k := range keys {
		st, ok := states[k]
		if ok && st.until.After(now) {
			held++
			continue
		}
		l := Lease{Key: k, EnvelopeID: ids[i], Owner: r.owner, Run: r.cfg.run, ClaimedAt: now, Until: now.Add(r.cfg.lease)}
		if ok {
			l.N = st.n + 1
		}
		l.ID = k + "." + strconv.Itoa(l.N)
		tried = append(tried, l)
	}
	return tried, states, held, nil
}

// readClaimed reads the envelopes of the leases won that q still selects,
// keeps their leases and releases the others.
func (r *runner) readClaimed(ctx context.Context, q bson.D, won []Lease, cl claimed) (claimed, error) {
	in := make(bson.A, len(won))
	byKey := make(map[string]string, len(won))
	for i, l := range won {
		in[i] = l.EnvelopeID
		byKey[l.Key] = l.ID
	}
	envs, err := r.read(ctx, bson.D{{Key: "$and", Value: bson.A{q, readback.Filter(in)}}}, len(won))
	if err != nil {
		r.release(ctx, leaseIDs(won))
		return cl, err
	}
	cl.leaseOf = make(map[string]string, len(envs))
	for _, e := range envs {
		k := leaseKey(e.ID)
		cl.leases = append(cl.leases, byKey[k])
		cl.leaseOf[k] = byKey[k]
		delete(byKey, k)
	}
	cl.envs = envs
	if len(byKey) > 0 {
		rest := make([]string, 0, len(byKey))
		for _, id := range byKey {
			rest = append(rest, id)
		}
		r.release(ctx, rest)
	}
	return cl, nil
}

func leaseIDs(ls []Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.ID
	}
	return out
}

// leaseStates returns the latest slot on record of each envelope key,
// with the latest ClaimedAt of its send tokens and their ids.
func (r *runner) leaseStates(ctx context.Context, keys []string) (map[string]leaseState, error) {
	var ls []Lease
	err := retry(ctx, func() error {
		cur, err := r.cfg.leases.Find(ctx, bson.D{{Key: "key", Value: bson.D{{Key: "$in", Value: keys}}}},
			options.Find().SetProjection(bson.D{{Key: "key", Value: 1}, {Key: "n", Value: 1}, {Key: "until", Value: 1},
				{Key: "in_flight", Value: 1}, {Key: "claimed_at", Value: 1}}))
		if err != nil {
			return err
		}
		ls = ls[:0]
		return cur.All(ctx, &ls)
	})
	if err != nil {
		return nil, fmt.Errorf("replay: reading leases: %w", err)
	}
	out := make(map[string]leaseState, len(ls))
	for _, l := range ls {
		st, ok := out[l.Key]
		if !ok || l.N > st.n {
			st.n, st.until = l.N, l.Until
		}
		if l.InFlight {
			st.tokens = append(st.tokens, l.ID)
			if l.ClaimedAt.After(st.inFlight) {
				st.inFlight = l.ClaimedAt
			}
		}
		out[l.Key] = st
	}
	return out, nil
}

// insertLeases inserts the leases, unordered, and returns those stored
// and the count lost to another runner (a duplicate key on the _id). The
// insert is sent again while the server answers with a retryable error
// (see retryable); which leases are this runner's is then read back by
// owner and claim time, so a lease stored by an earlier try counts as won.
func (r *runner) insertLeases(ctx context.Context, docs []any, tried []Lease) (won []Lease, lost int, err error) {
	if len(docs) == 0 {
		return nil, 0, nil
	}
	ids := leaseIDs(tried)
	err = retry(ctx, func() error {
		_, err := r.cfg.leases.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		if err != nil && onlyDuplicates(err) {
			return nil
		}
		return err
	})
	if err != nil {
		// Which inserts the server applied is unknown: give back all of
		// them (release deletes this runner's only: another runner may
		// hold one of these slots).
		r.release(ctx, ids)
		return nil, 0, fmt.Errorf("replay: claiming envelopes: %w", err)
	}
	mine, err := r.ownLeases(ctx, ids, tried[0].ClaimedAt)
	if err != nil {
		r.release(ctx, ids)
		return nil, 0, err
	}
	for _, l := range tried {
		if mine[l.ID] {
			won = append(won, l)
		} else {
			lost++
		}
	}
	return won, lost, nil
}

// onlyDuplicates reports whether every failure of a bulk insert is a
// duplicate key.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, f := range policy.Extract(err) {
		if !policy.IsDuplicateKey(f) {
			return false
		}
	}
	return true
}

// ownLeases returns which of the lease ids this runner holds from its
// claim at claimedAt.
func (r *runner) ownLeases(ctx context.Context, ids []string, claimedAt time.Time) (map[string]bool, error) {
	var ls []Lease
	err := retry(ctx, func() error {
		cur, err := r.cfg.leases.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(bson.D{{Key: "owner", Value: 1}, {Key: "run", Value: 1}, {Key: "claimed_at", Value: 1}}))
		if err != nil {
			return err
		}
		ls = ls[:0]
		return cur.All(ctx, &ls)
	})
	if err != nil {
		return nil, fmt.Errorf("replay: reading back leases: %w", err)
	}
	out := make(map[string]bool, len(ls))
	for _, l := range ls {
		if l.Owner == r.owner && l.Run == r.cfg.run && l.ClaimedAt.Equal(claimedAt) {
			out[l.ID] = true
		}
	}
	return out, nil
}

// release deletes this runner's leases ids (its owner checked: a slot it
// tried may be another's); after ctx ended it still tries, for up to 10 s.
// A failure leaves them to expire.
func (r *runner) release(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	_ = retry(ctx, func() error {
		_, err := r.cfg.leases.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "owner", Value: r.owner}})
		return err
	})
}

// releaseStale deletes the earlier slots ids of envelopes this runner
// marked, those taken before its claim at only: a slot number is used
// again once its envelope's slots were all deleted (a complete replay, an
// operator's clean-up), and a later claim under a reused id is another
// runner's.
func (r *runner) releaseStale(ctx context.Context, ids []string, at time.Time) {
	if len(ids) == 0 {
		return
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	_ = retry(ctx, func() error {
		_, err := r.cfg.leases.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
			{Key: "claimed_at", Value: bson.D{{Key: "$lt", Value: at}}}})
		return err
	})
}

// codeInternalError is the server's InternalError (1): FerretDB v1 answers
// it with "database is locked (5) (SQLITE_BUSY)" when two writers of one
// SQLite database collide; the write was not applied and succeeds when
// sent again.
const codeInternalError = 1

// retryable reports whether an error of a DLQ or lease operation is worth
// sending again: one policy classifies as retryable (network errors,
// transient codes), or FerretDB's SQLITE_BUSY (see codeInternalError).
func retryable(err error) bool {
	for _, f := range policy.Extract(err) {
		if f.Origin == policy.OriginContext {
			return false
		}
		if defaultTable.Classify(f).Retryable() || (f.Code == codeInternalError && strings.Contains(f.Message, "SQLITE_BUSY")) {
			return true
		}
	}
	return false
}

// retry runs op until it succeeds, fails with an error that is not
// retryable, ctx ends, or 8 tries (waits from 20 ms doubling to 1 s).
func retry(ctx context.Context, op func() error) error {
	wait := 20 * time.Millisecond
	for try := 1; ; try++ {
		err := op()
		if err == nil || try == 8 || ctx.Err() != nil || !retryable(err) {
			return err
		}
		if sleep(ctx, wait) != nil {
			return err
		}
		wait = min(2*wait, time.Second)
	}
}

// defaultTable classifies a lease or replay error as the guarded
// collection's default table does.
var defaultTable = policy.Default()
