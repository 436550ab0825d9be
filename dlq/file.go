package dlq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/writeguard/writeguard/envelope"
)

// FileSink is an envelope.Sink that appends envelopes to a local file in
// the JSON-lines form (envelope.MarshalLine): one envelope per line, its
// original, errInfo and document_id as canonical Extended JSON plus their
// exact bytes where Extended JSON would change them, so that what ReadFile
// returns is always byte for byte what was Put (TestFileSinkExactBytes).
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
// goes on (TestFileSinkTornTailThenPuts).
//
// The sink follows its path: before each write it checks that the file
// at Path() is still the one it holds (os.Stat of the path and of the
// open file, os.SameFile) and reopens the path if not (the file was
// removed, or rotated: renamed away and replaced), and it checks the
// file's last byte whoever wrote it (another process cutting the file
// mid-line), ending a torn line first. After the fsync it checks the
// path again and, if the file was replaced during the Put, writes the
// lines once more to the new file (they are then in both; loading them
// into a MongoSink merges them by fingerprint, counting the attempts
// twice). So what a Put confirmed is readable at Path() when the Put
// returns (TestFileSinkFollowsPath). The price: two stat calls and a
// one-byte read per Put. FileSink is safe for concurrent
// use; several processes appending to one file is safe on local file
// systems for Puts under the pipe-atomic size only, so give each process
// its own file.
//
// The file is created with mode 0600: it holds users' documents (an
// existing file keeps its mode). Redaction options (WithRedact,
// WithRedactErrInfo) apply as for MongoSink; there is no size limit.
type FileSink struct {
	mu       sync.Mutex
	f        *os.File
	w        writeSyncer // f, or a test's wrapper around it
	path     string
	cfg      sinkConfig
	closed   bool
	reopened int // Reopened
}

// writeSyncer is the part of *os.File a FileSink writes through.
type writeSyncer interface {
	Write([]byte) (int, error)
	Sync() error
}

var (
	_ envelope.Sink        = (*FileSink)(nil)
	_ envelope.PartialSink = (*FileSink)(nil)
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
		return nil, fmt.Errorf("dlq: opening file sink: %w", err)
	}
	return &FileSink{f: f, w: f, path: path, cfg: cfg}, nil
}

// Path returns the file's path.
func (s *FileSink) Path() string { return s.path }

// ErrClosed is returned by FileSink.Put after Close.
var ErrClosed = errors.New("dlq: file sink is closed")

// Put appends one line per envelope and fsyncs the file. It returns nil
// only when every line was written and fsynced. It returns an error if an
// envelope cannot be encoded (nothing is written then), if a redaction
// hook returns invalid BSON (nothing is written), if the write or the
// fsync fails (some lines may have been written: PutEach says which are
// confirmed), if ctx is already done, or ErrClosed after Close.
func (s *FileSink) Put(ctx context.Context, envs []envelope.Envelope) error {
	errs := s.put(ctx, envs, true)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// PutEach is Put reporting per envelope (see envelope.PartialSink): an envelope
// that cannot be encoded fails alone (the others are written); after a
// write that failed part-way, the envelopes whose lines were written
// whole are confirmed if the fsync that follows succeeds; a failed fsync
// fails every envelope of the call.
func (s *FileSink) PutEach(ctx context.Context, envs []envelope.Envelope) []error {
	return s.put(ctx, envs, false)
}

// put writes envs; all: one envelope that cannot be encoded fails the
// call before anything is written (Put).
func (s *FileSink) put(ctx context.Context, envs []envelope.Envelope, all bool) []error {
	errs := make([]error, len(envs))
	if err := ctx.Err(); err != nil {
		return failRest(errs, err)
	}
	if len(envs) == 0 {
		return errs
	}
	data, ends, err := s.encode(envs, errs, all)
	if err != nil {
		return failRest(errs, err)
	}
	if len(data) == 0 {
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return failRest(errs, ErrClosed)
	}
	return s.write(data, ends, errs)
}

// failRest sets err for every envelope of errs that has no error yet.
func failRest(errs []error, err error) []error {
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// encode returns the lines of envs and the end offset of each in them (-1
// for an envelope that cannot be encoded, whose error it sets in errs).
// all: the first such envelope's error is returned instead.
func (s *FileSink) encode(envs []envelope.Envelope, errs []error, all bool) ([]byte, []int, error) {
	var buf bytes.Buffer
	ends := make([]int, len(envs))
	for i := range envs {
		ends[i] = -1
		env, err := s.prepare(envs[i])
		var line []byte
		if err == nil {
			line, err = envelope.MarshalLine(env)
		}
		if err != nil {
			if all {
				return nil, nil, err
			}
			errs[i] = err
			continue
		}
		buf.Write(line)
		buf.WriteByte('\n')
		ends[i] = buf.Len()
	}
	return buf.Bytes(), ends, nil
}

// write appends data (lines ending at ends) with one write call, then
// fsyncs, and returns errs with the error of every envelope whose line
// is not confirmed. Before writing it makes sure that the file it holds
// is the one at its path and that it ends with a complete line
// (follow); after the fsync it checks the path again, and writes the
// lines once more into the file found there if the file was replaced
// meanwhile (a rotation between the check and the write), so that what
// it confirms is at Path(). s.mu is held.
func (s *FileSink) write(data []byte, ends []int, errs []error) []error {
	for try := 0; ; try++ {
		if err := s.follow(); err != nil {
			return failRest(errs, err)
		}
		n, werr := s.appendLines(data)
		if werr != nil {
			werr = fmt.Errorf("dlq: file sink %s: %w", s.path, werr)
		}
		if serr := s.w.Sync(); serr != nil {
			return failRest(errs, fmt.Errorf("dlq: file sink %s: fsync: %w", s.path, serr))
		}
		if werr != nil {
			for i, end := range ends {
				if end >= 0 && end > n {
					errs[i] = werr
				}
			}
			return errs
		}
		if s.atPath() || try > 0 {
			return errs
		}
	}
}

// appendLines writes data with one write call, after a newline when the
// file ends in a torn line, and returns how many bytes of data were
// written.
func (s *FileSink) appendLines(data []byte) (int, error) {
	prefix := 0
	if !s.endsWithNewline() {
		// A torn tail, whoever wrote it (a crash, a failed write,
		// another process cutting the file): end that line, so that
		// ours starts on a line of its own.
		data = append([]byte{'\n'}, data...)
		prefix = 1
	}
	n, err := s.w.Write(data)
	return n - prefix, err
}

// atPath reports whether the file at s.path is the one s holds
// (os.SameFile of os.Stat(path) and the open file's Stat).
func (s *FileSink) atPath() bool {
	held, err := s.f.Stat()
	if err != nil {
		return false
	}
	cur, err := os.Stat(s.path)
	return err == nil && os.SameFile(held, cur)
}

// follow reopens s.path (creating it, mode 0600) when the file there is
// not the one s holds: removed, or renamed away by a rotation and
// replaced. Lines a Put confirmed before stay where they were written
// (the rotated file); later ones go to the path. s.mu is held.
func (s *FileSink) follow() error {
	if s.atPath() {
		return nil
	}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("dlq: file sink %s: the file was removed or replaced, and reopening it failed: %w", s.path, err)
	}
	old := s.f
	if s.w == writeSyncer(old) {
		s.w = f
	}
	s.f = f
	s.reopened++
	_ = old.Close() // its confirmed lines were fsynced
	return nil
}

// Reopened returns how many times the sink reopened its path because
// the file there was not the one it held (removed or rotated).
func (s *FileSink) Reopened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reopened
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

func (s *FileSink) prepare(env envelope.Envelope) (envelope.Envelope, error) {
	if env.Status == "" {
		env.Status = envelope.StatusPending
	}
	// The same withholding, redaction and fingerprint as MongoSink.
	return envelope.Protect(env, s.cfg.protection)
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

// ReadFile reads a file written by FileSink and returns its envelopes in
// file order. Empty lines are skipped. A line it cannot decode (a line cut
// short by a crash or a failed write during a Put, a hand-edited line) is
// skipped and reported, and reading goes on: it returns every envelope of
// the lines it could decode, and an error joining one *envelope.LineError
// per broken line (at most envelope.MaxLineErrors of them, then one error
// counting the rest), or nil when every line decoded (envelope.ReadLines
// over the file). A file that cannot be opened or read is an error too
// (with the envelopes read until then).
func ReadFile(path string) ([]envelope.Envelope, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	defer f.Close()
	return envelope.ReadLines(f)
}
