package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/replay"
)

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

// dlqCommandHelp is the text "dlq CMD --help" prints before the flags.
var dlqCommandHelp = map[string]string{
	"stats":   dlqStatsHelp,
	"list":    dlqListHelp,
	"show":    dlqShowHelp,
	"replay":  dlqReplayHelp,
	"discard": dlqDiscardHelp,
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
		fs.DurationVar(&f.lease, "lease", replay.DefaultDiscardLease, "how long a claim of the discard lasts without renewal (`DURATION`; renewed while it runs): "+
			"a discard that dies blocks replays of the envelopes it claimed this long")
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
	case cmd == "discard" && f.lease < replay.MinLease:
		return none, nil, fmt.Sprintf("-lease %v: want at least %v", f.lease, replay.MinLease)
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
