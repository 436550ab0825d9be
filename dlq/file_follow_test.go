package dlq

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/writeguard/writeguard/envelope"
)

// readAt returns the batch indexes of the envelopes ReadFile gives back
// from path, and the error it reports.
func readAt(t *testing.T, path string) ([]int, error) {
	t.Helper()
	envs, err := ReadFile(path)
	out := make([]int, len(envs))
	for i, e := range envs {
		out[i] = e.BatchIndex
	}
	return out, err
}

// TestFileSinkFollowsPath (issue 30 item 4): what a Put confirmed is
// readable at Path() after another process removed the file, rotated it
// (renamed it away; the next Put creates the file at the path), or cut
// it in the middle of a line (the next line is not glued onto the cut
// one). Before the change the sink kept writing into the removed or
// renamed file, and the line after a cut was unreadable.
func TestFileSinkFollowsPath(t *testing.T) {
	ctx := context.Background()
	put := func(t *testing.T, s *FileSink, i int) {
		t.Helper()
		if err := s.Put(ctx, []envelope.Envelope{envelopeN(t, i)}); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	t.Run("removed", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		s, err := NewFileSink(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		put(t, s, 0)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		put(t, s, 1)
		got, err := readAt(t, path)
		if err != nil || len(got) != 1 || got[0] != 1 || s.Reopened() != 1 {
			t.Errorf("after a removal: %v (%v), reopened %d; want [1], reopened once", got, err, s.Reopened())
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("recreated file: %v, %v; want mode 0600", fi, err)
		}
	})
	t.Run("rotated", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "dlq.jsonl")
		s, err := NewFileSink(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		put(t, s, 0)
		if err := os.Rename(path, path+".1"); err != nil { // logrotate's default (create)
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		put(t, s, 1)
		put(t, s, 2)
		got, err := readAt(t, path)
		if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 2 {
			t.Errorf("at the path after a rotation: %v (%v), want [1 2]", got, err)
		}
		old, err := readAt(t, path+".1")
		if err != nil || len(old) != 1 || old[0] != 0 {
			t.Errorf("rotated file: %v (%v), want [0]", old, err)
		}
	})
	t.Run("cut mid-line", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		s, err := NewFileSink(path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		put(t, s, 0)
		put(t, s, 1)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// Another process cuts the file in the middle of its second line.
		cut := fi.Size() - 40
		if tr, err := exec.LookPath("truncate"); err == nil {
			if out, err := exec.Command(tr, "-s", strconv.FormatInt(cut, 10), path).CombinedOutput(); err != nil {
				t.Fatalf("truncate: %v %s", err, out)
			}
		} else if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		put(t, s, 2)
		put(t, s, 3)
		got, err := readAt(t, path)
		if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 3 {
			t.Errorf("after a cut: %v, want [0 2 3] (line 1 cut and reported)", got)
		}
		if err == nil {
			t.Error("ReadFile did not report the cut line")
		}
	})
}
