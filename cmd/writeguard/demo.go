package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/progress"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/otelhook"
)

const demoUsage = `Usage: writeguard demo [flags]

Loads the December 2010 order lines of UCI "Online Retail" (42,481 real,
dirty rows, embedded in the binary) into writeguard_demo.orders through a
guarded collection, and shows what writeguard did with each row:

  - a $jsonSchema validator rejects 1,171 rows (Quantity < 1, UnitPrice 0,
    non-product StockCode): they are dead-lettered into
    writeguard_demo.dead_letters with their failing keyword and path;
  - 500 rows repeat an earlier row exactly; their _id is derived from the
    row's content, so they meet the _id index (11000) and are skipped;
  - by default the server is an embedded FerretDB behind faultproxy, which
    emulates the validator and injects a seeded schedule of faults:
    stepdowns (189, 10107), replies dropped after the write was applied,
    and write conflicts (112). writeguard retries them with backoff.
    With --sharded the proxy presents the server as a mongos with two
    shards and also fails a shard after it applied part of a batch.

It ends with the accounting check: every row has exactly one disposition,
is where that disposition says, and no document is stored twice.

The demo DROPS writeguard_demo.orders and writeguard_demo.dead_letters
(or the --db you name) before it starts.

Flags:
`

// runDemo is "writeguard demo".
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg demo.Config
	var asJSON bool
	var tf telemetryFlags
	fs := demoFlagSet(&cfg, &asJSON, &tf)
	pos, code, stop := parseFlags(fs, args, stdout, stderr)
	if stop {
		return code
	}
	if code := checkDemoArgs(pos, cfg, &tf, stderr); code != exitOK {
		return code
	}
	if f, ok := stderr.(*os.File); ok && progress.IsTerminal(f) { // the bar is drawn on stderr
		cfg.Progress = stderr
	}
	tel, err := startTelemetry(ctx, &tf, "writeguard-demo", stderr)
	if err != nil {
		return failure(stderr, "demo", err)
	}
	defer func() {
		if err := tel.Close(); err != nil {
			fmt.Fprintf(stderr, "writeguard demo: telemetry: %s\n", scrubbed(err.Error()))
		}
	}()
	printed := false
	report := func(res *demo.Result) error {
		printed = true
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}
		printDemo(stdout, res, cfg, tf.trace)
		return nil
	}
	if tel.Enabled() {
		h, err := otelhook.New(otelhook.WithTracerProvider(tel.TracerProvider), otelhook.WithMeterProvider(tel.MeterProvider))
		if err != nil {
			return failure(stderr, "demo", err)
		}
		cfg.Hooks = []hooks.Hooks{h}
		cfg.Finished = demoFinished(tel, &tf, report, stderr)
	}
	res, err := demo.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "writeguard demo: interrupted before the writes started (%s)\n", scrubbed(err.Error()))
			return exitFail
		}
		return failure(stderr, "demo", err)
	}
	if !printed {
		if err := report(res); err != nil {
			return failure(stderr, "demo", err)
		}
	}
	return demoExit(res, stderr)
}

// demoFlagSet defines the flags of demo into cfg, asJSON and tf, and its
// usage text.
func demoFlagSet(cfg *demo.Config, asJSON *bool, tf *telemetryFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("writeguard demo", flag.ContinueOnError)
	fs.StringVar(&cfg.URI, "uri", "", "MongoDB `URI` to use instead of the embedded server: a real validator, no injected faults")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "keep the embedded server's data in `DIR`, for 'writeguard dlq --data-dir DIR' afterwards")
	fs.Int64Var(&cfg.Seed, "seed", demo.DefaultSeed, "seed of the fault schedule (embedded server)")
	fs.BoolVar(&cfg.NoFaults, "no-faults", false, "inject no faults (the validator is still emulated)")
	fs.IntVar(&cfg.Batch, "batch", demo.DefaultBatch, "documents per InsertMany (unordered)")
	fs.IntVar(&cfg.Workers, "workers", demo.DefaultWorkers, "concurrent InsertMany calls")
	fs.IntVar(&cfg.Limit, "limit", 0, "load only the first `N` rows (0: all 42,481)")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", demo.DefaultMaxAttempts, "writeguard's attempts per document, the first included (1: no retries, so injected faults stay unresolved and the check fails)")
	fs.StringVar(&cfg.Database, "db", demo.DefaultDatabase, "`database` of the target (orders) and dead-letter (dead_letters) collections")
	fs.BoolVar(asJSON, "json", false, "print one JSON object instead of the tables")
	fs.BoolVar(&cfg.Sharded, "sharded", false, "present the embedded server as a mongos with two shards (maxWriteBatchSize 100; shard failures after partial application among the faults)")
	addTelemetryFlags(fs, tf, true)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nExit status: 0 ok; 1 operational failure or interrupted (the accounting is still\nprinted); 2 usage error; 3 accounting check failed.\n")
	}
	return fs
}

// checkDemoArgs checks the arguments of demo before any connection: it
// returns exitOK, or prints a usage error naming what is wrong and returns
// its exit status.
func checkDemoArgs(pos []string, cfg demo.Config, tf *telemetryFlags, stderr io.Writer) int {
	switch {
	case len(pos) > 0:
		return usageError(stderr, "demo", "unexpected argument %q", pos[0])
	case cfg.Batch < 1 || cfg.Batch > 100000:
		return usageError(stderr, "demo", "-batch %d: want 1..100000", cfg.Batch)
	case cfg.Workers < 1 || cfg.Workers > 64:
		return usageError(stderr, "demo", "-workers %d: want 1..64", cfg.Workers)
	case cfg.Limit < 0:
		return usageError(stderr, "demo", "-limit %d: want ≥ 0", cfg.Limit)
	case cfg.MaxAttempts < 1 || cfg.MaxAttempts > 100:
		return usageError(stderr, "demo", "-max-attempts %d: want 1..100 (the first attempt included)", cfg.MaxAttempts)
	case cfg.URI != "" && cfg.Sharded:
		return usageError(stderr, "demo", "-sharded applies to the embedded server only; drop it or -uri")
	case cfg.URI != "" && cfg.DataDir != "":
		return usageError(stderr, "demo", "-data-dir applies to the embedded server only; drop it or -uri")
	case cfg.Database == "":
		return usageError(stderr, "demo", "-db must not be empty")
	case tf.check() != "":
		return usageError(stderr, "demo", "%s", tf.check())
	}
	return exitOK
}

// demoFinished is the demo's Config.Finished when telemetry is exported:
// the backlog gauges of the demo's dead-letter collection, then the report
// (with --linger), then --linger for the scrapers, then a flush of the
// exporters.
func demoFinished(tel *telemetry, tf *telemetryFlags, report func(*demo.Result) error, stderr io.Writer) func(context.Context, *demo.Result, *mongo.Collection) {
	return func(ctx context.Context, res *demo.Result, dlq *mongo.Collection) {
		obs, err := otelhook.ObserveDLQ(context.WithoutCancel(ctx), dlq,
			otelhook.WithMeterProvider(tel.MeterProvider), otelhook.WithPollInterval(time.Second))
		if err != nil {
			fmt.Fprintf(stderr, "writeguard demo: dead-letter gauges: %s\n", scrubbed(err.Error()))
		}
		if tf.linger > 0 {
			if err := report(res); err != nil {
				fmt.Fprintf(stderr, "writeguard demo: %s\n", scrubbed(err.Error()))
			}
		}
		tel.Linger(ctx)
		if err := tel.Flush(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(stderr, "writeguard demo: telemetry: %s\n", scrubbed(err.Error()))
		}
		if obs != nil {
			_ = obs.Stop()
		}
	}
}

// demoExit is the exit status of a demo that ran: 3 when the accounting
// check failed, 1 when it was interrupted.
func demoExit(res *demo.Result, stderr io.Writer) int {
	switch {
	case !res.OK:
		return exitCheck
	case res.Interrupted:
		fmt.Fprintln(stderr, "writeguard demo: interrupted; the rows not sent are not_attempted, nothing was lost")
		return exitFail
	}
	return exitOK
}

// n formats an integer with thousands separators.
func n[T ~int | ~int64](v T) string {
	s := fmt.Sprint(int64(v))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func pct(part, whole int) string {
	if whole == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f %%", 100*float64(part)/float64(whole))
}

func printDemo(w io.Writer, r *demo.Result, cfg demo.Config, trace string) {
	server := "embedded FerretDB (SQLite) behind faultproxy: validator emulated, "
	if r.FaultsActive {
		server += fmt.Sprintf("faults injected (seed %d)", r.Seed)
	} else {
		server += "no faults"
	}
	if r.Sharded {
		server = fmt.Sprintf("embedded FerretDB (SQLite) behind faultproxy as a mongos (2 shards, maxWriteBatchSize %d): validator emulated, ", demo.ShardedLimits.MaxWriteBatchSize)
		if r.FaultsActive {
			server += fmt.Sprintf("faults injected, shard failures included (seed %d)", r.Seed)
		} else {
			server += "no faults"
		}
	}
	if r.Server != "embedded-ferretdb" {
		server = "MongoDB at --uri: real $jsonSchema validator, no injected faults"
	}
	fmt.Fprintf(w, "writeguard demo: %s order lines (UCI Online Retail, Dec 2010) -> %s\n", n(r.Input), r.Namespace)
	fmt.Fprintf(w, "server:  %s\n", server)
	fmt.Fprintf(w, "writes:  InsertMany, unordered, %d per batch, %s: %s in %.2fs\n",
		r.BatchSize, plural(r.Workers, "worker"), plural(r.Batches, "batch"), r.WriteSeconds)
	if r.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED: batches not started are counted not_attempted")
	}
	fmt.Fprintln(w)

	printDispositions(w, r)
	printAmplification(w, r)
	printDLQSummary(w, r)
	printAccounting(w, r)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", p)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "elapsed %.2fs", r.ElapsedSeconds)
	if r.OK {
		fmt.Fprint(w, "; check passed")
	} else {
		fmt.Fprint(w, "; CHECK FAILED")
	}
	fmt.Fprintln(w)
	if r.DataDir != "" && cfg.DataDir != "" {
		fmt.Fprintf(w, "next:    writeguard dlq stats --data-dir %s\n", cfg.DataDir)
	}
	if trace != "" {
		fmt.Fprintf(w, "trace:   %s\n", trace)
	}
}

// printDispositions prints one line per disposition, with the keyword
// paths of the dead-lettered rows.
func printDispositions(w io.Writer, r *demo.Result) {
	line := func(name string, v int, note string) {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-18s %8s  %8s  %s", name, n(v), pct(v, r.Input), note), " "))
	}
	fmt.Fprintln(w, "DISPOSITIONS (one per row)")
	line("written", r.Written, "")
	line("already_written", r.AlreadyWritten, "reply lost after the write was applied; read back: ours")
	line("dead_lettered", r.DeadLettered, "rejected by the validator -> "+r.DLQ.Namespace)
	for _, k := range sortedKeys(r.KeywordPaths) {
		fmt.Fprintf(w, "    %-18s %6s\n", k, n(r.KeywordPaths[k]))
	}
	line("conflicts", r.Conflicts, "duplicate rows (same content = same _id): conflict_skipped")
	if r.DuplicatesReadBack > 0 {
		fmt.Fprintf(w, "  %-18s %8s  %8s  (%s of them met their twin after a lost reply: read back identical)\n", "", "", "", n(r.DuplicatesReadBack))
	}
	line("failed", r.Failed, "unknown or permanent error, not retried; in the Report")
	line("exhausted", r.Exhausted, "transient errors until attempts or retry budget ran out")
	line("unknown", r.Unknown, "in flight when the call stopped; may be written")
	line("not_attempted", r.NotAttempted, "never sent")
	for _, k := range sortedKeys(r.Other) {
		line(k, r.Other[k], "")
	}
	line("total", r.Written+r.AlreadyWritten+r.DeadLettered+r.Conflicts+r.Failed+r.Exhausted+r.Unknown+r.NotAttempted+sum(r.Other), "")

}

func printAmplification(w io.Writer, r *demo.Result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "AMPLIFICATION")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	more := ""
	if extra := r.Attempts - int64(r.Batches) - r.Retries; extra > 0 {
		// One call sends one command per attempt: a batch over the
		// server's limits (maxWriteBatchSize, the sharded demo's 100) is
		// several attempts, and so is an ordered batch resumed after each
		// rejected row, and each of their retries.
		more = fmt.Sprintf("; %s more for batches split at the server's limits or resumed after a rejected row", n(extra))
	}
	fmt.Fprintf(tw, "  attempts (driver calls)\t%s for %s batches: %s retries%s%s\n", n(r.Attempts), n(r.Batches), n(r.Retries), causes(r.RetriesByCause), more)
	fmt.Fprintf(tw, "  documents sent\t%s = %.4f per row\n", n(r.DocumentsSent), r.Amplification)
	fmt.Fprintf(tw, "  server commands\t%s = %.4f per row (%s)\n", n(r.ServerCommands), r.CommandsPerDocument, kv(r.ServerCommandsByName))
	if len(r.Faults) > 0 {
		fmt.Fprintf(tw, "  faults injected\t%s\n", kv(r.Faults))
	}
	if r.BudgetExhausted > 0 {
		fmt.Fprintf(tw, "  retry budget refused\t%s retries\n", n(r.BudgetExhausted))
	}
	if len(r.ChildBatches) > 0 {
		fmt.Fprintf(tw, "  child batches (mongos)\t%s\n", kv(r.ChildBatches))
	}
	tw.Flush()

}

func printDLQSummary(w io.Writer, r *demo.Result) {
	s := r.DLQ.Summary
	fmt.Fprintln(w)
	fmt.Fprintf(w, "DEAD-LETTER QUEUE %s: %s envelopes (%s captures), %s pending\n", r.DLQ.Namespace, n(s.Envelopes), n(s.Attempts), n(s.Pending))
	if s.Attempts > s.Envelopes {
		fmt.Fprintf(w, "  (identical rejected rows share one envelope, counted as captures; the groups below count envelopes)\n")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  by keyword\t%s\n", groups(s.ByKeyword))
	fmt.Fprintf(tw, "  by path\t%s\n", groups(s.ByPath))
	var codes []string
	for _, c := range s.ByCode {
		codes = append(codes, fmt.Sprintf("%s %s", codeString(c), n(c.Envelopes)))
	}
	fmt.Fprintf(tw, "  by code\t%s\n", strings.Join(codes, ", "))
	fmt.Fprintf(tw, "  setup\t%s\n", r.DLQ.Setup)
	tw.Flush()

}

func printAccounting(w io.Writer, r *demo.Result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ACCOUNTING")
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	sumAll := r.Written + r.AlreadyWritten + r.DeadLettered + r.Conflicts + r.Failed + r.Exhausted + r.Unknown + r.NotAttempted + sum(r.Other)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  rows in = sum of dispositions\t%s = %s\t%s\n", n(r.Input), n(sumAll), mark(sumAll == r.Input))
	fmt.Fprintf(tw, "  target documents\t%s, %s distinct _ids, %s expected, %s missing\t%s\n",
		n(r.Target.Documents), n(r.Target.DistinctIDs), n(r.Target.Expected), n(r.Target.Missing), mark(r.Target.Missing == 0))
	fmt.Fprintf(tw, "  duplicates in target\t%s\t%s\n", n(r.Duplicates), mark(r.Duplicates == 0))
	fmt.Fprintf(tw, "  lost\t%s\t%s\n", n(r.Lost), mark(r.Lost == 0))
	tw.Flush()
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func kv[V ~int | ~int64](m map[string]V) string {
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %s", k, n(m[k])))
	}
	return strings.Join(parts, ", ")
}

func causes(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	return " (by code: " + kv(m) + ")"
}

// codeNames names the codes a write error carries without a codeName.
var codeNames = map[int32]string{121: "DocumentValidationFailure", 11000: "DuplicateKey", 112: "WriteConflict"}

func codeString(c deadletter.CodeGroup) string {
	if c.CodeName == "" {
		c.CodeName = codeNames[c.Code]
	}
	return c.String()
}

// groups formats a breakdown on one line: "minimum 990, pattern 198".
func groups(gs []deadletter.Group) string {
	parts := make([]string, 0, len(gs))
	for _, g := range gs {
		parts = append(parts, fmt.Sprintf("%s %s", g.Key, n(g.Envelopes)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
