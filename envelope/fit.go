package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/policy"
)

// MaxBSONSize is the largest document a MongoDB server stores, 16 MiB: it
// is policy.MaxBSONSize, kept here under its old name.
const MaxBSONSize = policy.MaxBSONSize

// EnvelopeHeadroom is the room, in bytes, that dlq.MongoSink keeps free below
// MaxBSONSize when it decides whether an envelope fits: the fields set by
// the update operators ($inc attempts, $max last_seen, $set status), the
// ones a replay or a discard add later (replayed_at, discarded_at), the
// server's _id, and the update statement around the envelope
// ({q: {fingerprint}, u: {$setOnInsert: ...}, upsert: true}).
const EnvelopeHeadroom = 16 * 1024

// MaxEnvelopeSize is the largest stored envelope dlq.MongoSink writes:
// MaxBSONSize − EnvelopeHeadroom bytes. A larger one has its diagnostics
// cut or its original set apart (see PrepareStored).
const MaxEnvelopeSize = MaxBSONSize - EnvelopeHeadroom

// SmallErrInfo is the size in bytes up to which an errInfo is never cut
// to make room for an original: 64 KiB (a $jsonSchema errInfo of a few
// dozen failing properties). A larger one (errInfo repeats the rejected
// values: consideredValue) is cut only when that lets the whole original
// fit.
const SmallErrInfo = 64 * 1024

// PieceSize is the size in bytes of each piece of an original set apart
// (Pieces), the last one excepted: 8 MiB, so that a piece with its few
// fields stays far below MaxBSONSize and two fit in one insert message
// (48 MB, maxMessageSizeBytes).
const PieceSize = 8 << 20

// Pieces is where an original too large to be stored with its envelope is
// kept: whole, in Count pieces of PieceSize bytes (the last one shorter),
// in the dead-letter collection's side collection (dlq.MongoSink writes
// them before the envelope). The pieces are named by the SHA-256 of the
// original's bytes, so that identical originals share them and a reader
// can check what it reassembled.
type Pieces struct {
	// SHA256 is the hex SHA-256 of the original's bytes.
	SHA256 string `bson:"sha256" json:"sha256"`
	// Size is the original's size in bytes.
	Size int64 `bson:"size" json:"size"`
	// Count is the number of pieces.
	Count int32 `bson:"count" json:"count"`
}

// PiecesOf returns the Pieces record of doc: its SHA-256, size and the
// number of PieceSize pieces it takes.
func PiecesOf(doc []byte) *Pieces {
	sum := sha256.Sum256(doc)
	return &Pieces{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(doc)), Count: int32((len(doc) + PieceSize - 1) / PieceSize)}
}

// Split returns doc's pieces, in order (sub-slices of doc).
func (p *Pieces) Split(doc []byte) [][]byte {
	out := make([][]byte, 0, p.Count)
	for lo := 0; lo < len(doc); lo += PieceSize {
		out = append(out, doc[lo:min(lo+PieceSize, len(doc))])
	}
	return out
}

// Check returns an error unless doc is the original p records: its size
// and SHA-256.
func (p *Pieces) Check(doc []byte) error {
	if int64(len(doc)) != p.Size {
		return fmt.Errorf("envelope: reassembled original is %d bytes, want %d", len(doc), p.Size)
	}
	if sum := sha256.Sum256(doc); hex.EncodeToString(sum[:]) != p.SHA256 {
		return errors.New("envelope: reassembled original does not match its SHA-256")
	}
	return nil
}

// storedSize returns the size in bytes of env stored as a document (its
// $setOnInsert fields plus the operators' fields), or an error if env
// cannot be marshalled.
func storedSize(env Envelope) (int, error) {
	raw, err := bson.Marshal(InsertFields(env, ""))
	if err != nil {
		return 0, err
	}
	// fingerprint, attempts, multiplicity, last_seen, status, as stored.
	const operatorFields = 1 + len("fingerprint") + 1 + 4 + 64 + 1 +
		1 + len("attempts") + 1 + 4 +
		1 + len("multiplicity") + 1 + 4 +
		1 + len("last_seen") + 1 + 8 +
		1 + len("status") + 1 + 4 + len(StatusDiscarded) + 1
	return len(raw) + operatorFields, nil
}

// fitEnvelope makes env fit in limit bytes as stored without losing its
// original:
//
//  1. an envelope that fits is left as it is;
//  2. when cutting diagnostics lets the whole original fit with them,
//     they are cut in this order, each step only as far as needed and
//     recorded in env.Cut: err_info.consideredValue (the values errInfo
//     repeats from the document), err_info.details (every array cut to
//     its first 16, then 4, then 1 items; Total and Kept count them),
//     err_info (replaced by {writeguard_truncated: true, size,
//     failingDocumentId}; failing_keywords and failing_paths, derived from
//     the full errInfo, stay), failing_paths and failing_keywords (their
//     first 100 entries), errmsg (its first 1 KiB). An errInfo of at most
//     SmallErrInfo bytes is never cut for this.
//  3. otherwise the diagnostics stay verbatim and the original is set
//     apart (OriginalPieces: stored whole, in pieces); the diagnostics are
//     then cut, in the order above, only if they do not fit by themselves.
//
// An envelope that still does not fit (call options over 16 MiB) is
// returned as it is: storing it fails, and the document goes to the
// fallback sink or ends dead_letter_failed.
func fitEnvelope(env Envelope, limit int) Envelope {
	f := &fitting{env: env, limit: limit}
	if f.fits() {
		return env
	}
	if len(env.Original) < limit {
		inline := &fitting{env: env, limit: limit, keepSmall: true}
		inline.env.Cut = slices.Clone(env.Cut)
		if inline.cutDiagnostics() {
			return inline.env
		}
	}
	apart := &fitting{env: env, limit: limit}
	apart.env.Cut = slices.Clone(env.Cut)
	apart.env.OriginalPieces = PiecesOf(env.Original)
	if !apart.fits() {
		apart.cutDiagnostics()
	}
	return apart.env
}

// fitting is an envelope being cut to fit limit bytes as stored.
type fitting struct {
	env   Envelope
	limit int
	size  int // env's stored size when last measured (0: cannot be marshalled)
	// keepSmall: an errInfo of at most SmallErrInfo bytes is not cut.
	keepSmall bool
}

// cutDiagnostics cuts errInfo, the lists and errmsg, in that order, until
// the envelope fits, and reports whether it does.
func (f *fitting) cutDiagnostics() bool {
	return f.cutErrInfo() || f.cutLists() || f.cutErrMsg()
}

// fits measures env again and reports whether it fits (an envelope that
// cannot be marshalled is not cut: storing it fails).
func (f *fitting) fits() bool {
	size, err := storedSize(f.env)
	f.size = size
	return err != nil || size <= f.limit
}

// cutErrInfo applies steps 1 to 3 to errInfo, as far as needed, and
// reports whether the envelope fits.
func (f *fitting) cutErrInfo() bool {
	if len(f.env.ErrInfo) == 0 || (f.keepSmall && len(f.env.ErrInfo) <= SmallErrInfo) {
		return false
	}
	return f.dropConsideredValues() || f.keepFirstDetails() || f.summariseErrInfo()
}

// dropConsideredValues is step 1.
func (f *fitting) dropConsideredValues() bool {
	before := len(f.env.ErrInfo)
	cut := dropKeys(f.env.ErrInfo, isConsideredValueKey, 0)
	if len(cut) >= before {
		return false
	}
	f.env.ErrInfo = cut
	f.env.Cut = append(f.env.Cut, CutField{Field: "err_info.consideredValue", Size: before})
	return f.fits()
}

// keepFirstDetails is step 2: the arrays of errInfo cut to their first
// 16, then 4, then 1 items, until the envelope fits.
func (f *fitting) keepFirstDetails() bool {
	before := len(f.env.ErrInfo)
	total := countArrayItems(f.env.ErrInfo, 0)
	fits := false
	for _, k := range []int{16, 4, 1} {
		cut := keepFirstItems(f.env.ErrInfo, k, 0)
		if len(cut) >= len(f.env.ErrInfo) {
			continue
		}
		f.env.ErrInfo = cut
		if fits = f.fits(); fits {
			break
		}
	}
	if len(f.env.ErrInfo) >= before {
		return false
	}
	f.env.Cut = append(f.env.Cut, CutField{Field: "err_info.details", Size: before, Total: total, Kept: countArrayItems(f.env.ErrInfo, 0)})
	return fits
}

// summariseErrInfo is step 3.
func (f *fitting) summariseErrInfo() bool {
	before := len(f.env.ErrInfo)
	f.env.ErrInfo = errInfoSummary(f.env.ErrInfo)
	f.env.Cut = append(f.env.Cut, CutField{Field: "err_info", Size: before})
	return f.fits()
}

// cutLists is step 4.
func (f *fitting) cutLists() bool {
	for _, l := range []struct {
		name string
		list *[]string
	}{{"failing_paths", &f.env.FailingPaths}, {"failing_keywords", &f.env.FailingKeywords}} {
		if n := len(*l.list); n > maxListedDiagnostics {
			f.env.Cut = append(f.env.Cut, CutField{Field: l.name, Size: listSize(*l.list), Total: n, Kept: maxListedDiagnostics})
			*l.list = (*l.list)[:maxListedDiagnostics]
			if f.fits() {
				return true
			}
		}
	}
	return false
}

// cutErrMsg is step 5.
func (f *fitting) cutErrMsg() bool {
	if len(f.env.ErrMsg) <= maxErrMsgKept {
		return false
	}
	f.env.Cut = append(f.env.Cut, CutField{Field: "errmsg", Size: len(f.env.ErrMsg)})
	f.env.ErrMsg = validString([]byte(f.env.ErrMsg[:maxErrMsgKept]))
	return f.fits()
}

// maxListedDiagnostics bounds failing_paths and failing_keywords when an
// envelope must be cut; maxErrMsgKept bounds errmsg then (bytes).
const (
	maxListedDiagnostics = 100
	maxErrMsgKept        = 1024
)

func listSize(l []string) int {
	n := 0
	for _, s := range l {
		n += len(s)
	}
	return n
}

// countTop counts the top-level elements of doc.
func countTop(doc bson.Raw) int {
	n := 0
	it := newElemIter(doc)
	for {
		if _, _, _, ok := it.next(); !ok {
			return n
		}
		n++
	}
}

// countArrayItems counts the elements of every array in doc, at any depth.
func countArrayItems(doc []byte, depth int) int {
	if depth > maxErrInfoDepth {
		return 0
	}
	n := 0
	it := newElemIter(doc)
	for {
		_, t, val, ok := it.next()
		if !ok {
			return n
		}
		switch t {
		case bson.TypeArray:
			n += countTop(val) + countArrayItems(val, depth+1)
		case bson.TypeEmbeddedDocument:
			n += countArrayItems(val, depth+1)
		}
	}
}

// keepFirstItems returns doc with every array, at any depth, cut to its
// first k elements.
func keepFirstItems(doc bson.Raw, k, depth int) bson.Raw {
	if depth > maxErrInfoDepth {
		return doc
	}
	out, _ := rebuild(doc, func(_ string, t bson.Type, val []byte) (bson.Type, []byte, bool) {
		switch t {
		case bson.TypeEmbeddedDocument:
			return t, keepFirstItems(val, k, depth+1), true
		case bson.TypeArray:
			i := 0
			arr, _ := rebuild(val, func(_ string, et bson.Type, ev []byte) (bson.Type, []byte, bool) {
				i++
				if i > k {
					return 0, nil, false
				}
				if et == bson.TypeEmbeddedDocument || et == bson.TypeArray {
					return et, keepFirstItems(ev, k, depth+2), true
				}
				return et, ev, true
			})
			return t, arr, true
		}
		return t, val, true
	})
	return out
}

// errInfoSummary replaces an oversized errInfo by a small document saying
// so, keeping failingDocumentId when it is small.
func errInfoSummary(errInfo bson.Raw) bson.Raw {
	d := bson.D{{Key: "writeguard_truncated", Value: true}, {Key: "size", Value: int64(len(errInfo))}}
	if v, err := errInfo.LookupErr("failingDocumentId"); err == nil && len(v.Value) <= 1024 {
		d = append(d, bson.E{Key: "failingDocumentId", Value: v})
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		return nil
	}
	return raw
}
