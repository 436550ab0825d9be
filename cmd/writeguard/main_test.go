package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	"github.com/writeguard/writeguard/hooks"
)

// runCmd runs the command in-process and returns its exit status, stdout
// and stderr.
func runCmd(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// expectation is computed from the CSV text alone, independently of the
// demo's loader and of the validator emulation: the rows the validator
// rules reject, and the duplicate rows among the valid ones.
type expectation struct {
	rows, invalid, validDuplicates, invalidDistinct int
	patternOnlyDistinct                             int
	keywordRows                                     map[string]int
}

func expect(t *testing.T, limit int) expectation {
	t.Helper()
	f, err := os.Open(filepath.Join("internal", "demo", "data", "online_retail_sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	product := regexp.MustCompile(`^\d{5}[A-Za-z]{0,2}$`)
	e := expectation{keywordRows: map[string]int{}}
	seen := map[string]bool{}
	for limit <= 0 || e.rows < limit {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e.rows++
		qty, _ := strconv.Atoi(rec[3])
		price, _ := strconv.ParseFloat(rec[5], 64)
		badQty, badPrice, badCode := qty < 1, price <= 0, !product.MatchString(rec[1])
		key := strings.Join(rec, "\x00")
		dup := seen[key]
		seen[key] = true
		if badQty || badPrice || badCode {
			e.invalid++
			if badQty || badPrice {
				e.keywordRows["minimum"]++
			}
			if badCode {
				e.keywordRows["pattern"]++
			}
			if !dup {
				e.invalidDistinct++
				if badCode && !badQty && !badPrice {
					e.patternOnlyDistinct++
				}
			}
			continue
		}
		if dup {
			e.validDuplicates++
		}
	}
	return e
}

// demoJSON runs the demo with --json and decodes the object.
func demoJSON(t *testing.T, args ...string) (map[string]any, demo.Result) {
	t.Helper()
	code, out, errOut := runCmd(t, context.Background(), append([]string{"demo", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("demo %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("demo --json output is not one JSON object: %v\n%s", err, out)
	}
	var r demo.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return m, r
}

// checkAccounting asserts the keys read by checks outside the repository
// and the accounting against the independent expectation.
func checkAccounting(t *testing.T, m map[string]any, r demo.Result, e expectation) {
	t.Helper()
	for _, k := range []string{"input", "written", "already_written", "dead_lettered", "conflicts", "failed", "lost",
		"duplicates", "server_commands", "amplification", "keywords", "exhausted", "unknown", "not_attempted",
		"elapsed_seconds", "attempts", "faults", "seed", "server"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks key %q", k)
		}
	}
	if r.Input != e.rows {
		t.Errorf("input %d, want %d", r.Input, e.rows)
	}
	if r.Lost != 0 || r.Duplicates != 0 || !r.OK {
		t.Errorf("lost %d, duplicates %d, ok %v, problems %v", r.Lost, r.Duplicates, r.OK, r.Problems)
	}
	if r.DeadLettered != e.invalid {
		t.Errorf("dead_lettered %d, want %d rows failing the validator rules", r.DeadLettered, e.invalid)
	}
	if r.Conflicts != e.validDuplicates {
		t.Errorf("conflicts %d, want %d duplicate valid rows", r.Conflicts, e.validDuplicates)
	}
	sum := r.Written + r.AlreadyWritten + r.DeadLettered + r.Conflicts + r.Failed + r.Exhausted + r.Unknown + r.NotAttempted
	for _, n := range r.Other {
		sum += n
	}
	if sum != r.Input {
		t.Errorf("dispositions add up to %d, input %d", sum, r.Input)
	}
	if r.Failed+r.Exhausted+r.Unknown+r.NotAttempted != 0 {
		t.Errorf("failed %d exhausted %d unknown %d not_attempted %d: the fault schedule should all be absorbed",
			r.Failed, r.Exhausted, r.Unknown, r.NotAttempted)
	}
	if len(r.Keywords) == 0 {
		t.Error("keywords empty")
	}
	for k, n := range e.keywordRows {
		if r.Keywords[k] != n {
			t.Errorf("keywords[%s] = %d, want %d", k, r.Keywords[k], n)
		}
	}
	if r.Target.Documents != r.Written+r.AlreadyWritten {
		t.Errorf("target holds %d documents, written+already_written = %d", r.Target.Documents, r.Written+r.AlreadyWritten)
	}
	if r.DLQ.Envelopes != int64(e.invalidDistinct) || r.DLQ.Captures != int64(e.invalid) || r.DLQ.Pending != int64(e.invalidDistinct) {
		t.Errorf("DLQ %d envelopes / %d captures / %d pending, want %d / %d", r.DLQ.Envelopes, r.DLQ.Captures, r.DLQ.Pending, e.invalidDistinct, e.invalid)
	}
	if len(r.DLQ.ByKeyword) == 0 || r.DLQ.ByCode["121"] != int64(e.invalidDistinct) {
		t.Errorf("DLQ breakdown %v %v", r.DLQ.ByKeyword, r.DLQ.ByCode)
	}
	if r.Server == conn.KindEmbedded && r.ServerCommands == 0 {
		t.Error("server_commands 0")
	}
	if r.Amplification < 1 {
		t.Errorf("amplification %v < 1", r.Amplification)
	}
}

func TestDemoLimitJSON(t *testing.T) {
	m, r := demoJSON(t, "--limit", "3000")
	checkAccounting(t, m, r, expect(t, 3000))
	if r.Server != conn.KindEmbedded || r.Seed != demo.DefaultSeed {
		t.Errorf("server %q seed %d", r.Server, r.Seed)
	}
	t.Logf("3000 rows: %.2fs, attempts %d, faults %v", r.ElapsedSeconds, r.Attempts, r.Faults)
}

// Faults are injected and absorbed: with a seed whose schedule drops a
// reply, some rows end already_written, and the accounting still holds.
func TestDemoFaultsAbsorbed(t *testing.T) {
	e := expect(t, 6000)
	for _, seed := range []string{"3", "7"} {
		m, r := demoJSON(t, "--limit", "6000", "--seed", seed, "--batch", "250")
		checkAccounting(t, m, r, e)
		if r.Retries == 0 || len(r.Faults) < 2 {
			t.Errorf("seed %s: %d retries, faults %v: the schedule injected nothing", seed, r.Retries, r.Faults)
		}
		t.Logf("seed %s: retries %v faults %v already_written %d duplicates_read_back %d", seed, r.RetriesByCause, r.Faults, r.AlreadyWritten, r.DuplicatesReadBack)
	}
}

func TestDemoFull(t *testing.T) {
	if testing.Short() {
		t.Skip("full demo (42,481 rows) skipped in -short mode")
	}
	start := time.Now()
	m, r := demoJSON(t)
	wall := time.Since(start)
	checkAccounting(t, m, r, expect(t, 0))
	if r.Input != demo.DataRows {
		t.Errorf("input %d", r.Input)
	}
	t.Logf("full demo: wall %.2fs (elapsed_seconds %.2f, writes %.2fs), attempts %d, amplification %.4f, faults %v",
		wall.Seconds(), r.ElapsedSeconds, r.WriteSeconds, r.Attempts, r.Amplification, r.Faults)
	// Speed is measured by the benchmarks in bench/ (BenchmarkEndToEnd),
	// never asserted here: a loaded machine is not a slow demo.
}

func TestDemoTable(t *testing.T) {
	code, out, errOut := runCmd(t, context.Background(), "demo", "--limit", "1000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"DISPOSITIONS", "dead_lettered", "minimum Quantity", "AMPLIFICATION", "DEAD-LETTER QUEUE", "ACCOUNTING", "check passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("stderr not empty when not on a terminal: %q", errOut)
	}
}

// Ctrl-C: no batch starts after the signal, the batches in flight finish,
// and the accounting still holds (the rest is not_attempted). The context
// is cancelled when the first batch is sent.
func TestDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	stop := hooks.Hooks{AttemptStarted: func(c context.Context, _ *hooks.AttemptStart) context.Context {
		once.Do(cancel)
		return c
	}}
	r, err := demo.Run(ctx, demo.Config{Limit: 20000, Batch: 200, Workers: 1, Seed: demo.DefaultSeed, Hooks: []hooks.Hooks{stop}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.NotAttempted == 0 || r.NotAttempted == r.Input || r.Lost != 0 || r.Duplicates != 0 || !r.OK {
		t.Errorf("interrupted %v, not_attempted %d of %d, lost %d, duplicates %d, ok %v %v",
			r.Interrupted, r.NotAttempted, r.Input, r.Lost, r.Duplicates, r.OK, r.Problems)
	}
	// The command says so and exits 1.
	code, _, errOut := runCmd(t, ctx, "demo", "--limit", "100")
	if code != exitFail || !strings.Contains(errOut, "interrupted") {
		t.Errorf("demo with a cancelled context: exit %d, %q", code, errOut)
	}
}

// dlqJSON runs a dlq command with --json and decodes its output.
func dlqJSON(t *testing.T, wantCode int, args ...string) map[string]any {
	t.Helper()
	code, out, errOut := runCmd(t, context.Background(), append(append([]string{"dlq"}, args...), "--json")...)
	if code != wantCode {
		t.Fatalf("dlq %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, wantCode, out, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("dlq %v: %v\n%s", args, err, out)
	}
	return m
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// countTarget opens the embedded server's data and counts the target's
// documents and distinct _ids.
func countTarget(t *testing.T, dir string) (docs, distinct int) {
	t.Helper()
	ctx := context.Background()
	c, err := conn.Open(ctx, conn.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	cur, err := c.Client.Database(demo.DefaultDatabase).Collection(demo.DefaultCollection).Find(ctx, bson.D{},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for cur.Next(ctx) {
		docs++
		ids[cur.Current.Lookup("_id").StringValue()] = true
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return docs, len(ids)
}

// After the validator is widened, "dlq replay" drains the backlog the demo
// created.
func TestDLQReplayDrainsBacklogAfterWidening(t *testing.T) {
	const limit = 3000
	e := expect(t, limit)
	dir := t.TempDir()
	_, r := demoJSON(t, "--limit", strconv.Itoa(limit), "--data-dir", dir)
	before, _ := countTarget(t, dir)
	if before != r.Written+r.AlreadyWritten {
		t.Fatalf("target %d documents after the demo, want %d", before, r.Written+r.AlreadyWritten)
	}

	st := dlqJSON(t, 0, "stats", "--data-dir", dir)
	if num(st["pending"]) != e.invalidDistinct || num(st["envelopes"]) != e.invalidDistinct || num(st["attempts"]) != e.invalid {
		t.Fatalf("stats after the demo: %v; want %d pending envelopes, %d captures", st, e.invalidDistinct, e.invalid)
	}
	kw := st["by_keyword"].(map[string]any)
	if num(kw["pattern"]) == 0 || num(kw["minimum"]) == 0 {
		t.Errorf("by_keyword %v", kw)
	}

	// Step 1: widen only the StockCode rule (testdata/widened_validator.json).
	// A dry run predicts it; the replay writes the pattern-only rows and
	// leaves the rest pending, exit 3.
	widened := filepath.Join("testdata", "widened_validator.json")
	dry := dlqJSON(t, 0, "replay", "--data-dir", dir, "--validator", widened, "--dry-run")
	ns := dry["namespaces"].([]any)[0].(map[string]any)
	if num(ns["WouldPass"]) != e.patternOnlyDistinct || num(ns["WouldFail"]) != e.invalidDistinct-e.patternOnlyDistinct {
		t.Errorf("dry run %v; want %d would pass", ns, e.patternOnlyDistinct)
	}
	rep := dlqJSON(t, exitCheck, "replay", "--data-dir", dir, "--validator", widened)
	ns = rep["namespaces"].([]any)[0].(map[string]any)
	if num(ns["Replayed"]) != e.patternOnlyDistinct || num(ns["StillInvalid"]) != e.invalidDistinct-e.patternOnlyDistinct {
		t.Errorf("partial replay %v; want %d replayed", ns, e.patternOnlyDistinct)
	}
	if num(rep["pending"]) != e.invalidDistinct-e.patternOnlyDistinct {
		t.Errorf("pending %v after the partial replay", rep["pending"])
	}

	// Step 2: no validator at all (the demo's lived in its proxy): the
	// backlog drains.
	rep = dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator")
	ns = rep["namespaces"].([]any)[0].(map[string]any)
	if num(ns["Replayed"]) != e.invalidDistinct-e.patternOnlyDistinct || num(rep["pending"]) != 0 {
		t.Errorf("full replay %v, pending %v", ns, rep["pending"])
	}
	after, distinct := countTarget(t, dir)
	if after != before+e.invalidDistinct || distinct != after {
		t.Errorf("target %d documents (%d distinct) after replay, want %d", after, distinct, before+e.invalidDistinct)
	}
	st = dlqJSON(t, 0, "stats", "--data-dir", dir)
	if num(st["pending"]) != 0 || num(st["by_status"].(map[string]any)["replayed"]) != e.invalidDistinct {
		t.Errorf("stats after replay: %v", st)
	}

	// Running it again does nothing.
	rep = dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator")
	if len(rep["namespaces"].([]any)) != 0 {
		t.Errorf("second replay: %v", rep)
	}
	if again, _ := countTarget(t, dir); again != after {
		t.Errorf("second replay changed the target: %d -> %d", after, again)
	}
}

func TestDLQListShowDiscard(t *testing.T) {
	dir := t.TempDir()
	e := expect(t, 2000)
	demoJSON(t, "--limit", "2000", "--data-dir", dir)

	code, out, errOut := runCmd(t, context.Background(), "dlq", "list", "--data-dir", dir, "--limit", "3", "--json", "--keyword", "pattern")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	var items []map[string]any
	if err := json.Unmarshal([]byte(out), &items); err != nil || len(items) == 0 || len(items) > 3 {
		t.Fatalf("list: %v %s", err, out)
	}
	fp := items[0]["fingerprint"].(string)
	if kws := items[0]["failing_keywords"].([]any); len(kws) == 0 {
		t.Errorf("list item %v", items[0])
	}
	code, out, _ = runCmd(t, context.Background(), "dlq", "list", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "FINGERPRINT") || !strings.Contains(out, fp[:12]) && !strings.Contains(out, "listed") {
		t.Errorf("list table: %d\n%s", code, out)
	}

	show := dlqJSON(t, 0, "show", "--data-dir", dir, fp[:10])
	if show["fingerprint"] != fp || show["original"] == nil || show["err_info"] == nil {
		t.Errorf("show %s: %v", fp[:10], show)
	}
	// One JSON shape: every key of a list item is in show's object, with
	// the same value.
	for k, v := range items[0] {
		if fmt.Sprint(show[k]) != fmt.Sprint(v) {
			t.Errorf("show --json %s = %v, list --json %v", k, show[k], v)
		}
	}
	code, out, _ = runCmd(t, context.Background(), "dlq", "list", "--data-dir", dir, "--limit", "1")
	if code != 0 || !strings.Contains(out, "\n1 envelope listed (limit 1;") {
		t.Errorf("list --limit 1: %d\n%s", code, out)
	}
	checkShowPrefixes(t, dir, fp)
	code, out, _ = runCmd(t, context.Background(), "dlq", "show", fp, "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "121 DocumentValidationFailure") || !strings.Contains(out, "original:") {
		t.Errorf("show table: %d\n%s", code, out)
	}
	code, _, errOut = runCmd(t, context.Background(), "dlq", "show", "--data-dir", dir, "ffffffffffff")
	if code != exitFail || !strings.Contains(errOut, "no envelope") {
		t.Errorf("show unknown: %d %q", code, errOut)
	}

	// discard by filter: dry run, then for real; replay then leaves them.
	st := dlqJSON(t, 0, "stats", "--data-dir", dir, "--keyword", "pattern")
	nPattern := num(st["envelopes"])
	d := dlqJSON(t, 0, "discard", "--data-dir", dir, "--keyword", "pattern", "--dry-run")
	if num(d["discarded"]) != nPattern || num(d["pending"]) != e.invalidDistinct {
		t.Errorf("discard dry run: %v (want %d of %d)", d, nPattern, e.invalidDistinct)
	}
	d = dlqJSON(t, 0, "discard", "--data-dir", dir, "--keyword", "pattern")
	if num(d["discarded"]) != nPattern || num(d["pending"]) != e.invalidDistinct-nPattern {
		t.Errorf("discard: %v", d)
	}
	st = dlqJSON(t, 0, "stats", "--data-dir", dir, "--status", "discarded")
	if num(st["envelopes"]) != nPattern {
		t.Errorf("discarded envelopes: %v", st)
	}
	// Older-than an hour selects nothing yet.
	d = dlqJSON(t, 0, "discard", "--data-dir", dir, "--older-than", "1h")
	if num(d["discarded"]) != 0 {
		t.Errorf("discard --older-than 1h: %v", d)
	}
	rep := dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator")
	if num(rep["pending"]) != 0 {
		t.Errorf("replay after discard: %v", rep)
	}
	st = dlqJSON(t, 0, "stats", "--data-dir", dir)
	bs := st["by_status"].(map[string]any)
	if num(bs["discarded"]) != nPattern || num(bs["replayed"]) != e.invalidDistinct-nPattern {
		t.Errorf("final statuses %v", bs)
	}
}

// checkShowPrefixes checks that dlq show finds fp by its shortest unique
// prefix, in upper case too, and that a prefix two envelopes share is
// reported as ambiguous with the envelopes it matches.
func checkShowPrefixes(t *testing.T, dir, fp string) {
	t.Helper()
	code, out, errOut := runCmd(t, context.Background(), "dlq", "list", "--data-dir", dir, "--limit", "0", "--json")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	var all []map[string]any
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all) < 17 {
		t.Fatalf("list --limit 0: %v, %d envelopes (want > 16, so two share a first digit)", err, len(all))
	}
	shared := func(p string) int {
		c := 0
		for _, it := range all {
			if strings.HasPrefix(it["fingerprint"].(string), p) {
				c++
			}
		}
		return c
	}
	unique := fp
	for i := 1; i <= len(fp); i++ {
		if shared(fp[:i]) == 1 {
			unique = fp[:i]
			break
		}
	}
	for _, id := range []string{unique, strings.ToUpper(unique)} {
		if show := dlqJSON(t, 0, "show", "--data-dir", dir, id); show["fingerprint"] != fp {
			t.Errorf("show %s: fingerprint %v, want %s", id, show["fingerprint"], fp)
		}
	}
	for d := 0; d < 16; d++ {
		p := strconv.FormatInt(int64(d), 16)
		if shared(p) < 2 {
			continue
		}
		code, _, errOut := runCmd(t, context.Background(), "dlq", "show", "--data-dir", dir, p)
		if code != exitUsage || !strings.Contains(errOut, "ambiguous") || !strings.Contains(errOut, "give more digits") {
			t.Errorf("show %s (shared by %d): exit %d, %q; want 2 and 'ambiguous'", p, shared(p), code, errOut)
		}
		return
	}
	t.Error("no one-digit prefix is shared by two envelopes")
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"help"}, {"--help"}, {"demo", "--help"}, {"dlq", "--help"}, {"help", "demo"},
		{"dlq", "stats", "--help"}, {"dlq", "list", "-h"}, {"dlq", "show", "--help"},
		{"dlq", "replay", "--help"}, {"dlq", "discard", "--help"},
	} {
		code, out, errOut := runCmd(t, context.Background(), args...)
		if code != 0 || !strings.Contains(out, "Usage") || !strings.Contains(out, "Exit status") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"demo", "--bogus"}, "-bogus"},
		{[]string{"demo", "--batch", "0"}, "-batch"},
		{[]string{"demo", "--max-attempts", "0"}, "-max-attempts"},
		{[]string{"demo", "--max-attempts", "-5"}, "-max-attempts"},
		{[]string{"demo", "--workers", "x"}, "-workers"},
		{[]string{"demo", "--limit", "-1"}, "-limit"},
		{[]string{"demo", "extra"}, `"extra"`},
		{[]string{"demo", "--uri", "mongodb://x", "--data-dir", dir}, "-data-dir"},
		{[]string{"dlq"}, "Usage"},
		{[]string{"dlq", "frob"}, `unknown command "frob"`},
		{[]string{"dlq", "stats"}, "-uri"},
		{[]string{"dlq", "stats", "--data-dir", filepath.Join(dir, "missing")}, "-data-dir"},
		{[]string{"dlq", "stats", "--data-dir", dir, "--code", "abc"}, "-code"},
		{[]string{"dlq", "stats", "--data-dir", dir, "--status", "lost"}, "status"},
		{[]string{"dlq", "stats", "--data-dir", dir, "--older-than", "soon"}, "-older-than"},
		{[]string{"dlq", "stats", "--data-dir", dir, "--older-than", "3days"}, "days (3d) or a Go duration (90m, 36h"},
		{[]string{"dlq", "stats", "--data-dir", dir, "--newer-than", "-1h"}, "-newer-than"},
		{[]string{"demo", "--uri", "localhost:27017"}, "-uri: \"localhost:27017\" is not a MongoDB connection string"},
		{[]string{"dlq", "stats", "--uri", "mongodb://localhost:port"}, "-uri"},
		{[]string{"dlq", "list", "--uri", "mongodb://localhost/?w=1&bogusOption=1&connectTimeoutMS=x"}, "-uri"},
		{[]string{"dlq", "stats", "--uri", "mongodb+srv://"}, "-uri"},
		{[]string{"dlq", "list", "--data-dir", dir, "--limit", "-2"}, "-limit"},
		{[]string{"dlq", "show", "--data-dir", dir}, "ID"},
		{[]string{"dlq", "replay", "--data-dir", dir, "--batch", "0"}, "-batch"},
		{[]string{"dlq", "replay", "--data-dir", dir, "--no-validator", "--status", "discarded"}, "-status"},
		{[]string{"dlq", "replay", "--data-dir", dir, "--validator", filepath.Join(dir, "none.json")}, "-validator"},
		{[]string{"dlq", "replay", "--uri", "mongodb://localhost", "--validator", "x.json"}, "-validator"},
		{[]string{"dlq", "discard", "--data-dir", dir}, "-all"},
		{[]string{"dlq", "discard", "--data-dir", dir, "--keyword", "x", "--bogus"}, "-bogus"},
	} {
		code, _, errOut := runCmd(t, context.Background(), c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming %q", c.args, code, errOut, c.want)
		}
	}
}

// TestExitCodes runs one case per status of the documented table (main.go,
// the usage text, cmd/writeguard/README.md): 0 success, 1 operational
// failure, 2 usage error, 3 check failed.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	unreachable := "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300"
	for _, c := range []struct {
		name string
		want int
		args []string
	}{
		{"0 success: help", exitOK, []string{"help"}},
		{"1 operational: server unreachable", exitFail, []string{"dlq", "stats", "--uri", unreachable}},
		{"1 operational: no DLQ (a well-formed age in days parses)", exitFail, []string{"dlq", "stats", "--data-dir", dir, "--older-than", "3d"}},
		{"2 usage: malformed URI (demo)", exitUsage, []string{"demo", "--uri", "mongodb://localhost:notaport"}},
		{"2 usage: malformed URI (dlq)", exitUsage, []string{"dlq", "list", "--uri", "127.0.0.1:27017"}},
		{"2 usage: unknown flag", exitUsage, []string{"dlq", "stats", "--bogus"}},
	} {
		code, _, errOut := runCmd(t, context.Background(), c.args...)
		if code != c.want {
			t.Errorf("%s: %v exit %d, want %d (stderr %q)", c.name, c.args, code, c.want, errOut)
		}
	}

	// 3: replay under a validator that still rejects some documents.
	data := t.TempDir()
	e := expect(t, 1000)
	if e.invalidDistinct == e.patternOnlyDistinct {
		t.Fatal("the first 1,000 rows have no document the widened validator rejects")
	}
	demoJSON(t, "--limit", "1000", "--data-dir", data, "--no-faults")
	widened := filepath.Join("testdata", "widened_validator.json")
	code, _, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", data, "--validator", widened)
	if code != exitCheck {
		t.Errorf("3 check failed: replay leaving invalid documents exit %d, want 3 (stderr %q)", code, errOut)
	}
}

// Operational failures exit 1 and name what failed.
func TestOperationalErrors(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := runCmd(t, context.Background(), "dlq", "stats", "--data-dir", dir)
	if code != exitFail || !strings.Contains(errOut, "no dead-letter collection") {
		t.Errorf("stats on an empty data dir: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCmd(t, context.Background(), "dlq", "stats", "--uri", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300")
	if code != exitFail || errOut == "" {
		t.Errorf("stats on an unreachable server: exit %d, %q", code, errOut)
	}
}

// The demo and the dlq commands against a real MongoDB: a real validator,
// no injected faults. Runs only when MONGODB_URI is set.
func TestRealMongoDB(t *testing.T) {
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		t.Skip("MONGODB_URI not set: real-MongoDB tests skipped")
	}
	const db = "writeguard_cli_test"
	m, r := demoJSON(t, "--uri", uri, "--limit", "3000", "--db", db)
	checkAccounting(t, m, r, expect(t, 3000))
	if r.Server != conn.KindMongoDB {
		t.Errorf("server %q", r.Server)
	}
	st := dlqJSON(t, 0, "stats", "--uri", uri, "--db", db)
	if num(st["pending"]) == 0 {
		t.Errorf("stats: %v", st)
	}
	// The real validator still rejects them: replay leaves them pending.
	dlqJSON(t, exitCheck, "replay", "--uri", uri, "--db", db, "--keyword", "pattern", "--into", db+"."+demo.DefaultCollection)
}

func TestAgeFlag(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3d", 72 * time.Hour, true},
		{"0d", 0, true},
		{"90m", 90 * time.Minute, true},
		{"1h30m", 90 * time.Minute, true},
		{"3days", 0, false},
		{"d", 0, false},
		{"-1h", 0, false},
		{"1.5d", 0, false},
	} {
		var d time.Duration
		err := ageFlag{&d}.Set(c.in)
		if (err == nil) != c.ok || (c.ok && d != c.want) {
			t.Errorf("Set(%q) = %v, %v; want %v, ok %v", c.in, d, err, c.want, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "days (3d) or a Go duration") {
			t.Errorf("Set(%q) error %q does not name the format", c.in, err)
		}
	}
}

func TestCheckURI(t *testing.T) {
	for _, c := range []struct {
		uri string
		ok  bool
	}{
		{"mongodb://localhost:27017", true},
		{"mongodb://a:1,b:2/?replicaSet=rs0&retryWrites=false", true},
		{"mongodb+srv://cluster.example.net", true}, // not resolved here
		{"localhost:27017", false},
		{"mongodb://localhost:notaport", false},
		{"mongodb://localhost/?connectTimeoutMS=x", false},
		{"mongodb+srv://", false},
		{"postgres://localhost", false},
	} {
		if err := checkURI(c.uri); (err == nil) != c.ok {
			t.Errorf("checkURI(%q) = %v, want ok %v", c.uri, err, c.ok)
		}
	}
}
