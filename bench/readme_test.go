package bench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
)

// The figures of README.md that a test can decide are produced by the
// tests below and checked by them: the amplification tables (counts are
// deterministic for a seed) and the allocation counts of the happy path
// (exact). Times are printed by the benchmarks and never checked.
//
//	go test -run 'TestReadme' .           # check
//	go test -run 'TestReadme' . -update   # rewrite the blocks that drifted

var update = flag.Bool("update", false, "rewrite the blocks of README.md that drifted")

const readmePath = "README.md"

// A readmeBlock is the text between an opening marker <!-- name args -->
// and its closing <!-- /name --> in README.md.
type readmeBlock struct {
	args       string
	start, end int // byte offsets of the text between the markers
}

func readmeBlocks(t *testing.T, text, name string) []readmeBlock {
	t.Helper()
	re := regexp.MustCompile(`<!-- ` + name + `( [^>]*)? -->\n`)
	var out []readmeBlock
	for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
		closing := "<!-- /" + name + " -->"
		end := strings.Index(text[m[1]:], closing)
		if end < 0 {
			t.Fatalf("%s: %q at byte %d has no %s", readmePath, text[m[0]:m[1]-1], m[0], closing)
		}
		args := ""
		if m[2] >= 0 {
			args = strings.TrimSpace(text[m[2]:m[3]])
		}
		out = append(out, readmeBlock{args: args, start: m[1], end: m[1] + end})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no <!-- %s --> block", readmePath, name)
	}
	return out
}

// checkBlocks compares each block with what produce returns for its
// arguments (same reports whether two texts agree); with -update it
// rewrites the README with the produced text of the blocks that drifted.
// The blocks are produced in subtests, in parallel when parallel is set.
func checkBlocks(t *testing.T, name string, parallel bool, produce func(t *testing.T, args string) string, same func(want, got string) bool) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	blocks := readmeBlocks(t, text, name)
	got := make([]string, len(blocks))
	t.Run("produce", func(t *testing.T) {
		for i, b := range blocks {
			t.Run(strings.ReplaceAll(b.args, " ", "_"), func(t *testing.T) {
				if parallel {
					t.Parallel()
				}
				got[i] = produce(t, b.args)
			})
		}
	})
	if t.Failed() {
		return
	}
	var out strings.Builder
	prev, drift := 0, false
	for i, b := range blocks {
		out.WriteString(text[prev:b.start])
		if want := text[b.start:b.end]; same(want, got[i]) {
			out.WriteString(want)
		} else {
			drift = true
			out.WriteString(got[i])
			if !*update {
				t.Errorf("%s: <!-- %s %s --> drifted (go test -run %s . -update rewrites it):\n--- README\n%s--- now\n%s", readmePath, name, b.args, t.Name(), want, got[i])
			}
		}
		prev = b.end
	}
	out.WriteString(text[prev:])
	if *update && drift {
		if err := os.WriteFile(readmePath, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rewritten", readmePath)
	}
}

// parseAmpArgs reads "seed=N ordered|unordered replset|standalone".
func parseAmpArgs(t *testing.T, args string) ampConfig {
	cfg := ampConfig{seed: ampDefaultSeed, ordered: true}
	for _, f := range strings.Fields(args) {
		switch {
		case strings.HasPrefix(f, "seed="):
			n, err := strconv.ParseInt(strings.TrimPrefix(f, "seed="), 10, 64)
			if err != nil {
				t.Fatalf("amplification block %q: %v", args, err)
			}
			cfg.seed = n
		case f == "ordered", f == "unordered":
			cfg.ordered = f == "ordered"
		case f == "replset", f == "standalone":
			cfg.replicaSet = f == "replset"
		default:
			t.Fatalf("amplification block %q: unknown argument %q", args, f)
		}
	}
	return cfg
}

// timeCell matches the wall-time column of an amplification row.
var timeCell = regexp.MustCompile(`\| [0-9.]+ s \|`)

// TestReadmeAmplification checks every block of README.md between
// <!-- amplification seed=N ordered|unordered replset|standalone --> and
// <!-- /amplification -->: it must be what ampTable prints for that
// configuration, but for the wall-time column. The configurations run one
// after the other (15–40 s each, about 4 minutes in all): run at once
// they share the embedded server, whose SQLite then answers some writes
// later or differently, and a count moved by one or two commands.
func TestReadmeAmplification(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: runs every amplification configuration of README.md against the embedded server (minutes)")
	}
	checkBlocks(t, "amplification", false, func(t *testing.T, args string) string {
		return ampTable(t, parseAmpArgs(t, args))
	}, func(want, got string) bool {
		mask := func(s string) string { return timeCell.ReplaceAllString(s, "| (time) |") }
		return mask(want) == mask(got)
	})
}

// allocCase is one line of the allocation block: InsertMany of n order
// lines, exact allocations per call of four variants.
type allocCase struct {
	n                                      int
	prepared, guarded, structID, guardedID float64
}

func measureAllocs(t *testing.T, n int) allocCase {
	client := connect(t, options.Client().ApplyURI(childNullURI(t)))
	coll := client.Database(benchDB).Collection("readme_allocs_" + strconv.Itoa(n))
	g, err := writeguard.Wrap(coll)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	count := func(c writeguard.Collection, f floor) float64 {
		op := insertManyOp(n)(t, c, f)
		if err := op(ctx); err != nil {
			t.Fatal(err)
		}
		// The least of five counts: what else allocates in the process
		// during a count (see allocSlack) only adds to it.
		least := math.Inf(1)
		for range 5 {
			least = min(least, testing.AllocsPerRun(20, func() {
				if err := op(ctx); err != nil {
					t.Fatal(err)
				}
			}))
		}
		return least
	}
	return allocCase{n: n, prepared: count(coll, floorPrepared), guarded: count(g, floorPlain),
		structID: count(coll, floorStructID), guardedID: count(g, floorStructID)}
}

func (a allocCase) row() string {
	d := float64(a.n)
	return fmt.Sprintf("| InsertMany of %d | %.0f | %.0f | %+.2f | %.0f | %.0f | %+.2f |\n", a.n,
		a.prepared, a.guarded, (a.guarded-a.prepared)/d, a.structID, a.guardedID, (a.guardedID-a.structID)/d)
}

const allocHeader = "| call | raw-prepared | guarded | Δ per document | raw-struct-id | guarded-id | Δ per document |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"

// allocSlack is how far a checked allocation count n may move: the
// driver's background goroutines (monitors, pool maintenance) allocate now
// and then during testing.AllocsPerRun's window, and its wire-buffer pool
// (a buffer is kept only while more than half of it is used) makes a call
// grow a buffer now and then: 3 per call, or 0.03 % of n when more (about
// 14 at 47,000). measureAllocs takes the least of five counts, which a
// busy machine moved by 17 at 47,000 when it took one.
func allocSlack(n float64) float64 { return max(3, 0.0003*n) }

// TestReadmeAllocations checks the block of README.md between
// <!-- allocations --> and <!-- /allocations -->: the exact allocations
// per call of InsertMany of 100 and 1,000 order lines, guarded against
// the raw driver handed the same prepared bytes (raw-prepared) and
// guarded with the caller's _ids against the driver handed the same
// structs (raw-struct-id), on the null backend in a child process. A
// count may move by allocSlack.
func TestReadmeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("skipped with -race: the race detector's instrumentation allocates (.ci/run checks the counts without it)")
	}
	checkBlocks(t, "allocations", false, func(t *testing.T, _ string) string {
		var sb strings.Builder
		sb.WriteString(allocHeader)
		for _, n := range []int{100, 1000} {
			sb.WriteString(measureAllocs(t, n).row())
		}
		return sb.String()
	}, func(want, got string) bool {
		w, g := allocNumbers(want), allocNumbers(got)
		if len(w) != len(g) || len(w) == 0 {
			return false
		}
		for i := range w {
			if math.Abs(w[i]-g[i]) > allocSlack(w[i]) {
				return false
			}
		}
		return true
	})
}

// allocNumbers returns the allocation counts of a block's rows (the
// per-document differences follow from them).
func allocNumbers(block string) []float64 {
	var out []float64
	for _, line := range strings.Split(block, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 8 || !strings.Contains(cells[1], "InsertMany") {
			continue
		}
		for _, i := range []int{2, 3, 5, 6} {
			v, err := strconv.ParseFloat(strings.TrimSpace(cells[i]), 64)
			if err != nil {
				return nil
			}
			out = append(out, v)
		}
	}
	return out
}
