package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
)

// Originals too large to be stored with their envelope
// (envelope.Envelope.OriginalPieces) are kept whole, in pieces, in a side
// collection of the dead-letter collection: "<dlq>_pieces", in its
// database. A piece is
//
//	{_id: "<sha256>.<i>", sha256, i, count, size, data: BinData, at}
//
// sha256 naming the original's bytes (identical originals share their
// pieces), i from 0 to count−1, size the original's size, data at most
// envelope.PieceSize bytes of it, and at when a Put last wrote or
// refreshed it.
//
// MongoSink writes an envelope's pieces before the envelope, so an
// envelope on record has its original whole; the two are not written
// atomically, so a Put that fails or dies between them leaves pieces that
// no envelope names. Such a piece set is an orphan once no Put has
// written or refreshed it for OrphanGrace; younger ones may belong to a
// Put under way. SweepPieces removes orphans (EnsureCollection runs it),
// and when the dead-letter collection's TTL counts from last_seen or
// first_seen the pieces get a TTL index on at that outlives their
// envelope by OrphanGrace (a recapture refreshes at). Stats counts
// envelopes in pieces and the orphans; Discard keeps the pieces of the
// envelopes it discards (they are kept for inspection); package replay
// reassembles the original (ReadOriginal) and skips an envelope whose
// pieces are missing or do not match.

// PiecesCollectionSuffix is appended to the dead-letter collection's name
// to name its side collection of pieces: "dlq" → "dlq_pieces".
const PiecesCollectionSuffix = "_pieces"

// OrphanGrace is how long a piece set no envelope names is left alone
// after it was last written, as a Put may still be storing its envelope:
// 1 hour. After that it is an orphan.
const OrphanGrace = time.Hour

// FeaturePieces is the side collection of pieces in a SetupReport: its
// TTL index (see PiecesCollectionSuffix) and the orphans removed.
const FeaturePieces = "pieces"

// ErrPiecesMissing is wrapped by ReadOriginal's error when an original set
// apart cannot be reassembled: pieces missing, or bytes that do not match
// its size and SHA-256.
var ErrPiecesMissing = errors.New("dlq: the original's pieces are missing or damaged")

// PiecesCollection returns the side collection of pieces of the
// dead-letter collection coll (in its database, with the database's
// options: set a write concern on the database, not only on coll, for the
// pieces to share it).
func PiecesCollection(coll *mongo.Collection) *mongo.Collection {
	return coll.Database().Collection(coll.Name() + PiecesCollectionSuffix)
}

// piece is one stored piece of an original.
type piece struct {
	ID     string    `bson:"_id"`
	SHA256 string    `bson:"sha256"`
	I      int32     `bson:"i"`
	Count  int32     `bson:"count"`
	Size   int64     `bson:"size"`
	Data   []byte    `bson:"data"`
	At     time.Time `bson:"at"`
}

func pieceID(sha string, i int) string { return sha + "." + strconv.Itoa(i) }

// pieceIDs returns the _ids of p's pieces.
func pieceIDs(p *envelope.Pieces) bson.A {
	ids := make(bson.A, p.Count)
	for i := range ids {
		ids[i] = pieceID(p.SHA256, i)
	}
	return ids
}

// writePieces stores the pieces of env's original (env.OriginalPieces):
// it refreshes the at of those already there (a recapture, a retried
// Put: no sweep takes them meanwhile), then inserts every piece, a
// duplicate key meaning the same bytes are stored. It returns nil once
// every piece is stored, acknowledged. It needs update and insert on the
// side collection.
func (s *MongoSink) writePieces(ctx context.Context, env envelope.Envelope) error {
	p := env.OriginalPieces
	pc := PiecesCollection(s.coll)
	now := time.Now().UTC().Truncate(time.Millisecond)
	fail := func(err error) error {
		return fmt.Errorf("dlq: storing the original of fingerprint %s (%d bytes) in %d pieces in %s: %w",
			env.Fingerprint, p.Size, p.Count, pc.Name(), err)
	}
	if _, err := pc.UpdateMany(ctx, bson.D{{Key: "sha256", Value: p.SHA256}}, bson.D{{Key: "$max", Value: bson.D{{Key: "at", Value: now}}}}); err != nil {
		return fail(err)
	}
	parts := p.Split(env.Original)
	docs := make([]any, len(parts))
	for i, data := range parts {
		docs[i] = piece{ID: pieceID(p.SHA256, i), SHA256: p.SHA256, I: int32(i), Count: p.Count, Size: p.Size, Data: data, At: now}
	}
	res, err := pc.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err != nil && !onlyDuplicateKeys(err) {
		return fail(err)
	}
	if res != nil {
		if err := s.acked(res.Acknowledged); err != nil {
			return fail(err)
		}
	}
	return nil
}

// onlyDuplicateKeys reports whether every write error of a bulk insert is
// a duplicate key (11000), with no write concern error.
func onlyDuplicateKeys(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

// ReadOriginal returns env's original: env.Original, or, when it was set
// apart (env.OriginalPieces), the original reassembled from the pieces in
// the side collection of the dead-letter collection coll, checked against
// its size and SHA-256. It returns an error wrapping ErrPiecesMissing
// when the pieces are missing or damaged (how many of them), or the
// driver's.
func ReadOriginal(ctx context.Context, coll *mongo.Collection, env envelope.Envelope) (bson.Raw, error) {
	p := env.OriginalPieces
	if p == nil {
		return env.Original, nil
	}
	cur, err := PiecesCollection(coll).Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: pieceIDs(p)}}}},
		options.Find().SetBatchSize(2))
	if err != nil {
		return nil, fmt.Errorf("dlq: reading the original's pieces: %w", err)
	}
	defer cur.Close(ctx)
	parts := make([][]byte, p.Count)
	for cur.Next(ctx) {
		var pc piece
		if err := cur.Decode(&pc); err == nil && pc.SHA256 == p.SHA256 && pc.I >= 0 && pc.I < p.Count {
			parts[pc.I] = pc.Data
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("dlq: reading the original's pieces: %w", err)
	}
	doc := make([]byte, 0, p.Size)
	missing := 0
	for _, part := range parts {
		if part == nil {
			missing++
		}
		doc = append(doc, part...)
	}
	if missing > 0 {
		return nil, fmt.Errorf("%w: %d of %d pieces of %s not found", ErrPiecesMissing, missing, p.Count, p.SHA256[:12])
	}
	if err := p.Check(doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPiecesMissing, err)
	}
	return doc, nil
}

// PieceSummary is what the side collection of pieces holds
// (Summary.Pieces), whatever the filter.
type PieceSummary struct {
	// Sets is the number of originals stored in pieces, Pieces the
	// pieces, Bytes the originals' bytes.
	Sets, Pieces, Bytes int64
	// Orphans is the number of piece sets no envelope names, not written
	// for OrphanGrace (SweepPieces removes them); Unnamed those no
	// envelope names written more recently (a Put may be storing its
	// envelope).
	Orphans, Unnamed int64
	// Incomplete is the number of piece sets an envelope names that lack
	// pieces: those envelopes cannot be replayed.
	Incomplete int64
}

// pieceSet is what the pieces of one original say about it.
type pieceSet struct {
	count, have int32
	size        int64
	at          time.Time // the latest at of its pieces
}

// pieceSets reads the pieces' fields but their data, by SHA-256.
func pieceSets(ctx context.Context, coll *mongo.Collection) (map[string]*pieceSet, error) {
	cur, err := PiecesCollection(coll).Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "data", Value: 0}}))
	if err != nil {
		return nil, fmt.Errorf("dlq: reading %s: %w", coll.Name()+PiecesCollectionSuffix, err)
	}
	defer cur.Close(ctx)
	sets := map[string]*pieceSet{}
	for cur.Next(ctx) {
		var p piece
		if cur.Decode(&p) != nil || p.SHA256 == "" {
			continue
		}
		s := sets[p.SHA256]
		if s == nil {
			s = &pieceSet{count: p.Count, size: p.Size}
			sets[p.SHA256] = s
		}
		s.have++
		if p.At.After(s.at) {
			s.at = p.At
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("dlq: reading %s: %w", coll.Name()+PiecesCollectionSuffix, err)
	}
	return sets, nil
}

// namedSets returns which of the SHA-256s of sets an envelope of coll
// names (original_pieces.sha256).
func namedSets(ctx context.Context, coll *mongo.Collection, sets map[string]*pieceSet) (map[string]bool, error) {
	shas := make(bson.A, 0, len(sets))
	for sha := range sets {
		shas = append(shas, sha)
	}
	named := map[string]bool{}
	if len(shas) == 0 {
		return named, nil
	}
	cur, err := coll.Find(ctx, bson.D{{Key: "original_pieces.sha256", Value: bson.D{{Key: "$in", Value: shas}}}},
		options.Find().SetProjection(bson.D{{Key: "original_pieces.sha256", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("dlq: reading %s: %w", coll.Name(), err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if sha, ok := cur.Current.Lookup("original_pieces", "sha256").StringValueOK(); ok {
			named[sha] = true
		}
	}
	return named, cur.Err()
}

// summarisePieces returns the PieceSummary of coll's side collection at
// now, and the orphans' SHA-256s.
func summarisePieces(ctx context.Context, coll *mongo.Collection, now time.Time, grace time.Duration) (PieceSummary, []string, error) {
	var ps PieceSummary
	sets, err := pieceSets(ctx, coll)
	if err != nil {
		return ps, nil, err
	}
	named, err := namedSets(ctx, coll, sets)
	if err != nil {
		return ps, nil, err
	}
	var orphans []string
	for sha, s := range sets {
		ps.Sets++
		ps.Pieces += int64(s.have)
		ps.Bytes += s.size
		switch {
		case named[sha] && s.have < s.count:
			ps.Incomplete++
		case named[sha]:
		case now.Sub(s.at) >= grace:
			ps.Orphans++
			orphans = append(orphans, sha)
		default:
			ps.Unnamed++
		}
	}
	return ps, orphans, nil
}

// SweepPieces removes the orphans of the side collection of pieces of the
// dead-letter collection coll: piece sets no envelope names and no Put
// wrote or refreshed for olderThan (EnsureCollection uses OrphanGrace; a
// shorter time than a Put can take between its pieces and its envelope
// may take the pieces of a Put under way, leaving its envelope without
// its original). A piece refreshed meanwhile (at newer than the cut-off)
// is kept. It returns how many piece sets it removed, and the driver's
// error.
func SweepPieces(ctx context.Context, coll *mongo.Collection, olderThan time.Duration) (int64, error) {
	now := time.Now().UTC()
	_, orphans, err := summarisePieces(ctx, coll, now, olderThan)
	if err != nil || len(orphans) == 0 {
		return 0, err
	}
	in := make(bson.A, len(orphans))
	for i, sha := range orphans {
		in[i] = sha
	}
	_, err = PiecesCollection(coll).DeleteMany(ctx, bson.D{{Key: "sha256", Value: bson.D{{Key: "$in", Value: in}}},
		{Key: "at", Value: bson.D{{Key: "$lt", Value: now.Add(-olderThan)}}}})
	if err != nil {
		return 0, fmt.Errorf("dlq: removing orphaned pieces: %w", err)
	}
	return int64(len(orphans)), nil
}

// pieces is EnsureCollection's FeaturePieces: the orphans older than
// OrphanGrace removed, and the TTL index on the pieces' at (the
// collection's TTL plus OrphanGrace, so the pieces outlive their
// envelope; a recapture refreshes at) when the TTL counts from last_seen
// or first_seen, which at follows. A failed sweep is said in the detail
// and fails nothing.
func (s *setup) pieces(ctx context.Context) FeatureResult {
	swept := ""
	if n, err := SweepPieces(ctx, s.db.Collection(s.name), OrphanGrace); err != nil {
		swept = "; orphans not swept: " + err.Error()
	} else if n > 0 {
		swept = fmt.Sprintf("; %d orphaned piece sets removed", n)
	}
	var fr FeatureResult
	if s.cfg.ttl == 0 || (s.cfg.ttlField != "last_seen" && s.cfg.ttlField != "first_seen") {
		fr = FeatureResult{State: FeatureDisabled, Detail: "no TTL index: the collection's TTL does not count from last_seen or first_seen"}
	} else {
		ps := &setup{db: s.db, name: s.name + PiecesCollectionSuffix, cfg: s.cfg, rep: s.rep}
		ps.cfg.ttlField = "at"
		ps.cfg.ttl = min(s.cfg.ttl+OrphanGrace, math.MaxInt32*time.Second)
		idx, err := ps.listIndexes(ctx)
		if err != nil && !hasCode(err, codeNamespaceNotFound) {
			fr = ps.optional(FeaturePieces, "", err)
		} else {
			fr = ps.ensureTTL(ctx, idx)
			fr.Detail = strings.Replace(fr.Detail, "index ", ps.name+" index ", 1)
		}
	}
	fr.Feature = FeaturePieces
	fr.Detail = strings.TrimPrefix(fr.Detail+swept, "; ")
	return fr
}
