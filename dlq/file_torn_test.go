package dlq

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/writeguard/writeguard/envelope"
)

// failingWriter writes the first limit bytes it is given to f, then fails
// with err (ENOSPC: a disk that filled up part-way through a Put).
type failingWriter struct {
	f       *os.File
	limit   int
	err     error
	syncErr error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.limit < 0 || len(p) <= w.limit {
		return w.f.Write(p)
	}
	n, _ := w.f.Write(p[:w.limit])
	return n, w.err
}

func (w *failingWriter) Sync() error {
	if w.syncErr != nil {
		return w.syncErr
	}
	return w.f.Sync()
}

func envelopeN(t *testing.T, i int) envelope.Envelope {
	t.Helper()
	e := sampleEnvelope(t)
	e.BatchIndex = i
	return e
}

// TestFileSinkTornTailThenPuts: a Put whose write fails part-way (the disk
// fills up in the middle of its second line) confirms only the line
// written whole before it, and every later Put's envelopes come back from
// ReadFile, which reports the torn line and goes on. Before the change
// ReadFile stopped at the torn line and returned none of the later
// envelopes, which the later Puts had confirmed.
func TestFileSinkTornTailThenPuts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	s, err := NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, []envelope.Envelope{envelopeN(t, 0)}); err != nil {
		t.Fatal(err)
	}
	first, err := envelope.MarshalLine(envelopeN(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	// Two envelopes; the write stops in the middle of the second line.
	s.w = &failingWriter{f: s.f, limit: len(first) + 1 + 40, err: syscall.ENOSPC}
	errs := s.PutEach(ctx, []envelope.Envelope{envelopeN(t, 1), envelopeN(t, 2)})
	if errs[0] != nil {
		t.Errorf("envelope 1, written whole and fsynced: %v, want confirmed", errs[0])
	}
	if !errors.Is(errs[1], syscall.ENOSPC) {
		t.Errorf("envelope 2, cut short: %v, want ENOSPC", errs[1])
	}
	// The disk has room again.
	s.w = s.f
	for i := 3; i < 5; i++ {
		if err := s.Put(ctx, []envelope.Envelope{envelopeN(t, i)}); err != nil {
			t.Fatalf("Put %d after the torn write: %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	var le *envelope.LineError
	if !errors.As(err, &le) || le.Line != 3 || le.CutShort {
		t.Errorf("ReadFile error %v, want line 3 (the torn one) reported, not as the last line", err)
	}
	var idx []int
	for _, e := range got {
		idx = append(idx, e.BatchIndex)
	}
	if want := []int{0, 1, 3, 4}; !equalInts(idx, want) {
		t.Errorf("ReadFile returned batch indexes %v, want %v (every confirmed envelope)", idx, want)
	}

	// A torn tail left by a crash (no newline at the end) is ended by the
	// next open's first Put.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.Write(first[:30])
	_ = f.Close()
	s, err = NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, []envelope.Envelope{envelopeN(t, 5)}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	got, err = ReadFile(path)
	if n := strings.Count(err.Error(), "envelope: line"); n != 2 {
		t.Errorf("ReadFile error %v: %d broken lines reported, want 2", err, n)
	}
	if len(got) != 5 || got[4].BatchIndex != 5 {
		t.Errorf("after the crash's torn tail: %d envelopes read, want 5 ending with batch index 5", len(got))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != fs.FileMode(0o600) {
		t.Errorf("file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

// TestFileSinkFailedSync: a failed fsync confirms nothing of the Put.
func TestFileSinkFailedSync(t *testing.T) {
	ctx := context.Background()
	s, err := NewFileSink(filepath.Join(t.TempDir(), "dlq.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.w = &failingWriter{f: s.f, limit: -1, syncErr: syscall.EIO}
	for i, err := range s.PutEach(ctx, []envelope.Envelope{envelopeN(t, 0), envelopeN(t, 1)}) {
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("envelope %d after a failed fsync: %v, want EIO", i, err)
		}
	}
	if err := s.Put(ctx, []envelope.Envelope{envelopeN(t, 2)}); !errors.Is(err, syscall.EIO) {
		t.Errorf("Put after a failed fsync: %v, want EIO", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
