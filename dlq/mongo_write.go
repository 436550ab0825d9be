package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

// The writes of MongoSink.Put: upserts (the default) or insert-first
// (WithInsertFirst), each in rounds that send again what lost a race on
// the fingerprint index or was refused as a sub-document.

// upsertModel returns the upsert of one prepared envelope (asBytes: see
// envelope.InsertFields).
func upsertModel(env envelope.Envelope, asBytes string) (mongo.WriteModel, error) {
	soi, err := bson.Marshal(envelope.InsertFields(env, asBytes))
	if err != nil {
		return nil, fmt.Errorf("dlq: marshalling the envelope of fingerprint %s: %w", env.Fingerprint, err)
	}
	update := append(bson.D{{Key: "$setOnInsert", Value: bson.Raw(soi)}}, envelope.RecaptureUpdateN(env.Attempts, env.Copies(), env.LastSeen)...)
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: "fingerprint", Value: env.Fingerprint}}).
		SetUpdate(update).
		SetUpsert(true), nil
}

// cmpOr returns a, or b when a is nil.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// failAll returns err for every index of idx.
func failAll(idx []int, err error) map[int]error {
	m := make(map[int]error, len(idx))
	for _, i := range idx {
		m[i] = err
	}
	return m
}

// oneWriteError returns the error of one statement of a bulk write, as a
// BulkWriteException holding only that write error.
func oneWriteError(fp string, we mongo.BulkWriteError, labels []string) error {
	return fmt.Errorf("dlq: storing the envelope of fingerprint %s: %w", fp,
		mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we}, Labels: labels})
}

// putUpserts stores prepared envelopes with one bulk write of upserts,
// sending again those that failed with a duplicate key. It returns the
// indexes (into envs) not stored, with why, and the error Put returns.
func (s *MongoSink) putUpserts(ctx context.Context, envs []envelope.Envelope) (map[int]error, error) {
	u := upserts{envs: envs, asBytes: make([]string, len(envs)), failed: map[int]error{}}
	for i := range envs {
		m, err := upsertModel(envs[i], "")
		if err != nil {
			return failAll(allIndexes(len(envs)), err), err
		}
		u.models, u.idx = append(u.models, m), append(u.idx, i)
	}
	var first error
	for round := 0; ; round++ {
		res, err := s.coll.BulkWrite(ctx, u.models, options.BulkWrite().SetOrdered(false))
		if err == nil {
			if aerr := s.acked(res.Acknowledged); aerr != nil {
				maps.Copy(u.failed, failAll(u.idx, aerr))
				return u.failed, aerr
			}
			return u.failed, first
		}
		werr := fmt.Errorf("dlq: storing %d envelopes: %w", len(u.models), err)
		first = cmpOr(first, werr)
		if !u.next(err, werr, round < s.cfg.upsertRetries) {
			return u.failed, first
		}
		if len(u.failed) == 0 {
			first = nil // only races and refusals so far: the next round decides
		}
	}
}

// upserts is what putUpserts' rounds share.
type upserts struct {
	envs    []envelope.Envelope
	asBytes []string // a server's refusal of envs[i]'s sub-documents
	models  []mongo.WriteModel
	idx     []int // models[k] is envs[idx[k]]
	failed  map[int]error
}

// next reads the error of a round's bulk write (err, wrapped as werr): a
// statement that lost a race on the fingerprint index goes again when
// race is set, one whose sub-document the server refused goes again once
// with its documents as bytes, any other write error fails its envelope,
// and an error that is not per statement fails every envelope of the
// round. It reports whether any envelope goes again (models and idx are
// then the next round's).
func (u *upserts) next(err, werr error, race bool) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		maps.Copy(u.failed, failAll(u.idx, werr))
		return false
	}
	var again []mongo.WriteModel
	var againIdx []int
	for _, we := range bwe.WriteErrors {
		if we.Index < 0 || we.Index >= len(u.models) {
			maps.Copy(u.failed, failAll(u.idx, werr))
			return false
		}
		i := u.idx[we.Index]
		f := policy.Extract(mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we}})[0]
		switch {
		case race && policy.IsDuplicateKey(f):
			again = append(again, u.models[we.Index])
			againIdx = append(againIdx, i)
		case refusesSubdocument(f.Code) && u.asBytes[i] == "":
			// The server refused a sub-document this package took
			// for storable: send the envelope again (once) with its
			// documents as bytes.
			u.asBytes[i] = fmt.Sprintf("refused by the server as a sub-document: %d %s", f.Code, f.CodeName)
			m, merr := upsertModel(u.envs[i], u.asBytes[i])
			if merr != nil {
				u.failed[i] = merr
				continue
			}
			again = append(again, m)
			againIdx = append(againIdx, i)
		default:
			u.failed[i] = oneWriteError(u.envs[i].Fingerprint, we, bwe.Labels)
		}
	}
	u.models, u.idx = again, againIdx
	return len(again) > 0
}

// refusesSubdocument reports whether a write error code is a server's
// refusal of a field name or shape in a stored document (mongodb/mongo
// src/mongo/base/error_codes.yml: 2 BadValue, 52 DollarPrefixedFieldName,
// 56 EmptyFieldName, 57 DottedFieldName; storage_validation.cpp).
func refusesSubdocument(code int32) bool {
	switch code {
	case 2, 52, 56, 57:
		return true
	}
	return false
}

func allIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// putInsertFirst stores prepared envelopes with one insert, then one
// update of the recaptured ones (WithInsertFirst). It returns the indexes
// (into envs) not stored, with why, and the error Put returns.
func (s *MongoSink) putInsertFirst(ctx context.Context, envs []envelope.Envelope) (map[int]error, error) {
	in := inserts{s: s, envs: envs, asBytes: make([]string, len(envs)), docs: make([]bson.Raw, len(envs)), failed: map[int]error{}}
	for i := range envs {
		if err := in.marshal(i); err != nil {
			return failAll(allIndexes(len(envs)), err), err
		}
	}
	pending := allIndexes(len(envs))
	for round := 0; ; round++ {
		dups := in.insertRound(ctx, pending)
		if len(dups) == 0 {
			return in.failed, in.first
		}
		missing, err := s.update(ctx, envs, dups)
		if err != nil {
			maps.Copy(in.failed, failAll(dups, err))
			return in.failed, cmpOr(in.first, err)
		}
		if len(missing) == 0 {
			return in.failed, in.first
		}
		if round >= s.cfg.upsertRetries {
			err := fmt.Errorf("dlq: %d envelopes were inserted and deleted concurrently %d times; giving up", len(missing), round+1)
			maps.Copy(in.failed, failAll(missing, err))
			return in.failed, cmpOr(in.first, err)
		}
		pending = missing
	}
}

// inserts is what putInsertFirst's rounds share.
type inserts struct {
	s       *MongoSink
	envs    []envelope.Envelope
	asBytes []string   // a server's refusal of envs[i]'s sub-documents
	docs    []bson.Raw // envs[i] as inserted
	failed  map[int]error
	first   error // the error Put returns
}

// marshal sets docs[i] to the stored document of envs[i].
func (in *inserts) marshal(i int) error {
	doc, err := bson.Marshal(envelope.StoredFields(in.envs[i], in.asBytes[i]))
	if err != nil {
		return fmt.Errorf("dlq: marshalling the envelope of fingerprint %s: %w", in.envs[i].Fingerprint, err)
	}
	in.docs[i] = doc
	return nil
}

// insertRound inserts docs[i], i in pending, then, once more with their
// documents as bytes, those the server refused for a field name this
// package took for storable. It records what failed and returns the
// envelopes whose insert met a duplicate key (recaptures).
func (in *inserts) insertRound(ctx context.Context, pending []int) []int {
	dups, failed, refused, err := in.s.insert(ctx, in.envs, in.asBytes, in.docs, pending)
	maps.Copy(in.failed, failed)
	in.first = cmpOr(in.first, err)
	var again []int
	for _, r := range refused {
		in.asBytes[r.index] = fmt.Sprintf("refused by the server as a sub-document: %d %s", r.code, r.codeName)
		if err := in.marshal(r.index); err != nil {
			in.failed[r.index] = err
			in.first = cmpOr(in.first, err)
			continue
		}
		again = append(again, r.index)
	}
	if len(again) > 0 {
		d2, f2, _, err := in.s.insert(ctx, in.envs, in.asBytes, in.docs, again) // refused again: failed
		maps.Copy(in.failed, f2)
		in.first = cmpOr(in.first, err)
		dups = append(dups, d2...)
	}
	return dups
}

// refusedInsert is an envelope whose insert the server refused for a
// field name (refusesSubdocument) while its documents were stored as
// sub-documents.
type refusedInsert struct {
	index    int // into docs
	code     int32
	codeName string
}

// insert inserts docs[i] for i in idx, unordered, and returns the indexes
// (into docs) whose insert failed with a duplicate key, those that failed
// otherwise with why, those refused for a field name that can be stored
// as bytes instead, and the error Put returns for them.
func (s *MongoSink) insert(ctx context.Context, envs []envelope.Envelope, asBytes []string, docs []bson.Raw, idx []int) ([]int, map[int]error, []refusedInsert, error) {
	batch := make([]any, len(idx))
	for k, i := range idx {
		batch[k] = docs[i]
	}
	res, err := s.coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false))
	if err == nil {
		if aerr := s.acked(res.Acknowledged); aerr != nil {
			return nil, failAll(idx, aerr), nil, aerr
		}
		return nil, nil, nil, nil
	}
	werr := fmt.Errorf("dlq: storing %d envelopes: %w", len(idx), err)
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return nil, failAll(idx, werr), nil, werr
	}
	dups := make([]int, 0, len(bwe.WriteErrors))
	failed := map[int]error{}
	var refused []refusedInsert
	for _, we := range bwe.WriteErrors {
		if we.Index < 0 || we.Index >= len(idx) {
			return nil, failAll(idx, werr), nil, werr
		}
		i := idx[we.Index]
		f := policy.Extract(mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we}})[0]
		switch {
		case policy.IsDuplicateKey(f):
			dups = append(dups, i)
		case refusesSubdocument(f.Code) && asBytes[i] == "":
			refused = append(refused, refusedInsert{index: i, code: f.Code, codeName: f.CodeName})
		default:
			failed[i] = oneWriteError(envs[i].Fingerprint, we, bwe.Labels)
		}
	}
	if len(failed) == 0 {
		werr = nil
	}
	return dups, failed, refused, werr
}

// update applies the recapture update to the envelopes envs[i], i in
// idx, and returns those it found no envelope for.
func (s *MongoSink) update(ctx context.Context, envs []envelope.Envelope, idx []int) ([]int, error) {
	type key struct {
		attempts, copies int
		lastSeen         int64
	}
	groups := map[key][]string{}
	var order []key
	for _, i := range idx {
		k := key{envs[i].Attempts, envs[i].Copies(), envs[i].LastSeen.UnixMilli()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], envs[i].Fingerprint)
	}
	models := make([]mongo.WriteModel, 0, len(order))
	for _, k := range order {
		models = append(models, mongo.NewUpdateManyModel().
			SetFilter(bson.D{{Key: "fingerprint", Value: bson.D{{Key: "$in", Value: groups[k]}}}}).
			SetUpdate(envelope.RecaptureUpdateN(k.attempts, k.copies, time.UnixMilli(k.lastSeen).UTC())))
	}
	res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return nil, fmt.Errorf("dlq: updating %d recaptured envelopes: %w", len(idx), err)
	}
	if err := s.acked(res.Acknowledged); err != nil {
		return nil, err
	}
	if res.MatchedCount >= int64(len(idx)) {
		return nil, nil
	}
	// Some envelopes are gone since their insert failed: find which.
	fps := make([]string, len(idx))
	for k, i := range idx {
		fps[k] = envs[i].Fingerprint
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "fingerprint", Value: bson.D{{Key: "$in", Value: fps}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "fingerprint", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("dlq: checking %d recaptured envelopes: %w", len(idx), err)
	}
	var found []struct {
		Fingerprint string `bson:"fingerprint"`
	}
	if err := cur.All(ctx, &found); err != nil {
		return nil, fmt.Errorf("dlq: checking %d recaptured envelopes: %w", len(idx), err)
	}
	there := make(map[string]bool, len(found))
	for _, f := range found {
		there[f.Fingerprint] = true
	}
	var missing []int
	for _, i := range idx {
		if !there[envs[i].Fingerprint] {
			missing = append(missing, i)
		}
	}
	return missing, nil
}
