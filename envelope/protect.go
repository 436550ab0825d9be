package envelope

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Values of Envelope.FingerprintScheme.
const (
	// SchemeCanonical: the SHA-256 of the canonical original, without a
	// writeguard-assigned _id (Fingerprint). Used when nothing was
	// withheld or redacted: the whole original is stored beside it, so
	// the hash tells a reader nothing the envelope does not.
	// Stored as an absent fingerprint_scheme.
	SchemeCanonical = "sha256"
	// SchemeStored: the SHA-256 of the canonical original as stored,
	// after withholding and redaction, with the _id kept even when
	// writeguard assigned it (StoredFingerprint). Used when something was
	// hidden and no key is configured: the hash depends on nothing the
	// envelope does not show, so guessing a hidden value confirms
	// nothing. Its cost to dedupe: two payloads that differ only in hidden
	// values (and share their _id) are one envelope, and a recapture of a
	// payload whose _id writeguard assigned is a new envelope.
	SchemeStored = "sha256-stored"
	// SchemeKeyed: HMAC-SHA256, keyed with Protection.FingerprintKey
	// (dlq.WithFingerprintKey), of the canonical unredacted original
	// (Fingerprint's form). Used when
	// something was hidden and a key is configured: dedupe is exact, as
	// for SchemeCanonical, and without the key a guess cannot be checked.
	// The key lives with the application (its secret store), never in the
	// dead-letter collection; changing it changes these fingerprints, so
	// recaptures after a key change make new envelopes.
	SchemeKeyed = "hmac-sha256"
)

// encryptOperator is the operatorName of the $jsonSchema encrypt keyword
// in errInfo (mongodb/mongo src/mongo/db/matcher/doc_validation/
// doc_validation_error.cpp; corpus entry
// encrypt-bsontype-string-not-encrypted).
const encryptOperator = "encrypt"

// binarySubtypeEncrypted is the BSON binary subtype of an encrypted value
// (BSON spec: subtype 6, "Encrypted BSON value").
const binarySubtypeEncrypted = 6

// EncryptedPaths returns the dotted paths whose errInfo node has
// operatorName "encrypt": the fields the server refused because the
// collection's schema says they must be encrypted. Non-nil, possibly empty.
func EncryptedPaths(errInfo bson.Raw) []string {
	w := errInfoWalker{wantOpPaths: encryptOperator}
	w.run(errInfo)
	if w.opPaths.list == nil {
		return []string{}
	}
	return w.opPaths.list
}

// EncryptPaths returns the dotted paths a $jsonSchema validator ({$jsonSchema:
// schema} or the schema itself) marks with encrypt, following properties
// (not items, patternProperties or combinators, whose paths are not
// fixed). For Protection.EncryptedPaths (dlq.WithEncryptedPaths).
func EncryptPaths(validator bson.Raw) []string {
	schema := validator
	if s, ok := validator.Lookup("$jsonSchema").DocumentOK(); ok {
		schema = s
	}
	var out []string
	var walk func(s bson.Raw, path string, depth int)
	walk = func(s bson.Raw, path string, depth int) {
		if depth > maxErrInfoDepth {
			return
		}
		if _, err := s.LookupErr("encrypt"); err == nil && path != "" {
			out = append(out, path)
			return
		}
		props, ok := s.Lookup("properties").DocumentOK()
		if !ok {
			return
		}
		elems, _ := props.Elements()
		for _, e := range elems {
			if sub, ok := e.Value().DocumentOK(); ok {
				walk(sub, joinPath(path, e.Key()), depth+1)
			}
		}
	}
	walk(schema, "", 0)
	return out
}

// Protection is what Protect applies to an envelope before a sink stores
// it: the redaction hooks, the fingerprint key and the encrypted paths.
// Package dlq builds it from its sink options (dlq.WithRedact,
// dlq.WithRedactErrInfo, dlq.WithFingerprintKey, dlq.WithEncryptedPaths,
// dlq.WithPlaintextEncryptedFields), which check the values; the zero
// value withholds the fields errInfo names under encrypt and hides
// nothing else.
type Protection struct {
	// Redact rewrites the original before it is stored (nil: kept). It
	// receives a copy of the original and returns the document to store,
	// which must be valid BSON (Protect fails otherwise); nil stores an
	// empty document. An original it changes is marked OriginalRedacted
	// and fingerprinted with a scheme that hides what was removed.
	Redact func(original bson.Raw) bson.Raw
	// RedactErrInfo rewrites errInfo before it is stored (nil: kept);
	// same rules as Redact. FailingKeywords and FailingPaths, computed
	// from the full errInfo, are kept.
	RedactErrInfo func(errInfo bson.Raw) bson.Raw
	// FingerprintKey is the key of the SchemeKeyed fingerprint of an
	// envelope with withheld or redacted fields (nil: SchemeStored).
	FingerprintKey []byte
	// EncryptedPaths maps a target namespace ("db.coll") to the dotted
	// paths its schema marks encrypt (EncryptPaths): withheld from every
	// envelope of that namespace even when errInfo does not name them.
	EncryptedPaths map[string][]string
	// Plaintext turns withholding off: the fields the server refused for
	// not being encrypted are stored like the rest of the original.
	Plaintext bool
}

// Protect applies, before an envelope is stored by either sink of package
// dlq: the defaults (SchemaVersion, attempts at least 1, FailingKeywords
// and FailingPaths from errInfo), the withholding of fields that had to
// be encrypted, the redaction hooks, and the fingerprint of the scheme
// that hides what was hidden (see the Scheme* constants). It returns an
// error naming the fingerprint when a redaction hook returns invalid
// BSON.
func Protect(env Envelope, p Protection) (Envelope, error) {
	if env.SchemaVersion == 0 {
		env.SchemaVersion = SchemaVersion
	}
	if env.Attempts < 1 {
		env.Attempts = 1
	}
	if env.FailingKeywords == nil {
		env.FailingKeywords = FailingKeywords(env.ErrInfo)
	}
	if env.FailingPaths == nil {
		env.FailingPaths = FailingPaths(env.ErrInfo)
	}
	plain := env.Original
	hidden := false
	if !p.Plaintext {
		env = withhold(env, p.EncryptedPaths[env.Namespace])
		hidden = len(env.Withheld) > 0
	}
	if p.Redact != nil {
		red, err := applyRedact(p.Redact, env.Original)
		if err != nil {
			return env, fmt.Errorf("envelope: redaction hook for fingerprint %s: %w", env.Fingerprint, err)
		}
		if !bytes.Equal(red, env.Original) {
			env.Original, env.OriginalRedacted = red, true
			hidden = true
		}
	}
	if p.RedactErrInfo != nil && len(env.ErrInfo) > 0 {
		red, err := applyRedact(p.RedactErrInfo, env.ErrInfo)
		if err != nil {
			return env, fmt.Errorf("envelope: errInfo redaction hook for fingerprint %s: %w", env.Fingerprint, err)
		}
		env.ErrInfo = red
	}
	switch {
	case !hidden:
		// SchemeCanonical (an empty scheme means it).
		if env.Fingerprint == "" {
			env.Fingerprint = Fingerprint(plain, env.IDAssigned)
		}
	case p.FingerprintKey != nil:
		env.Fingerprint, env.FingerprintScheme = KeyedFingerprint(p.FingerprintKey, plain, env.IDAssigned), SchemeKeyed
	default:
		env.Fingerprint, env.FingerprintScheme = StoredFingerprint(env.Original), SchemeStored
	}
	return env, nil
}

func applyRedact(f func(bson.Raw) bson.Raw, doc bson.Raw) (bson.Raw, error) {
	in := append(bson.Raw(nil), doc...) // the hook may not keep or change ours
	out := f(in)
	if out == nil {
		return bson.Raw{5, 0, 0, 0, 0}, nil
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("returned invalid BSON: %w", err)
	}
	return out, nil
}

// StoredFingerprint is the SchemeStored fingerprint of an original as
// stored: the lowercase hex SHA-256 of its canonical form (as in
// Fingerprint), every _id kept.
func StoredFingerprint(stored bson.Raw) string { return Fingerprint(stored, false) }

// KeyedFingerprint is the SchemeKeyed fingerprint: the lowercase hex
// HMAC-SHA256 under key of original's canonical form (Fingerprint's, with
// idAssigned as there).
func KeyedFingerprint(key []byte, original bson.Raw, idAssigned bool) string {
	mac := hmac.New(sha256.New, key)
	canon, ok := appendCanonicalDoc(nil, original, idAssigned, 1)
	if !ok || len(canon) == 0 {
		canon = original
	}
	mac.Write(canon)
	return hex.EncodeToString(mac.Sum(nil))
}

// withhold removes from env.Original the fields errInfo names under the
// encrypt operator and the configured paths of its namespace, unless the
// stored value is already encrypted (binary subtype 6), and records them
// in env.Withheld. When anything is withheld, errInfo's consideredValue
// and consideredValues (which can repeat the value) are removed too.
// When errInfo cannot name such fields, WithheldNote says on what basis
// the fields were (or were not) withheld.
func withhold(env Envelope, configured []string) Envelope {
	fromErrInfo := EncryptedPaths(env.ErrInfo)
	var cands []WithheldField
	for _, p := range fromErrInfo {
		cands = append(cands, WithheldField{Path: p, Reason: "encrypt"})
	}
	for _, p := range configured {
		if !slices.Contains(fromErrInfo, p) {
			cands = append(cands, WithheldField{Path: p, Reason: "schema encrypt"})
		}
	}
	if errInfoUnreadable(env.ErrInfo) {
		switch {
		case len(configured) > 0:
			env.WithheldNote = "errInfo names no failing field (absent or cut): withheld the paths configured as encrypt for " + env.Namespace
		case env.Code == 121:
			env.WithheldNote = "errInfo names no failing field (absent or cut) and no encrypt paths are configured for " + env.Namespace +
				" (dlq.WithEncryptedPaths): nothing withheld"
		}
	}
	if len(cands) == 0 || len(env.Original) == 0 {
		return env
	}
	orig := env.Original
	var got []WithheldField
	for _, c := range cands {
		var removed []string
		orig, removed = withholdPath(orig, env.Kind, c.Path)
		for _, r := range removed {
			got = append(got, WithheldField{Path: r, Reason: c.Reason})
		}
	}
	if len(got) == 0 {
		return env
	}
	env.Original = orig
	env.Withheld = append(env.Withheld, got...)
	env.ErrInfo = dropKeys(env.ErrInfo, isConsideredValueKey, 0)
	return env
}

// errInfoUnreadable reports whether errInfo names no failing field: absent,
// without details, or cut (by the server or by this package).
func errInfoUnreadable(errInfo bson.Raw) bool {
	kw := FailingKeywords(errInfo)
	return len(kw) == 1 && kw[0] == unknownKeyword
}

func isConsideredValueKey(k string) bool { return k == "consideredValue" || k == "consideredValues" }

// dropKeys returns doc without the elements, at any depth, whose key drop
// matches (the rest byte for byte).
func dropKeys(doc bson.Raw, drop func(string) bool, depth int) bson.Raw {
	if len(doc) == 0 || depth > maxErrInfoDepth {
		return doc
	}
	out, _ := rebuild(doc, func(key string, t bson.Type, val []byte) (bson.Type, []byte, bool) {
		if drop(key) {
			return 0, nil, false
		}
		switch t {
		case bson.TypeEmbeddedDocument, bson.TypeArray:
			return t, dropKeys(val, drop, depth+1), true
		}
		return t, val, true
	})
	return out
}

// rebuild copies doc (a document or array) element by element through f,
// which returns the element's new type and value, or false to leave it
// out. Array keys are renumbered. ok is false for malformed input (doc is
// then returned as it was).
func rebuild(doc bson.Raw, f func(key string, t bson.Type, val []byte) (bson.Type, []byte, bool)) (bson.Raw, bool) {
	out := make([]byte, 4, len(doc))
	it := newElemIter(doc)
	for {
		key, t, val, more := it.next()
		if !more {
			break
		}
		nt, nv, keep := f(string(key), t, val)
		if !keep {
			continue
		}
		out = append(out, byte(nt))
		out = append(out, key...)
		out = append(out, 0)
		out = append(out, nv...)
	}
	if it.bad {
		return doc, false
	}
	return bson.Raw(finishContainer(out, 0)), true
}

// withholdPath removes path from an original of the given kind and
// returns it with the paths (in the original) it removed. For an insert
// (or an envelope of unknown kind whose original has an _id) the path is
// the document's; for a model, it is looked for in the replacement, in
// the operator documents of an update ($set: {path: ...}, {"a.b": ...}
// under a path "a"), the whole update when it is a pipeline, and the
// filter's top-level keys on the path.
func withholdPath(orig bson.Raw, kind, path string) (bson.Raw, []string) {
	switch kind {
	case KindUpdateOne, KindUpdateMany, KindReplaceOne, KindDeleteOne, KindDeleteMany:
	default:
		out, removed := removePath(orig, strings.Split(path, "."), "", true)
		return out, removed
	}
	var removed []string
	out, _ := rebuild(orig, func(key string, t bson.Type, val []byte) (bson.Type, []byte, bool) {
		switch {
		case key == modelReplacement && t == bson.TypeEmbeddedDocument:
			nv, r := removePath(val, strings.Split(path, "."), modelReplacement, false)
			removed = append(removed, r...)
			return t, nv, true
		case key == modelUpdate && t == bson.TypeArray:
			removed = append(removed, modelUpdate)
			return 0, nil, false
		case key == modelUpdate && t == bson.TypeEmbeddedDocument:
			nv, _ := rebuild(val, func(op string, ot bson.Type, ov []byte) (bson.Type, []byte, bool) {
				if ot != bson.TypeEmbeddedDocument {
					return ot, ov, true
				}
				nov, r := dropOnPath(ov, path, modelUpdate+"."+op)
				removed = append(removed, r...)
				return ot, nov, true
			})
			return t, nv, true
		case key == modelFilter && t == bson.TypeEmbeddedDocument:
			nv, r := dropOnPath(val, path, modelFilter)
			removed = append(removed, r...)
			return t, nv, true
		}
		return t, val, true
	})
	return out, removed
}

// dropOnPath removes the top-level keys of doc that are path, lie on it
// ("a" for "a.b") or below it ("a.b.c" for "a.b").
func dropOnPath(doc []byte, path, prefix string) (bson.Raw, []string) {
	var removed []string
	out, _ := rebuild(doc, func(k string, t bson.Type, v []byte) (bson.Type, []byte, bool) {
		if k == path || strings.HasPrefix(k, path+".") || strings.HasPrefix(path, k+".") {
			removed = append(removed, prefix+"."+k)
			return 0, nil, false
		}
		return t, v, true
	})
	return out, removed
}

// removePath removes the element at the dotted path from doc. An array on
// the way makes the array's field the withheld one (the path does not say
// which element). A value already encrypted (binary subtype 6) is kept
// when checkEncrypted is set.
func removePath(doc []byte, path []string, prefix string, checkEncrypted bool) (bson.Raw, []string) {
	var removed []string
	out, _ := rebuild(doc, func(k string, t bson.Type, v []byte) (bson.Type, []byte, bool) {
		if k != path[0] {
			return t, v, true
		}
		full := k
		if prefix != "" {
			full = prefix + "." + k
		}
		switch {
		case len(path) == 1 || t == bson.TypeArray:
			if checkEncrypted && len(path) == 1 && t == bson.TypeBinary && len(v) > 4 && v[4] == binarySubtypeEncrypted {
				return t, v, true
			}
			removed = append(removed, full)
			return 0, nil, false
		case t == bson.TypeEmbeddedDocument:
			nv, r := removePath(v, path[1:], full, checkEncrypted)
			removed = append(removed, r...)
			return t, nv, true
		}
		return t, v, true
	})
	return out, removed
}

// ErrWithheld is wrapped by the errors of MissingWithheld.
var ErrWithheld = errors.New("envelope: fields withheld")

// MissingWithheld returns an error wrapping ErrWithheld that names the
// withheld paths of env that doc (the complete original a caller
// supplies for a replay) does not hold; nil when it holds them all.
func MissingWithheld(env *Envelope, doc bson.Raw) error {
	var missing []string
	for _, w := range env.Withheld {
		if _, err := doc.LookupErr(strings.Split(w.Path, ".")...); err != nil {
			missing = append(missing, w.Path)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the supplied original lacks %s", ErrWithheld, strings.Join(missing, ", "))
	}
	return nil
}
