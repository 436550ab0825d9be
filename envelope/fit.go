package envelope

import (
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
// MaxBSONSize − EnvelopeHeadroom bytes. A larger one has its original
// truncated (see PrepareStored).
const MaxEnvelopeSize = MaxBSONSize - EnvelopeHeadroom

// maxDroppedNames bounds Envelope.OriginalDropped.
const maxDroppedNames = 100

// storedSize returns the size in bytes of env stored as a document (its
// $setOnInsert fields plus the operators' fields), or an error if env
// cannot be marshalled.
func storedSize(env Envelope) (int, error) {
	raw, err := bson.Marshal(InsertFields(env, ""))
	if err != nil {
		return 0, err
	}
	// fingerprint, attempts, last_seen, status, as stored.
	const operatorFields = 1 + len("fingerprint") + 1 + 4 + 64 + 1 +
		1 + len("attempts") + 1 + 4 +
		1 + len("last_seen") + 1 + 8 +
		1 + len("status") + 1 + 4 + len(StatusDiscarded) + 1
	return len(raw) + operatorFields, nil
}

// fitEnvelope makes env fit in limit bytes as stored, giving way in this
// order and only as far as needed, each step recorded in env.Cut:
//
//  1. err_info.consideredValue: the values errInfo repeats from the
//     document (consideredValue, consideredValues) are removed;
//  2. err_info.details: every array of errInfo is cut to its first 16,
//     then 4, then 1 items (the first failing items stay; Total and Kept
//     count the array items);
//  3. err_info: replaced by {writeguard_truncated: true, size,
//     failingDocumentId} (failing_keywords and failing_paths, derived
//     from the full errInfo, stay);
//  4. failing_paths, failing_keywords: cut to their first 100 entries;
//  5. errmsg: cut to its first 1 KiB;
//  6. original: cut to the top-level fields that fit (original_truncated,
//     original_size, original_dropped), only when it cannot fit alone.
//
// It never fails: at worst the original keeps no field.
func fitEnvelope(env Envelope, limit int) Envelope {
	f := &fitting{env: env, limit: limit}
	if f.fits() {
		return env
	}
	f.env.Cut = slices.Clone(env.Cut)
	if f.cutErrInfo() || f.cutLists() || f.cutErrMsg() {
		return f.env
	}
	f.truncateOriginal()
	return f.env
}

// fitting is an envelope being cut to fit limit bytes as stored.
type fitting struct {
	env   Envelope
	limit int
	size  int // env's stored size when last measured (0: cannot be marshalled)
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
	if len(f.env.ErrInfo) == 0 {
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

// truncateOriginal is step 6: the original keeps the top-level fields
// that fit beside the rest of the envelope.
func (f *fitting) truncateOriginal() {
	full := f.env.Original
	// Room for original_truncated, original_size, original_dropped (at
	// most maxDroppedNames names of at most maxDroppedNameLen bytes) and
	// the cut entry of the original.
	const reserve = 128 + maxDroppedNames*(maxDroppedNameLen+3+8)
	budget := f.limit - (f.size - len(full)) - reserve
	kept, dropped := truncateDocument(full, budget)
	total := len(dropped) + countTop(kept)
	if len(dropped) > maxDroppedNames {
		dropped = dropped[:maxDroppedNames]
	}
	for i, name := range dropped {
		if len(name) > maxDroppedNameLen {
			dropped[i] = validString([]byte(name[:maxDroppedNameLen]))
		}
	}
	f.env.Original = kept
	f.env.OriginalTruncated = true
	f.env.OriginalSize = len(full)
	f.env.OriginalDropped = dropped
	f.env.Cut = append(f.env.Cut, CutField{Field: "original", Size: len(full), Total: total, Kept: countTop(kept)})
	if size, err := storedSize(f.env); err == nil && size > f.limit {
		f.env.OriginalDropped = nil // cannot happen with the reserve above
	}
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

// maxDroppedNameLen bounds each name in Envelope.OriginalDropped, in bytes.
const maxDroppedNameLen = 256

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

// truncateDocument returns the document made of doc's top-level elements
// that fit in budget bytes (document framing included), taken greedily in
// document order, and the keys of the elements left out. A doc that is
// not valid BSON yields an empty document and a nil list.
func truncateDocument(doc bson.Raw, budget int) (bson.Raw, []string) {
	out := []byte{0, 0, 0, 0}
	var dropped []string
	it := newElemIter(doc)
	used := 5
	for {
		key, t, val, ok := it.next()
		if !ok {
			break
		}
		n := 1 + len(key) + 1 + len(val)
		if used+n > budget {
			dropped = append(dropped, validString(key))
			continue
		}
		used += n
		out = append(out, byte(t))
		out = append(out, key...)
		out = append(out, 0)
		out = append(out, val...)
	}
	return bson.Raw(finishContainer(out, 0)), dropped
}
