package envelope

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// fileLine is the JSON form of one Envelope: its json fields, plus the
// three BSON fields as canonical Extended JSON.
type fileLine struct {
	Envelope
	Original   json.RawMessage `json:"original"`
	ErrInfo    json.RawMessage `json:"err_info,omitempty"`
	DocumentID json.RawMessage `json:"document_id,omitempty"`
	// CallOptions is Envelope.CallOptions (format 2).
	CallOptions json.RawMessage `json:"call_options,omitempty"`
	// The exact bytes, when the Extended JSON above would not give them
	// back (see MarshalLine).
	OriginalBSON    []byte `json:"original_bson,omitempty"`
	ErrInfoBSON     []byte `json:"err_info_bson,omitempty"`
	DocumentIDBSON  []byte `json:"document_id_bson,omitempty"`
	CallOptionsBSON []byte `json:"call_options_bson,omitempty"`
}

// MarshalLine returns env as one line of the JSON-lines form (without the
// newline), as dlq.FileSink writes it: a JSON object with the Envelope's
// json names, where original, err_info, call_options and document_id are
// canonical Extended JSON (MongoDB Extended JSON v2, canonical mode: every
// BSON type and value kept, {"$numberInt": "1"} and {"$numberLong": "1"}
// told apart). Extended JSON cannot carry everything BSON can: strings
// and keys are bytes to the server but must be UTF-8 in JSON (invalid
// sequences become U+FFFD), and a NaN's payload bits are lost. When the
// Extended JSON of a field would not give back its exact bytes, the line
// also holds them, base64, in original_bson, err_info_bson,
// call_options_bson or document_id_bson (for document_id: the BSON type
// byte, then the value's bytes), and UnmarshalLine uses those: what it
// returns is always byte for byte what was marshalled
// (TestFileLineExactBytes). first_seen and last_seen are RFC 3339 with
// nanoseconds. It fails if original or err_info is not valid BSON.
func MarshalLine(env Envelope) ([]byte, error) {
	var l fileLine
	l.Envelope = env
	var err error
	if l.Original, l.OriginalBSON, err = docField(env.Original); err != nil {
		return nil, fmt.Errorf("envelope: original of fingerprint %s: %w", env.Fingerprint, err)
	}
	if len(env.ErrInfo) > 0 {
		if l.ErrInfo, l.ErrInfoBSON, err = docField(env.ErrInfo); err != nil {
			return nil, fmt.Errorf("envelope: err_info of fingerprint %s: %w", env.Fingerprint, err)
		}
	}
	if len(env.CallOptions) > 0 {
		if l.CallOptions, l.CallOptionsBSON, err = docField(env.CallOptions); err != nil {
			return nil, fmt.Errorf("envelope: call_options of fingerprint %s: %w", env.Fingerprint, err)
		}
	}
	if env.DocumentID.Type != 0 {
		if l.DocumentID, err = extJSONValue(env.DocumentID); err != nil {
			return nil, fmt.Errorf("envelope: document_id of fingerprint %s: %w", env.Fingerprint, err)
		}
		if back, err := valueFromExtJSON(l.DocumentID); err != nil || back.Type != env.DocumentID.Type || !bytes.Equal(back.Value, env.DocumentID.Value) {
			l.DocumentIDBSON = append([]byte{byte(env.DocumentID.Type)}, env.DocumentID.Value...)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&l); err != nil {
		return nil, fmt.Errorf("envelope: encoding fingerprint %s: %w", env.Fingerprint, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// docField returns a document's canonical Extended JSON and, when that
// does not give back the same bytes, the bytes themselves.
func docField(doc bson.Raw) (json.RawMessage, []byte, error) {
	js, err := extJSONDoc(doc)
	if err != nil || len(doc) == 0 {
		return js, nil, err
	}
	var back bson.Raw
	if err := bson.UnmarshalExtJSON(js, true, &back); err != nil || !bytes.Equal(back, doc) {
		return js, doc, nil
	}
	return js, nil, nil
}

// UnmarshalLine decodes one line written by MarshalLine. A line without
// an original is an error (ErrMissingOriginal).
func UnmarshalLine(line []byte) (Envelope, error) {
	var l fileLine
	if err := json.Unmarshal(line, &l); err != nil {
		return Envelope{}, err
	}
	env := l.Envelope
	if len(l.Original) == 0 && len(l.OriginalBSON) == 0 {
		return Envelope{}, ErrMissingOriginal // every line MarshalLine writes has one
	}
	var err error
	if env.Original, err = docFromLine(l.Original, l.OriginalBSON); err != nil {
		return Envelope{}, fmt.Errorf("original: %w", err)
	}
	if env.ErrInfo, err = docFromLine(l.ErrInfo, l.ErrInfoBSON); err != nil {
		return Envelope{}, fmt.Errorf("err_info: %w", err)
	}
	if env.CallOptions, err = docFromLine(l.CallOptions, l.CallOptionsBSON); err != nil {
		return Envelope{}, fmt.Errorf("call_options: %w", err)
	}
	switch {
	case len(l.DocumentIDBSON) > 0:
		v := bson.RawValue{Type: bson.Type(l.DocumentIDBSON[0]), Value: l.DocumentIDBSON[1:]}
		if err := v.Validate(); err != nil {
			return Envelope{}, fmt.Errorf("document_id_bson: %w", err)
		}
		env.DocumentID = v
	case len(l.DocumentID) > 0:
		v, err := valueFromExtJSON(l.DocumentID)
		if err != nil {
			return Envelope{}, fmt.Errorf("document_id: %w", err)
		}
		env.DocumentID = v
	}
	return env, nil
}

// docFromLine returns a document field of a line: its exact bytes when
// the line has them, otherwise its Extended JSON parsed; nil when absent.
func docFromLine(js json.RawMessage, raw []byte) (bson.Raw, error) {
	if len(raw) > 0 {
		if err := bson.Raw(raw).Validate(); err != nil {
			return nil, fmt.Errorf("exact bytes: %w", err)
		}
		return bson.Raw(raw), nil
	}
	if len(js) == 0 || bytes.Equal(js, []byte("null")) {
		return nil, nil
	}
	var doc bson.Raw
	if err := bson.UnmarshalExtJSON(js, true, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

func extJSONDoc(doc bson.Raw) ([]byte, error) {
	if len(doc) == 0 {
		return []byte("{}"), nil
	}
	if err := doc.Validate(); err != nil {
		return nil, err
	}
	return bson.MarshalExtJSON(doc, true, false)
}

// extJSONValue encodes one BSON value as canonical Extended JSON, by way
// of the document {"v": value}.
func extJSONValue(v bson.RawValue) ([]byte, error) {
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, true, false)
	if err != nil {
		return nil, err
	}
	var m struct {
		V json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m.V, nil
}

func valueFromExtJSON(b []byte) (bson.RawValue, error) {
	wrapped := make([]byte, 0, len(b)+6)
	wrapped = append(wrapped, `{"v":`...)
	wrapped = append(wrapped, b...)
	wrapped = append(wrapped, '}')
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON(wrapped, true, &raw); err != nil {
		return bson.RawValue{}, err
	}
	v, err := raw.LookupErr("v")
	if err != nil {
		return bson.RawValue{}, err
	}
	return v, nil
}

// MaxLineErrors is how many broken lines ReadLines (and dlq.ReadFile)
// report one by one; the rest are counted in one further error.
const MaxLineErrors = 100

// LineError is a line of the JSON-lines form (a dlq.FileSink file) that
// could not be decoded.
type LineError struct {
	// Line is the line's number, from 1.
	Line int
	// CutShort is true when it is the last line and has no newline (a
	// crash or a failed write during a Put).
	CutShort bool
	// Err is the decoding error.
	Err error
}

// Error says which line, and why.
func (e *LineError) Error() string {
	s := fmt.Sprintf("envelope: line %d: %v", e.Line, e.Err)
	if e.CutShort {
		s += " (last line has no newline: cut short?)"
	}
	return s
}

// Unwrap returns the decoding error.
func (e *LineError) Unwrap() error { return e.Err }

// ReadLines reads envelopes in the JSON-lines form (MarshalLine; a
// dlq.FileSink file) from r, lines of any length, and returns them in
// order. Empty lines are skipped. A line it cannot decode (a line cut
// short by a crash or a failed write during a Put, a hand-edited line) is
// skipped and reported, and reading goes on: it returns every envelope of
// the lines it could decode, and an error joining one *LineError per
// broken line (at most MaxLineErrors of them, then one error counting the
// rest), or nil when every line decoded. A read error of r ends the
// reading and is joined too (with the envelopes read until then).
func ReadLines(r io.Reader) ([]Envelope, error) {
	br := bufio.NewReaderSize(r, 64*1024)
	var out []Envelope
	var bad []error
	broken := 0
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			trimmed := bytes.TrimSpace(line)
			if len(trimmed) > 0 {
				env, derr := UnmarshalLine(trimmed)
				if derr != nil {
					broken++
					if len(bad) < MaxLineErrors {
						bad = append(bad, &LineError{Line: n, Err: derr, CutShort: err == io.EOF && line[len(line)-1] != '\n'})
					}
				} else {
					out = append(out, env)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("envelope: line %d: %w", n, err))
			break
		}
	}
	if broken > MaxLineErrors {
		bad = append(bad, fmt.Errorf("envelope: %d more lines could not be decoded", broken-MaxLineErrors))
	}
	return out, errors.Join(bad...)
}
