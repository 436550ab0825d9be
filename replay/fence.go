package replay

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/internal/readback"
)

// Fencing: before it sends an update, replace or delete, a runner takes
// the send token of its claim (the next slot of the envelope's claim
// sequence, Lease.InFlight), then checks that nothing happened to the
// envelope since its claim; an envelope whose claim was lost is left to
// its new owner, unsent (outLost). See the package documentation.

// holdLost is the reason recorded in Problems for an envelope whose
// claim was lost before its send.
const holdLost = "claim lost before the send: left to its new owner, not sent"

// fence takes the send tokens of the updates, replaces and deletes of
// send (kept in st until the batch is marked, renewed meanwhile) and sets
// outLost on those whose claim is no longer this runner's. It returns
// an error (nothing is sent then) when the tokens or the checks cannot
// be written or read.
func (r *runner) fence(ctx context.Context, cl claimed, st *batchState, send []*entry) error {
	now := r.cfg.serverNow()
	var tokens []Lease
	var docs []any
	byKey := map[string]*entry{}
	for _, e := range send {
		if e.insert {
			continue
		}
		c := cl.claimOf[leaseKey(e.env.ID)]
		t := Lease{Key: c.Key, N: c.N + 1, EnvelopeID: e.env.ID, Owner: r.owner, Run: r.cfg.run,
			ClaimedAt: now, Until: now.Add(r.cfg.lease), InFlight: true}
		t.ID = t.Key + "." + strconv.Itoa(t.N)
		tokens, docs, byKey[t.Key] = append(tokens, t), append(docs, t), e
	}
	if len(tokens) == 0 {
		return nil
	}
	won, _, err := r.insertLeases(ctx, docs, tokens)
	if err != nil {
		return fmt.Errorf("replay: taking send tokens (nothing was sent): %w", err)
	}
	mine := make(map[string]Lease, len(won))
	for _, t := range won {
		mine[t.Key] = t
		st.tokens.add(t.ID)
		st.work.add(t.ID)
	}
	ok, err := r.stillOwn(ctx, cl, won, byKey)
	if err != nil {
		return err
	}
	var drop []string
	for k, e := range byKey {
		t, got := mine[k]
		if got && ok[k] {
			continue
		}
		e.out, e.reason = outLost, holdLost
		if got {
			drop = append(drop, t.ID)
		}
	}
	st.tokens.remove(drop...)
	st.work.remove(drop...)
	r.release(ctx, drop)
	return nil
}

// stillOwn reports, for each send token won, whether the claim it
// follows is still this runner's: no slot after the token on record, no
// send token another runner took since the claim, and the envelope not
// tried by anyone since it was read (a runner that took the claim over,
// replayed and released it deletes its slots, so the token's slot can be
// free again: the envelope's record says what happened).
func (r *runner) stillOwn(ctx context.Context, cl claimed, won []Lease, byKey map[string]*entry) (map[string]bool, error) {
	ok := make(map[string]bool, len(won))
	if len(won) == 0 {
		return ok, nil
	}
	keys := make([]string, len(won))
	ids := make(bson.A, len(won))
	for i, t := range won {
		keys[i], ids[i] = t.Key, t.EnvelopeID
		ok[t.Key] = true
	}
	var ls []Lease
	err := retry(ctx, func() error {
		cur, err := r.cfg.leases.Find(ctx, bson.D{{Key: "key", Value: bson.D{{Key: "$in", Value: keys}}}},
			options.Find().SetProjection(bson.D{{Key: "key", Value: 1}, {Key: "n", Value: 1}, {Key: "in_flight", Value: 1}}))
		if err != nil {
			return err
		}
		ls = ls[:0]
		return cur.All(ctx, &ls)
	})
	if err != nil {
		return nil, fmt.Errorf("replay: checking claims before the send (nothing was sent): %w", err)
	}
	token := make(map[string]Lease, len(won))
	for _, t := range won {
		token[t.Key] = t
	}
	for _, l := range ls {
		t := token[l.Key]
		if l.N > t.N || (l.InFlight && l.ID != t.ID && !cl.known[l.ID]) {
			ok[l.Key] = false
		}
	}
	return ok, r.untried(ctx, ids, byKey, ok)
}

// untried clears ok for the envelopes (ids) whose record changed since
// this runner read them: tried (replay_tried_at), marked or discarded
// (status), held (replay_hold), or gone.
func (r *runner) untried(ctx context.Context, ids bson.A, byKey map[string]*entry, ok map[string]bool) error {
	seen := map[string]bool{}
	err := retry(ctx, func() error {
		cur, err := r.dlq.Find(ctx, readback.Filter(ids), options.Find().SetProjection(bson.D{
			{Key: "replay_tried_at", Value: 1}, {Key: "status", Value: 1}, {Key: "replay_hold", Value: 1}}))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		clear(seen)
		for cur.Next(ctx) {
			k := leaseKey(cur.Current.Lookup("_id"))
			e := byKey[k]
			if e == nil {
				continue
			}
			seen[k] = true
			at, _ := cur.Current.Lookup("replay_tried_at").DateTimeOK()
			status, _ := cur.Current.Lookup("status").StringValueOK()
			hold, _ := cur.Current.Lookup("replay_hold").StringValueOK()
			if at != e.env.ReplayTriedAt.UnixMilli() && !(at == 0 && e.env.ReplayTriedAt.IsZero()) ||
				status != e.env.Status || hold != e.env.ReplayHold {
				ok[k] = false
			}
		}
		return cur.Err()
	})
	if err != nil {
		return fmt.Errorf("replay: checking envelopes before the send (nothing was sent): %w", err)
	}
	for k := range ok {
		if !seen[k] {
			ok[k] = false
		}
	}
	return nil
}

// leaseSet is the set of lease ids a runner renews while it works on a
// batch: its claims, then its send tokens.
type leaseSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func newLeaseSet(ids ...string) *leaseSet {
	s := &leaseSet{ids: map[string]bool{}}
	s.add(ids...)
	return s
}

func (s *leaseSet) add(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.ids[id] = true
	}
}

func (s *leaseSet) remove(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.ids, id)
	}
}

func (s *leaseSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	return out
}

// renewEvery is how often a runner moves its leases' Until forward while
// it works: a third of the lease (at least 20 ms), so that two renewals
// may fail before a lease lapses.
func renewEvery(lease time.Duration) time.Duration { return max(lease/3, 20*time.Millisecond) }

// renew moves Until of the leases in set (this runner's: owner checked)
// a lease ahead of the server's time, every renewEvery, until the
// returned stop is called or ctx ends. A renewal that fails is left: the
// lease lapses, and the fence keeps what another runner does then safe.
func (r *runner) renew(ctx context.Context, set *leaseSet) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(renewEvery(r.cfg.lease))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ids := set.list()
			if len(ids) == 0 {
				continue
			}
			until := r.cfg.serverNow().Add(r.cfg.lease)
			_ = retry(ctx, func() error {
				_, err := r.cfg.leases.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}},
					{Key: "owner", Value: r.owner}}, bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: until}}}})
				return err
			})
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
