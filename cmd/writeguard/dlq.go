package main

// The dlq command: its usage, the dispatch to the subcommands (one file
// each: dlq_stats.go, dlq_list.go, dlq_show.go, dlq_replay.go,
// dlq_discard.go, dlq_watch.go), the connection they share, and the
// output helpers they share. The flags of stats, list, show, replay and
// discard, and their checks, are in dlq_flags.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

const dlqUsage = `Usage: writeguard dlq <stats|list|show|replay|discard|watch> [flags]

Inspect and drain a writeguard dead-letter collection (DLQ): the envelopes
a guarded collection stored for documents the server rejected as invalid.

  stats     counts by status, failing keyword, path, code and namespace
  list      one line per envelope (newest first)
  show ID   one envelope in full: original document and errInfo
            (ID: fingerprint, any unique prefix of it, or the document's _id)
  replay    write pending originals into their collection; envelopes
            written become "replayed", the ones rejected again stay pending
  discard   mark pending envelopes "discarded" (never replayed)
  watch     serve the backlog as metrics until interrupted (--metrics-addr, OTLP)

The server is --uri (a MongoDB deployment) or --data-dir (the embedded
server's files that 'writeguard demo --data-dir DIR' left). Run
'writeguard dlq <command> --help' for each command's flags.

Exit status: 0 ok; 1 operational failure; 2 usage error; 3 replay left
documents still invalid or in conflict.
`

// runDLQ is "writeguard dlq": args start with the subcommand.
func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, dlqUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, dlqUsage)
		return exitOK
	case "stats", "list", "show", "replay", "discard":
		return runDLQCommand(ctx, args[0], args[1:], stdout, stderr)
	case "watch":
		return dlqWatch(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "writeguard dlq: unknown command %q\n\n%s", args[0], dlqUsage)
	return exitUsage
}

// runDLQCommand runs "dlq cmd" (stats, list, show, replay, discard):
// its flags, the connection, the telemetry, then the subcommand.
func runDLQCommand(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	name := "dlq " + cmd
	var f dlqFlags
	fs := dlqFlagSet(cmd, &f)
	pos, code, stop := parseFlags(fs, args, stdout, stderr)
	if stop {
		return code
	}
	filter, validator, msg := checkDLQArgs(cmd, pos, f)
	if msg == "" {
		msg = f.tel.check()
	}
	if msg != "" {
		return usageError(stderr, name, "%s", msg)
	}
	var script *faultproxy.Script
	if validator != nil {
		script, _ = faultproxy.NewScript() // validators are set once the namespaces are known
	}
	c, err := conn.Open(ctx, conn.Options{URI: f.uri, DataDir: f.dataDir, Script: script})
	if err != nil {
		return failure(stderr, name, err)
	}
	defer c.Close(context.Background())
	dlq := c.Client.Database(f.db).Collection(f.coll)
	if err := checkDLQExists(ctx, c.Client.Database(f.db), f.coll); err != nil {
		return failure(stderr, name, err)
	}
	tel, err := startTelemetry(ctx, &f.tel, "writeguard-dlq", stderr)
	if err != nil {
		return failure(stderr, name, err)
	}
	finish := func() {}
	if tel.Enabled() {
		finish = observeRun(ctx, tel, dlq, stderr, name)
	}
	defer func() {
		finish()
		if err := tel.Close(); err != nil {
			fmt.Fprintf(stderr, "writeguard %s: telemetry: %s\n", name, scrubbed(err.Error()))
		}
	}()
	switch cmd {
	case "stats":
		return dlqStats(ctx, dlq, filter, f, stdout, stderr)
	case "list":
		return dlqList(ctx, dlq, filter, f, stdout, stderr)
	case "show":
		return dlqShow(ctx, dlq, pos[0], f, stdout, stderr)
	case "replay":
		return dlqReplay(ctx, c, dlq, filter, f, validator, tel, stdout, stderr)
	default:
		return dlqDiscard(ctx, dlq, filter, f, stdout, stderr)
	}
}

// checkDLQExists fails when db has no collection coll.
func checkDLQExists(ctx context.Context, db *mongo.Database, coll string) error {
	names, err := db.ListCollectionNames(ctx, bson.D{{Key: "name", Value: coll}})
	if err != nil {
		return fmt.Errorf("list collections of %s: %w", db.Name(), err)
	}
	if len(names) == 0 {
		return fmt.Errorf("no dead-letter collection %s.%s (wrong -db or -dlq?)", db.Name(), coll)
	}
	return nil
}

// plural returns "1 envelope", "1,160 envelopes": count (with thousands
// separators) and noun, plural unless count is 1.
func plural[T ~int | ~int64](count T, noun string) string {
	switch {
	case count == 1:
		return n(count) + " " + noun
	case strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "s"):
		return n(count) + " " + noun + "es"
	}
	return n(count) + " " + noun + "s"
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseEnvelopeID reads an envelope _id as dlq list prints it (envelope.
// IDString): an ObjectID's hex, a string (quoted or not), or any other
// value as Extended JSON ({"$numberLong": "7"}). It returns the values it
// may stand for.
func parseEnvelopeID(s string) ([]bson.RawValue, error) {
	if s == "" {
		return nil, errors.New("empty _id")
	}
	if strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[") || strings.HasPrefix(s, `"`) {
		var doc bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(`{"v":`+s+`}`), false, &doc); err != nil {
			return nil, fmt.Errorf("not an _id: want an ObjectID's hex, a string, or Extended JSON: %v", err)
		}
		return []bson.RawValue{doc.Lookup("v")}, nil
	}
	out := []bson.RawValue{rawOf(s)}
	if oid, err := bson.ObjectIDFromHex(s); err == nil {
		out = append(out, rawOf(oid))
	}
	return out, nil
}

func rawOf(v any) bson.RawValue {
	t, b, err := bson.MarshalValue(v)
	if err != nil {
		return bson.RawValue{}
	}
	return bson.RawValue{Type: t, Value: b}
}

// rawString renders a BSON value compactly: strings bare, ObjectIDs as
// hex, anything else as relaxed Extended JSON.
func rawString(v bson.RawValue) string {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if oid, ok := v.ObjectIDOK(); ok {
		return oid.Hex()
	}
	if v.Type == 0 {
		return ""
	}
	return v.String()
}

// rawInt returns an integer BSON value, 0 for anything else.
func rawInt(v bson.RawValue) int64 {
	n, _ := v.AsInt64OK()
	return n
}

var plainWordRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if plainWordRE.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
