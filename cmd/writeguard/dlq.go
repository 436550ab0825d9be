package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/replay"
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

// listFlag is a repeatable, comma-separated string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

type codeFlag []int32

func (c *codeFlag) String() string { return fmt.Sprint([]int32(*c)) }
func (c *codeFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		if err != nil || v <= 0 {
			return fmt.Errorf("%q is not a positive error code", p)
		}
		*c = append(*c, int32(v))
	}
	return nil
}

// ageFlag is an -older-than or -newer-than value: a whole number of days
// ("3d") or a Go duration ("90m", "36h", "1h30m"; time.ParseDuration).
type ageFlag struct{ d *time.Duration }

func (a ageFlag) String() string {
	if a.d == nil || *a.d == 0 {
		return ""
	}
	return a.d.String()
}

func (a ageFlag) Set(s string) error {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if v, err := strconv.ParseUint(days, 10, 16); err == nil {
			*a.d = time.Duration(v) * 24 * time.Hour
			return nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not an age: want a number of days (3d) or a Go duration (90m, 36h, 1h30m; units h, m, s)", s)
	}
	*a.d = d
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

// dlqFlags are the flags every dlq command takes.
type dlqFlags struct {
	uri, dataDir, db, coll string
	asJSON                 bool

	keywords, paths, namespaces, statuses listFlag
	codes                                 codeFlag
	olderThan, newerThan                  time.Duration

	// list
	limit int
	// replay, discard
	dryRun      bool
	batch       int
	validator   string
	noValidator bool
	workers     int
	lease       time.Duration
	all         bool
	// replay: what it may write, quarantine
	into, allow                     listFlag
	allowMulti                      bool
	quarantineAfter                 int
	includeQuarantined, includeHeld bool

	// telemetry: --metrics-addr, --otlp-endpoint, --linger
	tel telemetryFlags

	// list, discard: envelopes that cannot be decoded; discard: by _id
	undecodable bool
	ids         listFlag
}

var dlqCommandHelp = map[string]string{
	"stats": `Usage: writeguard dlq stats [flags]

Counts the envelopes the filters select (every status unless --status says),
by status, failing keyword, failing path, error code and namespace.
`,
	"list": `Usage: writeguard dlq list [flags]

Lists the envelopes the filters select, newest first (every status unless
--status says), at most --limit of them. An envelope that cannot be
decoded (a field of the wrong type: a hand-edited or foreign document) is
listed as UNDECODABLE with its _id and the field; --undecodable lists only
those.
`,
	"show": `Usage: writeguard dlq show [flags] ID

Shows one envelope in full, its original document and the server's errInfo
as Extended JSON. ID is a fingerprint or any unique prefix of one (hex
digits, either case), the dead-lettered document's _id, or the envelope's
id (list --json, or as list prints an undecodable envelope's _id). An
ambiguous prefix is a usage error naming the envelopes it matches; no
match exits 1. An envelope that cannot be decoded is shown as stored, with
the field that is wrong.
`,
	"replay": `Usage: writeguard dlq replay [flags]

Writes the originals of the pending envelopes the filters select into
their collection (the envelope's namespace), in batches, through a guarded
collection that retries transient errors. Written envelopes become
"replayed"; those rejected again stay pending with one more attempt;
duplicates of a document already written by an earlier (or interrupted)
replay count as replayed. Running it again is safe: it resumes where an
interrupted run stopped and never writes an inserted document twice.

Anyone who can write the dead-letter collection can forge an envelope:
its namespace and its original decide where the replay writes and what
it runs, with your rights. So the replay writes only into the namespaces
you name with --into db.collection (repeatable; required with --uri; with
--data-dir the demo's collection), never into admin, local, config, a
system.* collection or the dead-letter collection and its side
collections; it runs inserts only unless --allow update,replace,delete
says otherwise, and updateMany, deleteMany and filters without an _id
condition only with --allow-multi. Each envelope refused stays pending
with the reason recorded (list --json, show) and is counted; exit 3.

An update, replace or delete whose replay was in flight when its replay
died (killed, lost connection) may or may not have been applied: the
next replay holds it (pending, replay_hold) instead of running it again;
check the target, then discard it or replay it with --include-held.
An envelope whose replay failed --quarantine-after times (default 5)
becomes "quarantined" and is skipped; --include-quarantined retries it.

With --data-dir there is no validator (the demo's validator lived in its
proxy): give --validator FILE (Extended JSON, e.g. {"$jsonSchema": {...}})
to enforce one on the replayed writes, or --no-validator to write every
original unchecked. With --uri the target collection's own validator
applies: widen it (collMod) first; a collection without one needs
--no-validator too. The command says on stderr what will check the writes
before it starts.

--workers N replays with N workers at once; each claims its batches with
a lease in the collection <dlq>_leases, so several workers, or several
"dlq replay" processes started independently, drain one backlog without
replaying an envelope twice, and each ends: an envelope is tried at most
once by each run. Envelopes claimed by a worker that dies wait --lease
for another.

--dry-run writes nothing and says how many envelopes would pass the
validator (the target's, or --validator FILE's); it takes the same
validator flags as the replay it rehearses (--no-validator: every
envelope would pass).
`,
	"discard": `Usage: writeguard dlq discard [flags]

Marks the pending envelopes the filters select "discarded": they are kept
for inspection but never replayed (a recapture of the same payload makes
one pending again). At least one filter, or --all, is required.

An envelope a running replay holds is not discarded: the replay writes it
or records why not. The command says how many it left and exits 1; run it
again once the replay has ended. (--status quarantined discards
quarantined envelopes.)

--id ID discards the envelope with that _id, and --undecodable every
envelope the filters select that cannot be decoded, whatever their status
(but replayed): the way to take a hand-edited or foreign envelope out of
the way.
`,
}

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

// dlqFlagSet defines the flags of dlq cmd into f, and its usage text.
func dlqFlagSet(cmd string, f *dlqFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("writeguard dlq "+cmd, flag.ContinueOnError)
	fs.StringVar(&f.uri, "uri", "", "MongoDB `URI` of the deployment holding the dead-letter collection")
	fs.StringVar(&f.dataDir, "data-dir", "", "use the embedded server's data in `DIR` (as left by 'writeguard demo --data-dir DIR')")
	fs.StringVar(&f.db, "db", demo.DefaultDatabase, "`database` of the dead-letter collection")
	fs.StringVar(&f.coll, "dlq", demo.DefaultDLQ, "dead-letter `collection`")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	addTelemetryFlags(fs, &f.tel, false)
	if cmd != "show" {
		fs.Var(&f.keywords, "keyword", "select envelopes with this failing `keyword` (minimum, pattern, required, ...); repeatable or comma-separated")
		fs.Var(&f.paths, "path", "select envelopes failing on this dotted `path` (Quantity, address.zip); repeatable")
		fs.Var(&f.codes, "code", "select envelopes by server error `code` (121); repeatable")
		fs.Var(&f.namespaces, "namespace", "select envelopes of this target `db.collection`; repeatable")
		fs.Var(&f.statuses, "status", "select envelopes by `status`: pending, replayed, discarded, quarantined; repeatable")
		fs.Var(ageFlag{&f.olderThan}, "older-than", "select envelopes first seen more than `AGE` ago: days (3d) or a Go duration (90m, 36h, 1h30m)")
		fs.Var(ageFlag{&f.newerThan}, "newer-than", "select envelopes first seen at most `AGE` ago: days (3d) or a Go duration (90m, 36h)")
	}
	switch cmd {
	case "list":
		fs.IntVar(&f.limit, "limit", 20, "list at most `N` envelopes (0: all)")
		fs.BoolVar(&f.undecodable, "undecodable", false, "list only the envelopes that cannot be decoded (a field of the wrong type)")
	case "replay":
		addReplayFlags(fs, f)
	case "discard":
		fs.BoolVar(&f.dryRun, "dry-run", false, "discard nothing; say how many envelopes would be discarded")
		fs.BoolVar(&f.all, "all", false, "discard every pending envelope (when no filter is given)")
		fs.BoolVar(&f.undecodable, "undecodable", false, "discard the envelopes that cannot be decoded (a field of the wrong type), whatever their status")
		fs.Var(&f.ids, "id", "discard the envelope with this `_id` (list --json's id, or as dlq list prints it), whatever it holds; repeatable")
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), dlqCommandHelp[cmd])
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nExit status: 0 ok; 1 operational failure; 2 usage error")
		if cmd == "replay" {
			fmt.Fprint(fs.Output(), "; 3 documents still invalid or in conflict")
		}
		fmt.Fprintln(fs.Output(), ".")
	}
	return fs
}

// checkDLQArgs checks the arguments of dlq cmd before any connection and
// returns its filter and validator, or a usage error message.
func checkDLQArgs(cmd string, pos []string, f dlqFlags) (deadletter.Filter, bson.D, string) {
	var none deadletter.Filter
	switch {
	case cmd == "show" && len(pos) != 1:
		return none, nil, fmt.Sprintf("want exactly one ID (fingerprint, prefix, or document _id), got %d arguments", len(pos))
	case cmd != "show" && len(pos) > 0:
		return none, nil, fmt.Sprintf("unexpected argument %q", pos[0])
	case f.uri == "" && f.dataDir == "":
		return none, nil, "need -uri URI or -data-dir DIR to find the dead-letter collection"
	case f.uri != "" && f.dataDir != "":
		return none, nil, "-uri and -data-dir are exclusive"
	case f.limit < 0:
		return none, nil, fmt.Sprintf("-limit %d: want ≥ 0", f.limit)
	case cmd == "replay" && checkReplayFlags(f) != "":
		return none, nil, checkReplayFlags(f)
	}
	if d, err := os.Stat(f.dataDir); f.dataDir != "" && (err != nil || !d.IsDir()) {
		return none, nil, fmt.Sprintf("-data-dir %s: not a directory (run 'writeguard demo --data-dir %s' first)", f.dataDir, f.dataDir)
	}
	filter := deadletter.Filter{
		Keywords: f.keywords, Paths: f.paths, Codes: f.codes, Namespaces: f.namespaces,
		Statuses: f.statuses, OlderThan: f.olderThan, NewerThan: f.newerThan,
	}
	if err := filter.Validate(); err != nil {
		return none, nil, strings.TrimPrefix(err.Error(), "envelope: ")
	}
	if msg := checkStatuses(cmd, f.statuses); msg != "" {
		return none, nil, msg
	}
	if cmd == "discard" && filter.IsZero() && !f.all && !f.undecodable && len(f.ids) == 0 {
		return none, nil, "no filter: give -keyword/-path/-code/-namespace/-older-than/..., -id, -undecodable, or -all to discard every pending envelope"
	}
	if cmd == "discard" && len(f.ids) > 0 && (!filter.IsZero() || f.all || f.undecodable) {
		return none, nil, "-id selects envelopes by _id alone: drop the other filters, -all and -undecodable"
	}
	for _, id := range f.ids {
		if _, err := parseEnvelopeID(id); err != nil {
			return none, nil, fmt.Sprintf("-id %s: %v", id, err)
		}
	}
	if f.validator == "" {
		return filter, nil, ""
	}
	v, err := readValidator(f.validator)
	if err != nil {
		return none, nil, fmt.Sprintf("-validator %s: %v", f.validator, err)
	}
	return filter, v, ""
}

// checkStatuses: replay and discard act on pending and quarantined
// envelopes (replay also on replayed ones, to check them again).
func checkStatuses(cmd string, statuses []string) string {
	if cmd != "replay" && cmd != "discard" {
		return ""
	}
	for _, s := range statuses {
		if s != envelope.StatusPending && s != envelope.StatusQuarantined && !(cmd == "replay" && s == envelope.StatusReplayed) {
			return fmt.Sprintf("-status %s: %s acts on pending and quarantined envelopes only", s, cmd)
		}
	}
	return ""
}

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

// readValidator reads a validator document from an Extended JSON file.
func readValidator(path string) (bson.D, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v bson.D
	if err := bson.UnmarshalExtJSON(data, false, &v); err != nil {
		return nil, fmt.Errorf("not an Extended JSON document: %w", err)
	}
	if _, err := jsonschema.Compile(v); err != nil {
		return nil, err
	}
	return v, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ---- stats ----

func dlqStats(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	s, err := deadletter.Stats(ctx, dlq, filter)
	if err != nil {
		return failure(stderr, "dlq stats", err)
	}
	if f.asJSON {
		out := map[string]any{
			"collection":   f.db + "." + f.coll,
			"envelopes":    s.Envelopes,
			"attempts":     s.Attempts,
			"pending":      s.Pending,
			"quarantined":  s.Quarantined,
			"held":         s.Held,
			"by_status":    groupMap(s.ByStatus),
			"by_keyword":   groupMap(s.ByKeyword),
			"by_path":      groupMap(s.ByPath),
			"by_code":      codeMap(s.ByCode),
			"by_namespace": groupMap(s.ByNamespace),
		}
		if !s.OldestPending.IsZero() {
			out["oldest_pending"] = s.OldestPending
			out["oldest_pending_age_seconds"] = int64(s.OldestPendingAge.Seconds())
		}
		if s.Undecodable > 0 {
			out["undecodable"] = s.Undecodable
			out["undecodable_envelopes"] = decodeProblems(s.UndecodableErrors)
		}
		if s.DiscardedUndecodable > 0 {
			out["undecodable_discarded"] = s.DiscardedUndecodable
		}
		if err := writeJSON(stdout, out); err != nil {
			return failure(stderr, "dlq stats", err)
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "%s.%s: %s (%s), %s pending", f.db, f.coll, plural(s.Envelopes, "envelope"), plural(s.Attempts, "rejection"), n(s.Pending))
	if !s.OldestPending.IsZero() {
		fmt.Fprintf(stdout, ", oldest pending first seen %s ago", s.OldestPendingAge.Round(time.Second))
	}
	if s.Quarantined > 0 || s.Held > 0 {
		fmt.Fprintf(stdout, "; %s quarantined, %s held for an operator", n(s.Quarantined), n(s.Held))
	}
	fmt.Fprintln(stdout)
	if s.Undecodable > 0 {
		fmt.Fprintf(stdout, "%s cannot be decoded (not counted above): 'writeguard dlq list --undecodable' lists them\n", plural(s.Undecodable, "envelope"))
		for _, de := range s.UndecodableErrors[:min(len(s.UndecodableErrors), 5)] {
			fmt.Fprintf(stdout, "  %s\n", de.Error())
		}
	}
	if s.DiscardedUndecodable > 0 {
		fmt.Fprintf(stdout, "%s that cannot be decoded %s discarded (not counted above)\n", plural(s.DiscardedUndecodable, "envelope"), wasWere(s.DiscardedUndecodable))
	}
	width := 12
	for _, gs := range [][]deadletter.Group{s.ByKeyword, s.ByPath, s.ByNamespace} {
		for _, g := range gs {
			width = max(width, len(g.Key)+2)
		}
	}
	for _, c := range s.ByCode {
		width = max(width, len(codeString(c))+2)
	}
	section := func(title string, gs []deadletter.Group) {
		if len(gs) == 0 {
			return
		}
		fmt.Fprintf(stdout, "\n%-*s %10s %10s\n", width, title, "ENVELOPES", "REJECTIONS")
		for _, g := range gs {
			fmt.Fprintf(stdout, "  %-*s %10s %10s\n", width-2, g.Key, n(g.Envelopes), n(g.Attempts))
		}
	}
	section("STATUS", s.ByStatus)
	section("KEYWORD", s.ByKeyword)
	section("PATH", s.ByPath)
	var codes []deadletter.Group
	for _, c := range s.ByCode {
		codes = append(codes, deadletter.Group{Key: codeString(c), Envelopes: c.Envelopes, Attempts: c.Attempts})
	}
	section("CODE", codes)
	section("NAMESPACE", s.ByNamespace)
	return exitOK
}

func groupMap(gs []deadletter.Group) map[string]int64 {
	m := make(map[string]int64, len(gs))
	for _, g := range gs {
		m[g.Key] = g.Envelopes
	}
	return m
}

func codeMap(gs []deadletter.CodeGroup) map[string]int64 {
	m := make(map[string]int64, len(gs))
	for _, g := range gs {
		m[strconv.Itoa(int(g.Code))] = g.Envelopes
	}
	return m
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

// ---- list ----

type listed struct {
	ID              string    `json:"id"`
	Fingerprint     string    `json:"fingerprint"`
	DocumentID      string    `json:"document_id"`
	Status          string    `json:"status"`
	Code            int32     `json:"code"`
	CodeName        string    `json:"code_name,omitempty"`
	FailingKeywords []string  `json:"failing_keywords"`
	FailingPaths    []string  `json:"failing_paths"`
	Namespace       string    `json:"namespace"`
	Attempts        int       `json:"attempts"`
	FirstSeen       time.Time `json:"first_seen"`
	LastSeen        time.Time `json:"last_seen"`
	// ReplayFailures, ReplayReason and ReplayHold are what replay
	// recorded (envelope.FieldReplayFailures, ...).
	ReplayFailures int    `json:"replay_failures,omitempty"`
	ReplayReason   string `json:"replay_reason,omitempty"`
	ReplayHold     string `json:"replay_hold,omitempty"`
	// DecodeError says why the envelope cannot be decoded (the other
	// fields are then empty but id, and fingerprint and status when they
	// are strings).
	DecodeError *decodeProblem `json:"decode_error,omitempty"`
}

// decodeProblem is an envelope.DecodeError in JSON: which envelope, which
// field, what it holds and what it should; never the value.
type decodeProblem struct {
	ID      string `json:"id"`
	Field   string `json:"field,omitempty"`
	Type    string `json:"type,omitempty"`
	Want    string `json:"want,omitempty"`
	Message string `json:"message"`
}

func toProblem(de *envelope.DecodeError) *decodeProblem {
	p := &decodeProblem{ID: envelope.IDString(de.ID), Field: de.Field, Want: de.Want, Message: de.Error()}
	switch {
	case de.Field != "" && de.Type == 0:
		p.Type = "missing"
	case de.Field != "":
		p.Type = de.Type.String()
	}
	return p
}

func decodeProblems(des []*envelope.DecodeError) []*decodeProblem {
	out := make([]*decodeProblem, len(des))
	for i, de := range des {
		out[i] = toProblem(de)
	}
	return out
}

// toListed decodes a stored envelope for list and show. One that cannot
// be decoded is data too: it is returned with DecodeError set, and
// the error is nil.
func toListed(raw bson.Raw) (listed, error) {
	e, err := envelope.Decode(raw)
	if err != nil {
		var de *envelope.DecodeError
		if !errors.As(err, &de) {
			return listed{}, err
		}
		l := listed{ID: rawString(raw.Lookup("_id")), DecodeError: toProblem(de), FailingKeywords: []string{}, FailingPaths: []string{}}
		l.Fingerprint, _ = raw.Lookup("fingerprint").StringValueOK()
		l.Status, _ = raw.Lookup("status").StringValueOK()
		return l, nil
	}
	return listed{
		ID: rawString(raw.Lookup("_id")), Fingerprint: e.Fingerprint, DocumentID: rawString(e.DocumentID),
		Status: e.Status, Code: e.Code, CodeName: e.CodeName, FailingKeywords: e.FailingKeywords,
		FailingPaths: e.FailingPaths, Namespace: e.Namespace, Attempts: e.Attempts,
		FirstSeen: e.FirstSeen, LastSeen: e.LastSeen,
		ReplayFailures: int(rawInt(raw.Lookup(envelope.FieldReplayFailures))),
		ReplayReason:   rawString(raw.Lookup(envelope.FieldReplayReason)),
		ReplayHold:     rawString(raw.Lookup(envelope.FieldReplayHold)),
	}, nil
}

// rawInt returns an integer BSON value, 0 for anything else.
func rawInt(v bson.RawValue) int64 {
	n, _ := v.AsInt64OK()
	return n
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

func dlqList(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	q, err := filter.Query(time.Now())
	if err != nil {
		return usageError(stderr, "dlq list", "%v", err)
	}
	// Whole envelopes (original included): an original of the wrong type
	// is an undecodable envelope too. err_info is not decoded.
	fo := options.Find().SetSort(bson.D{{Key: "last_seen", Value: -1}, {Key: "_id", Value: -1}}).
		SetProjection(bson.D{{Key: "err_info", Value: 0}, {Key: "err_info_raw", Value: 0}})
	if f.limit > 0 && !f.undecodable {
		fo.SetLimit(int64(f.limit))
	}
	cur, err := dlq.Find(ctx, q, fo)
	if err != nil {
		return failure(stderr, "dlq list", err)
	}
	defer cur.Close(ctx)
	var items []listed
	for cur.Next(ctx) {
		l, err := toListed(cur.Current)
		if err != nil {
			return failure(stderr, "dlq list", fmt.Errorf("decode envelope: %w", err))
		}
		if f.undecodable && l.DecodeError == nil {
			continue
		}
		items = append(items, l)
		if f.limit > 0 && len(items) == f.limit {
			break
		}
	}
	if err := cur.Err(); err != nil {
		return failure(stderr, "dlq list", err)
	}
	if f.asJSON {
		if items == nil {
			items = []listed{}
		}
		if err := writeJSON(stdout, items); err != nil {
			return failure(stderr, "dlq list", err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FINGERPRINT\tDOCUMENT _ID\tSTATUS\tCODE\tKEYWORDS\tPATHS\tATTEMPTS\tLAST SEEN\tNAMESPACE")
	var bad []*decodeProblem
	for _, l := range items {
		if l.DecodeError != nil {
			bad = append(bad, l.DecodeError)
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\n", orDash(l.Fingerprint[:min(12, len(l.Fingerprint))]), "?", "UNDECODABLE")
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", l.Fingerprint[:min(12, len(l.Fingerprint))], l.DocumentID,
			l.Status, l.Code, strings.Join(l.FailingKeywords, ","), strings.Join(l.FailingPaths, ","), l.Attempts,
			l.LastSeen.UTC().Format(time.RFC3339), l.Namespace)
	}
	tw.Flush()
	for _, p := range bad {
		fmt.Fprintf(stdout, "%s\n  (writeguard dlq show %s; writeguard dlq discard --id %s)\n", p.Message, shellWord(p.ID), shellWord(p.ID))
	}
	fmt.Fprintf(stdout, "%s listed", plural(len(items), "envelope"))
	if len(bad) > 0 {
		fmt.Fprintf(stdout, ", %d undecodable", len(bad))
	}
	if f.limit > 0 && len(items) == f.limit {
		fmt.Fprintf(stdout, " (limit %d; -limit 0 lists all)", f.limit)
	}
	fmt.Fprintln(stdout)
	return exitOK
}

// ---- show ----

var hexRE = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

// showAmbiguous is how many of the envelopes an ambiguous prefix matches
// dlq show names.
const showAmbiguous = 5

// shown is dlq show --json's object: list --json's fields under the same
// names, then the rest of the envelope.
type shown struct {
	listed
	ErrMsg      string     `json:"errmsg,omitempty"`
	ReplayedAt  *time.Time `json:"replayed_at,omitempty"`
	DiscardedAt *time.Time `json:"discarded_at,omitempty"`
	TraceID     string     `json:"trace_id,omitempty"`
	SpanID      string     `json:"span_id,omitempty"`
	// Original and ErrInfo are relaxed Extended JSON, whether stored as
	// sub-documents or as exact bytes (Binary says which).
	Original json.RawMessage `json:"original,omitempty"`
	ErrInfo  json.RawMessage `json:"err_info,omitempty"`
	// Format 2: the write's kind, what is stored as binary, withheld or
	// cut.
	Kind         string                   `json:"kind,omitempty"`
	Binary       []envelope.BinaryField   `json:"binary,omitempty"`
	Withheld     []envelope.WithheldField `json:"withheld,omitempty"`
	WithheldNote string                   `json:"withheld_note,omitempty"`
	Cut          []envelope.CutField      `json:"cut,omitempty"`
}

func toShown(raw bson.Raw) (shown, error) {
	l, err := toListed(raw)
	if err != nil {
		return shown{}, err
	}
	e, err := envelope.Decode(raw)
	if err != nil {
		return shown{}, err
	}
	out := shown{listed: l, ErrMsg: e.ErrMsg, TraceID: e.TraceID, SpanID: e.SpanID,
		Kind: e.Kind, Binary: e.Binary, Withheld: e.Withheld, WithheldNote: e.WithheldNote, Cut: e.Cut}
	if !e.ReplayedAt.IsZero() {
		out.ReplayedAt = &e.ReplayedAt
	}
	if !e.DiscardedAt.IsZero() {
		out.DiscardedAt = &e.DiscardedAt
	}
	for _, x := range []struct {
		key string
		doc bson.Raw
		dst *json.RawMessage
	}{{"original", e.Original, &out.Original}, {"err_info", e.ErrInfo, &out.ErrInfo}} {
		if doc := x.doc; len(doc) > 0 {
			js, err := bson.MarshalExtJSON(doc, false, false)
			if err != nil {
				return shown{}, fmt.Errorf("%s: %w", x.key, err)
			}
			*x.dst = js
		}
	}
	return out, nil
}

// findEnvelope finds the envelope id names: a fingerprint or any prefix of
// one (hex digits, either case), else the dead-lettered document's _id (a
// string or an ObjectID's hex), else the envelope's own _id (list's "id"). It returns the envelopes it matched, at
// most showAmbiguous+1 of them.
func findEnvelope(ctx context.Context, dlq *mongo.Collection, id string) ([]bson.Raw, error) {
	var found []bson.Raw
	find := func(q bson.D) error {
		cur, err := dlq.Find(ctx, q, options.Find().SetLimit(showAmbiguous+1).SetSort(bson.D{{Key: "fingerprint", Value: 1}}))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			found = append(found, append(bson.Raw(nil), cur.Current...))
		}
		return cur.Err()
	}
	lower := strings.ToLower(id)
	var err error
	switch {
	case len(lower) == 64 && hexRE.MatchString(lower):
		err = find(bson.D{{Key: "fingerprint", Value: lower}})
	case hexRE.MatchString(lower):
		err = find(bson.D{{Key: "fingerprint", Value: bson.D{{Key: "$regex", Value: "^" + lower}}}})
	}
	if err == nil && len(found) == 0 {
		err = find(bson.D{{Key: "document_id", Value: id}})
	}
	if err == nil && len(found) == 0 {
		if oid, perr := bson.ObjectIDFromHex(lower); perr == nil {
			err = find(bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "document_id", Value: oid}}, bson.D{{Key: "_id", Value: oid}}}}})
		}
	}
	if err == nil && len(found) == 0 {
		// The envelope's own _id as dlq list prints it (an undecodable
		// envelope's, say): a string, or Extended JSON.
		if ids, perr := parseEnvelopeID(id); perr == nil {
			in := make(bson.A, len(ids))
			for i, v := range ids {
				in[i] = v
			}
			err = find(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}})
		}
	}
	return found, err
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var plainWordRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if plainWordRE.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func dlqShow(ctx context.Context, dlq *mongo.Collection, id string, f dlqFlags, stdout, stderr io.Writer) int {
	found, err := findEnvelope(ctx, dlq, id)
	if err != nil {
		return failure(stderr, "dlq show", err)
	}
	switch {
	case len(found) == 0:
		fmt.Fprintf(stderr, "writeguard dlq show: no envelope with fingerprint, fingerprint prefix or document _id %q\n", id)
		return exitFail
	case len(found) > 1:
		var fps []string
		for _, r := range found[:min(len(found), showAmbiguous)] {
			fp := rawString(r.Lookup("fingerprint"))
			fps = append(fps, fp[:min(len(fp), 12)])
		}
		count := strconv.Itoa(len(found))
		if len(found) > showAmbiguous {
			count, fps = "more than "+strconv.Itoa(showAmbiguous), append(fps, "...")
		}
		return usageError(stderr, "dlq show", "%q is ambiguous: it matches %s envelopes (fingerprints %s); give more digits",
			id, count, strings.Join(fps, ", "))
	}
	raw := found[0]
	if code, done := showUndecodable(raw, f, stdout, stderr); done {
		return code
	}
	if f.asJSON {
		sh, err := toShown(raw)
		if err != nil {
			return failure(stderr, "dlq show", fmt.Errorf("decode envelope: %w", err))
		}
		if err := writeJSON(stdout, sh); err != nil {
			return failure(stderr, "dlq show", err)
		}
		return exitOK
	}
	l, err := toListed(raw)
	if err != nil {
		return failure(stderr, "dlq show", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "fingerprint\t%s\n", l.Fingerprint)
	fmt.Fprintf(tw, "document _id\t%s\n", l.DocumentID)
	fmt.Fprintf(tw, "namespace\t%s\n", l.Namespace)
	fmt.Fprintf(tw, "status\t%s\n", l.Status)
	fmt.Fprintf(tw, "code\t%s\n", codeString(deadletter.CodeGroup{Code: l.Code, CodeName: l.CodeName}))
	fmt.Fprintf(tw, "errmsg\t%s\n", rawString(raw.Lookup("errmsg")))
	fmt.Fprintf(tw, "failing keywords\t%s\n", strings.Join(l.FailingKeywords, ", "))
	fmt.Fprintf(tw, "failing paths\t%s\n", strings.Join(l.FailingPaths, ", "))
	fmt.Fprintf(tw, "attempts\t%d\n", l.Attempts)
	fmt.Fprintf(tw, "first seen\t%s\n", l.FirstSeen.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "last seen\t%s\n", l.LastSeen.UTC().Format(time.RFC3339Nano))
	for _, k := range []string{"replayed_at", "discarded_at", envelope.FieldReplayFailures, envelope.FieldReplayReason, envelope.FieldReplayHold, "trace_id"} {
		if v, err := raw.LookupErr(k); err == nil {
			fmt.Fprintf(tw, "%s\t%s\n", strings.ReplaceAll(k, "_", " "), rawString(v))
		}
	}
	e, err := envelope.Decode(raw)
	if err != nil {
		return failure(stderr, "dlq show", err)
	}
	for _, b := range e.Binary {
		fmt.Fprintf(tw, "stored as bytes\t%s (%s)\n", b.Field, b.Reason)
	}
	for _, w := range e.Withheld {
		fmt.Fprintf(tw, "withheld\t%s (%s)\n", w.Path, w.Reason)
	}
	if e.WithheldNote != "" {
		fmt.Fprintf(tw, "withheld note\t%s\n", e.WithheldNote)
	}
	for _, c := range e.Cut {
		fmt.Fprintf(tw, "cut\t%s (%d bytes", c.Field, c.Size)
		if c.Total > 0 {
			fmt.Fprintf(tw, ", kept %d of %d", c.Kept, c.Total)
		}
		fmt.Fprintln(tw, ")")
	}
	tw.Flush()
	for _, x := range []struct {
		k   string
		doc bson.Raw
	}{{"original", e.Original}, {"err_info", e.ErrInfo}} {
		k, doc := x.k, x.doc
		if len(doc) == 0 {
			continue
		}
		js, err := bson.MarshalExtJSONIndent(doc, false, false, "  ", "  ")
		if err != nil {
			continue
		}
		fmt.Fprintf(stdout, "%s:\n  %s\n", k, js)
	}
	return exitOK
}

// showUndecodable shows an envelope that cannot be decoded: why (which
// field), then the stored document as it is, relaxed Extended JSON. It
// reports false for an envelope that decodes.
func showUndecodable(raw bson.Raw, f dlqFlags, stdout, stderr io.Writer) (int, bool) {
	_, err := envelope.Decode(raw)
	var de *envelope.DecodeError
	if !errors.As(err, &de) {
		return 0, false
	}
	p := toProblem(de)
	js, jerr := bson.MarshalExtJSON(raw, false, false)
	if jerr != nil {
		js = nil
	}
	if f.asJSON {
		out := map[string]any{"id": p.ID, "decode_error": p}
		if js != nil {
			out["document"] = json.RawMessage(js)
		}
		if err := writeJSON(stdout, out); err != nil {
			return failure(stderr, "dlq show", err), true
		}
		return exitOK, true
	}
	fmt.Fprintf(stdout, "%s\n(writeguard dlq discard --id %s takes it out of the way)\n", p.Message, shellWord(p.ID))
	if ijs, err := bson.MarshalExtJSONIndent(raw, false, false, "  ", "  "); err == nil {
		fmt.Fprintf(stdout, "stored document:\n  %s\n", ijs)
	}
	return exitOK, true
}

// ---- discard ----

func dlqDiscard(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	if len(f.ids) > 0 || f.undecodable {
		return dlqDiscardIDs(ctx, dlq, filter, f, stdout, stderr)
	}
	filter = filter.WithDefaultStatus(envelope.StatusPending)
	var count, busy int64
	var err error
	if f.dryRun {
		var s deadletter.Summary
		s, err = deadletter.Stats(ctx, dlq, filter)
		count = s.Pending
	} else {
		// Through replay's leases: an envelope a running replay holds is
		// not discarded, and the replay does not write one discarded.
		var d replay.DiscardResult
		d, err = replay.Discard(ctx, dlq, filter)
		count, busy = d.Discarded, d.Busy
		if err == nil && busy > 0 {
			defer fmt.Fprintf(stderr, "writeguard dlq discard: %s not discarded: a running replay holds them "+
				"(it writes them or records why not); run discard again when it has ended\n", plural(busy, "envelope"))
		}
	}
	if err != nil {
		return failure(stderr, "dlq discard", err)
	}
	left, err := deadletter.Stats(ctx, dlq, deadletter.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil {
		return failure(stderr, "dlq discard", err)
	}
	if f.asJSON {
		if err := writeJSON(stdout, map[string]any{"dry_run": f.dryRun, "discarded": count, "busy": busy, "pending": left.Pending}); err != nil {
			return failure(stderr, "dlq discard", err)
		}
		return discardExit(busy)
	}
	if f.dryRun {
		fmt.Fprintf(stdout, "would discard %s (%s pending in %s.%s)\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	} else {
		fmt.Fprintf(stdout, "discarded %s; %s pending left in %s.%s\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	}
	return discardExit(busy)
}

// discardExit is 1 when a running replay held some of the envelopes.
func discardExit(busy int64) int {
	if busy > 0 {
		return exitFail
	}
	return exitOK
}

// dlqDiscardIDs discards by _id (-id) or the undecodable envelopes the
// filter selects (-undecodable), whatever their status but replayed and
// discarded (deadletter.DiscardIDs).
func dlqDiscardIDs(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	var ids []bson.RawValue
	for _, s := range f.ids {
		v, _ := parseEnvelopeID(s) // checked by checkDLQArgs
		ids = append(ids, v...)
	}
	if f.undecodable {
		q, err := filter.Query(time.Now())
		if err != nil {
			return usageError(stderr, "dlq discard", "%v", err)
		}
		cur, err := dlq.Find(ctx, q, options.Find().SetProjection(bson.D{{Key: "err_info", Value: 0}}))
		if err != nil {
			return failure(stderr, "dlq discard", err)
		}
		for cur.Next(ctx) {
			var de *envelope.DecodeError
			if _, err := envelope.Decode(cur.Current); errors.As(err, &de) {
				ids = append(ids, bson.RawValue{Type: de.ID.Type, Value: append([]byte(nil), de.ID.Value...)})
			}
		}
		err = cur.Err()
		_ = cur.Close(ctx)
		if err != nil {
			return failure(stderr, "dlq discard", err)
		}
	}
	var count int64
	var err error
	if f.dryRun {
		count = int64(len(ids))
	} else if count, err = deadletter.DiscardIDs(ctx, dlq, ids); err != nil {
		return failure(stderr, "dlq discard", err)
	}
	left, err := deadletter.Stats(ctx, dlq, deadletter.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil {
		return failure(stderr, "dlq discard", err)
	}
	if f.asJSON {
		if err := writeJSON(stdout, map[string]any{"dry_run": f.dryRun, "discarded": count, "pending": left.Pending}); err != nil {
			return failure(stderr, "dlq discard", err)
		}
		return exitOK
	}
	if f.dryRun {
		fmt.Fprintf(stdout, "would discard at most %s (%s pending in %s.%s)\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	} else {
		fmt.Fprintf(stdout, "discarded %s; %s pending left in %s.%s\n", plural(count, "envelope"), n(left.Pending), f.db, f.coll)
	}
	return exitOK
}

// wasWere is "was" for 1 and "were" otherwise.
func wasWere(n int64) string {
	if n == 1 {
		return "was"
	}
	return "were"
}
