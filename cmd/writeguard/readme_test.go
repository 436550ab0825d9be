package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the captured sessions of README.md and ../../README.md from the command's output")

// The captured sessions: a fenced block right after a line
// "<!-- captured: session -->" holds commands ("$ writeguard ARGS") each
// followed by what it prints on stdout. TestReadmeSessions runs them in
// order, in one data directory, and compares.
const sessionMarker = "<!-- captured: session -->"

// Paths the sessions name as a reader at the repository root would, and
// what the test, which runs in cmd/writeguard, uses instead.
const (
	readmeDataDir  = "./wg-data"
	readmeRootPath = "cmd/writeguard/"
)

// volatile matches what changes from run to run in a deterministic
// session (--workers 1, a fixed seed): timestamps, durations, the JSON
// timings. Both sides are compared with these masked.
var volatile = []struct {
	re   *regexp.Regexp
	mask string
}{
	{regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z`), "<time>"},
	{regexp.MustCompile(`"(elapsed_seconds|write_seconds)": [0-9.e+-]+`), `"$1": <n>`},
	{regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+(\.\d+)?(ns|µs|us|ms|s)\b`), "<dur>"},
	// MongoSink checks its indexes at most every 5 s
	// (dlq.WithIndexCheckInterval): how many listIndexes a run sends
	// depends on how long it takes, and so does the commands' total.
	{regexp.MustCompile(`server commands( +)\d+ = [0-9.]+ per row \(([^)]*)listIndexes \d+\)`), "server commands$1<n> ($2listIndexes <n>)"},
	{regexp.MustCompile(`"listIndexes": \d+`), `"listIndexes": <n>`},
}

func maskVolatile(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.mask)
	}
	return s
}

// session is one captured block: its commands and their recorded output.
type session struct {
	start, end int // lines of the block's body: [start, end)
	cmds       []sessionCmd
}

type sessionCmd struct {
	line   string // as written, after "$ "
	output string // recorded stdout (and "echo $?" status)
}

// parseSessions finds the captured sessions of a README's lines.
func parseSessions(t *testing.T, path string, lines []string) []session {
	t.Helper()
	var out []session
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != sessionMarker {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s:%d: %s not followed by a fenced block", path, i+1, sessionMarker)
		}
		s := session{start: i + 2}
		j := s.start
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			if cmd, ok := strings.CutPrefix(lines[j], "$ "); ok {
				s.cmds = append(s.cmds, sessionCmd{line: strings.TrimSuffix(cmd, "\n")})
				continue
			}
			if len(s.cmds) == 0 {
				t.Fatalf("%s:%d: a captured session starts with a command line ($ writeguard ...)", path, j+1)
			}
			s.cmds[len(s.cmds)-1].output += lines[j]
		}
		if j >= len(lines) {
			t.Fatalf("%s:%d: block not closed", path, i+1)
		}
		s.end = j
		out = append(out, s)
		i = j
	}
	return out
}

// runSessionCmd runs one session command line in-process: "writeguard
// ARGS [# comment]" or "writeguard ARGS; echo $?". It returns stdout as
// the README shows it: the data directory written as ./wg-data, paths as
// given from the repository root, and the exit status after "echo $?".
func runSessionCmd(t *testing.T, line, dataDir string) string {
	t.Helper()
	cmd, _, _ := strings.Cut(line, " #")
	cmd = strings.TrimSpace(cmd)
	cmd, echo := strings.CutSuffix(cmd, "; echo $?")
	fields := strings.Fields(cmd)
	if len(fields) == 0 || fields[0] != "writeguard" {
		t.Fatalf("session command %q: want 'writeguard ARGS'", line)
	}
	args := fields[1:]
	var rooted []string // paths given from the root, as the README writes them
	for i, a := range args {
		switch {
		case a == readmeDataDir:
			args[i] = dataDir
		case strings.HasPrefix(a, readmeRootPath):
			args[i] = strings.TrimPrefix(a, readmeRootPath)
			rooted = append(rooted, a)
		}
	}
	code, out, errOut := runCmd(t, context.Background(), args...)
	if code != exitOK && !echo {
		t.Fatalf("%s: exit %d (a session shows a failing command only with '; echo $?')\nstderr: %s", line, code, errOut)
	}
	out = strings.ReplaceAll(out, dataDir, readmeDataDir)
	for _, a := range rooted {
		out = strings.ReplaceAll(out, strings.TrimPrefix(a, readmeRootPath), a)
	}
	if echo {
		out += fmt.Sprintln(code)
	}
	return out
}

// TestReadmeSessions runs the captured sessions of cmd/writeguard/README.md
// in order (a small deterministic demo, --limit 6000 --workers 1 --seed 4, then the
// dlq commands on its data), then checks the root README's demo session
// against the same output. Timestamps and durations are masked; every
// other character must match. With -update the blocks are rewritten.
//
// Under the race detector FerretDB's SQLite (C translated to Go) runs about
// ten times slower and this test would take over a minute for a
// single-worker run with nothing concurrent to check: it runs without
// -race, which .ci/run does.
func TestReadmeSessions(t *testing.T) {
	if raceEnabled {
		t.Skip("README sessions are checked without -race (.ci/run: go test -run TestReadmeSessions ./cmd/writeguard)")
	}
	dataDir := filepath.Join(t.TempDir(), "wg-data")
	outputs := map[string]string{} // command line (comment stripped) → output
	check := func(path string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(data), "\n")
		sessions := parseSessions(t, path, lines)
		if len(sessions) == 0 {
			t.Fatalf("%s: no captured session", path)
		}
		drift := false
		for si := range sessions {
			for ci := range sessions[si].cmds {
				c := &sessions[si].cmds[ci]
				key, _, _ := strings.Cut(c.line, " #")
				got, seen := outputs[strings.TrimSpace(key)]
				if !seen || !strings.HasPrefix(key, "writeguard demo") {
					got = runSessionCmd(t, c.line, dataDir)
					outputs[strings.TrimSpace(key)] = got
				}
				if maskVolatile(got) != maskVolatile(c.output) {
					drift = true
					if !*update {
						t.Errorf("%s: the output of %q drifted (run 'go test ./cmd/writeguard -run TestReadmeSessions -update'):\n%s",
							path, c.line, lineDiff(maskVolatile(c.output), maskVolatile(got)))
					}
					c.output = got // only drifted outputs are rewritten
				}
			}
		}
		if !*update || !drift {
			return
		}
		var b bytes.Buffer
		next := 0
		for _, s := range sessions {
			for _, l := range lines[next:s.start] {
				b.WriteString(l)
			}
			for _, c := range s.cmds {
				b.WriteString("$ " + c.line + "\n" + c.output)
			}
			next = s.end
		}
		for _, l := range lines[next:] {
			b.WriteString(l)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rewritten", path)
	}
	check("README.md")
	check(filepath.Join("..", "..", "README.md"))
}

// lineDiff shows the lines that differ between the README's output and the
// command's, with their line numbers ("-" README, "+" now).
func lineDiff(readme, now string) string {
	a, b := strings.Split(readme, "\n"), strings.Split(now, "\n")
	var out strings.Builder
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			fmt.Fprintf(&out, "line %d:\n- %s\n+ %s\n", i+1, x, y)
		}
	}
	return out.String()
}
