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
// O_APPEND, then fsyncs the file, and confirms an envelope (returns nil,
// or a nil entry of PutEach) only when its whole line was written and the
// fsync that followed succeeded: what a Put confirmed survives a crash of
// the process or the machine and ReadFile gives it back. A write that
// fails part-way (disk full) or a crash during a Put can leave a last
// line cut short (a torn tail); the next Put, and NewFileSink on a file
// whose last byte is not a newline, first ends that line with a newline,
// so that later lines stay whole, and ReadFile reports the torn line and
// goes on (TestFileSinkTornTailThenPuts). FileSink is safe for concurrent
// use; several processes appending to one file is safe on local file
// systems for Puts under the pipe-atomic size only, so give each process
// its own file.
//
// The file is created with mode 0600: it holds users' documents (an
// existing file keeps its mode). Redaction options (WithRedact,
// WithRedactErrInfo) apply as for MongoSink; there is no size limit.
type FileSink struct {
	mu   sync.Mutex
	f    *os.File
	w    writeSyncer // f, or a test's wrapper around it
	path string
	cfg  sinkConfig
	// checkTail: the file may end in a torn line (at open, or after a
	// failed write or fsync); the next write checks its last byte first.
	checkTail bool
	closed    bool
}

// writeSyncer is the part of *os.File a FileSink writes through.
type writeSyncer interface {
	Write([]byte) (int, error)
	Sync() error
}

var (
	_ Sink        = (*FileSink)(nil)
	_ PartialSink = (*FileSink)(nil)
)

// NewFileSink opens (creating it if needed, mode 0600) the file at path
// for appending and returns a FileSink writing to it. Only the redaction
// options of opts apply. A nil option or a bad value is an error (the
// file is then not opened). A file whose last line was cut short (a torn
// tail) is accepted: the first Put ends that line before writing.
func NewFileSink(path string, opts ...SinkOption) (*FileSink, error) {
	cfg := newSinkConfig(opts)
	if err := cfg.err(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("envelope: opening file sink: %w", err)
	}
	return &FileSink{f: f, w: f, path: path, cfg: cfg, checkTail: true}, nil
}

// Path returns the file's path.
func (s *FileSink) Path() string { return s.path }

// ErrClosed is returned by FileSink.Put after Close.
var ErrClosed = errors.New("envelope: file sink is closed")

// Put appends one line per envelope and fsyncs the file. It returns nil
// only when every line was written and fsynced. It returns an error if an
// envelope cannot be encoded (nothing is written then), if a redaction
// hook returns invalid BSON (nothing is written), if the write or the
// fsync fails (some lines may have been written: PutEach says which are
// confirmed), if ctx is already done, or ErrClosed after Close.
func (s *FileSink) Put(ctx context.Context, envs []Envelope) error {
	errs := s.put(ctx, envs, true)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// PutEach is Put reporting per envelope (see PartialSink): an envelope
// that cannot be encoded fails alone (the others are written); after a
// write that failed part-way, the envelopes whose lines were written
// whole are confirmed if the fsync that follows succeeds; a failed fsync
// fails every envelope of the call.
func (s *FileSink) PutEach(ctx context.Context, envs []Envelope) []error {
	return s.put(ctx, envs, false)
}

// put writes envs; all: one envelope that cannot be encoded fails the
// call before anything is written (Put).
func (s *FileSink) put(ctx context.Context, envs []Envelope, all bool) []error {
	errs := make([]error, len(envs))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if len(envs) == 0 {
		return errs
	}
	var buf bytes.Buffer
	ends := make([]int, len(envs)) // end offset of each line in buf; -1: not written
	for i := range envs {
		ends[i] = -1
		env, err := s.prepare(envs[i])
		var line []byte
		if err == nil {
			line, err = MarshalLine(env)
		}
		if err != nil {
			if all {
				return fail(err)
			}
			errs[i] = err
			continue
		}
		buf.Write(line)
		buf.WriteByte('\n')
		ends[i] = buf.Len()
	}
	if buf.Len() == 0 {
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fail(ErrClosed)
	}
	data := buf.Bytes()
	prefix := 0
	if s.checkTail && !s.endsWithNewline() {
		// Torn tail: end that line, so that ours starts on a line of its own.
		data = append([]byte{'\n'}, data...)
		prefix = 1
	}
	n, werr := s.w.Write(data)
	n -= prefix
	if werr != nil {
		s.checkTail = true
		werr = fmt.Errorf("envelope: file sink %s: %w", s.path, werr)
	}
	if serr := s.w.Sync(); serr != nil {
		s.checkTail = true
		return fail(fmt.Errorf("envelope: file sink %s: fsync: %w", s.path, serr))
	}
	if werr == nil {
		s.checkTail = false
		return errs
	}
	for i, end := range ends {
		if end >= 0 && end > n {
			errs[i] = werr
		}
	}
	return errs
}

// endsWithNewline reports whether the file is empty or ends with a
// newline; false when that cannot be read (a newline too many is an empty
// line, which ReadFile skips).
func (s *FileSink) endsWithNewline() bool {
	fi, err := s.f.Stat()
	if err != nil {
		return false
	}
	if fi.Size() == 0 {
		return true
	}
	var b [1]byte
	if _, err := s.f.ReadAt(b[:], fi.Size()-1); err != nil {
		return false
	}
	return b[0] == '\n'
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

// ReadFile reads a file written by FileSink and returns its envelopes in
// file order. Empty lines are skipped. A line it cannot decode (a line cut
// short by a crash or a failed write during a Put, a hand-edited line) is
// skipped and reported, and reading goes on: it returns every envelope of
// the lines it could decode, and an error joining one *LineError per
// broken line (at most MaxLineErrors of them, then one error counting the
// rest), or nil when every line decoded. A file that cannot be opened or
// read is an error too (with the envelopes read until then).
func ReadFile(path string) ([]Envelope, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	defer f.Close()
	return ReadLines(f)
}

// MaxLineErrors is how many broken lines ReadFile and ReadLines report one
// by one; the rest are counted in one further error.
const MaxLineErrors = 100

// LineError is a line of a FileSink file that could not be decoded.
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

// ReadLines is ReadFile over any reader (lines of any length).
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
