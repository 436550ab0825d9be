package envelope

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FileSink is a Sink that appends envelopes to a local file in JSON Lines
// form: one Envelope per line, a JSON object with the Envelope's json
// names, where original, err_info and document_id are canonical Extended
// JSON (MongoDB Extended JSON v2, canonical mode: every BSON type and
// value kept, {"$numberInt": "1"} and {"$numberLong": "1"} told apart).
// Extended JSON cannot carry everything BSON can: strings and keys are
// bytes to the server but must be UTF-8 in JSON (invalid sequences become
// U+FFFD), and a NaN's payload bits are lost. When the Extended JSON of a
// field would not give back its exact bytes, the line also holds them,
// base64, in original_bson, err_info_bson or document_id_bson (the BSON
// type byte, then the value's bytes), and ReadFile uses those: what it
// returns is always byte for byte what was Put (TestFileLineExactBytes).
// first_seen and last_seen are RFC 3339 with nanoseconds.
//
// It is meant as the fallback sink (writeguard.WithFallbackDeadLetter)
// for when the dead-letter collection cannot be reached, and as an export
// format. It does not merge recaptures (each Put appends a line). To
// replay a fallback file, load it with ReadFile and Put the envelopes into
// the dead-letter collection with a MongoSink (which merges recaptures by
// fingerprint and is idempotent), then run package replay as usual.
//
// Each Put writes all its lines with one write call to a file opened with
// O_APPEND, then fsyncs the file before returning nil, so a Put that
// returned nil survives a crash of the process or the machine. A crash
// during a Put can leave a last line cut short, which ReadFile reports.
// FileSink is safe for concurrent use; several processes appending to one
// file is safe on local file systems for Puts under the pipe-atomic size
// only, so give each process its own file.
//
// The file is created with mode 0600: it holds users' documents.
// Redaction options (WithRedact, WithRedactErrInfo) apply as for
// MongoSink; there is no size limit.
type FileSink struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	cfg    sinkConfig
	closed bool
}

var _ Sink = (*FileSink)(nil)

// NewFileSink opens (creating it if needed, mode 0600) the file at path
// for appending and returns a FileSink writing to it. Only the redaction
// options of opts apply. A nil option or a bad value is an error (the
// file is then not opened).
func NewFileSink(path string, opts ...SinkOption) (*FileSink, error) {
	cfg := newSinkConfig(opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("envelope: opening file sink: %w", err)
	}
	return &FileSink{f: f, path: path, cfg: cfg}, nil
}

// Path returns the file's path.
func (s *FileSink) Path() string { return s.path }

// ErrClosed is returned by FileSink.Put after Close.
var ErrClosed = errors.New("envelope: file sink is closed")

// Put appends one line per envelope and fsyncs the file. It returns an
// error if an envelope cannot be encoded (nothing is written then), if a
// redaction hook returns invalid BSON, if the write or the fsync fails
// (some lines may have been written), if ctx is already done, or
// ErrClosed after Close.
func (s *FileSink) Put(ctx context.Context, envs []Envelope) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(envs) == 0 {
		return nil
	}
	var buf bytes.Buffer
	for i := range envs {
		env, err := s.prepare(envs[i])
		if err != nil {
			return err
		}
		line, err := MarshalLine(env)
		if err != nil {
			return err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, err := s.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("envelope: file sink %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("envelope: file sink %s: fsync: %w", s.path, err)
	}
	return nil
}

func (s *FileSink) prepare(env Envelope) (Envelope, error) {
	if env.Status == "" {
		env.Status = StatusPending
	}
	// The same withholding, redaction and fingerprint as MongoSink.
	return protect(env, s.cfg)
}

// Close closes the file. Later Puts return ErrClosed; Close is idempotent.
func (s *FileSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.f.Close()
}

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
	// back (see FileSink).
	OriginalBSON    []byte `json:"original_bson,omitempty"`
	ErrInfoBSON     []byte `json:"err_info_bson,omitempty"`
	DocumentIDBSON  []byte `json:"document_id_bson,omitempty"`
	CallOptionsBSON []byte `json:"call_options_bson,omitempty"`
}

// MarshalLine returns env as one line of a FileSink file (without the
// newline): a JSON object whose original, err_info and document_id are
// canonical Extended JSON, plus their exact bytes where Extended JSON
// would change them (see FileSink). It fails if original or err_info is
// not valid BSON.
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

// UnmarshalLine decodes one line written by MarshalLine.
func UnmarshalLine(line []byte) (Envelope, error) {
	var l fileLine
	if err := json.Unmarshal(line, &l); err != nil {
		return Envelope{}, err
	}
	env := l.Envelope
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

// ReadFile reads a file written by FileSink and returns its envelopes in
// file order. Empty lines are skipped. On a line it cannot decode (a last
// line cut short by a crash during a Put, say) it returns the envelopes of
// the lines before it and an error naming the line number; lines after it
// are not read.
func ReadFile(path string) ([]Envelope, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	defer f.Close()
	return ReadLines(f)
}

// ReadLines is ReadFile over any reader (lines of any length).
func ReadLines(r io.Reader) ([]Envelope, error) {
	br := bufio.NewReaderSize(r, 64*1024)
	var out []Envelope
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			trimmed := bytes.TrimSpace(line)
			if len(trimmed) > 0 {
				env, derr := UnmarshalLine(trimmed)
				if derr != nil {
					if err == io.EOF && line[len(line)-1] != '\n' {
						derr = fmt.Errorf("%w (last line has no newline: cut short?)", derr)
					}
					return out, fmt.Errorf("envelope: line %d: %w", n, derr)
				}
				out = append(out, env)
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("envelope: line %d: %w", n, err)
		}
	}
}
