package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	deadletter "github.com/writeguard/writeguard/dlq"
)

// dlqStatsHelp is "dlq stats --help"'s text, before the flags.
const dlqStatsHelp = `Usage: writeguard dlq stats [flags]

Counts the envelopes the filters select (every status unless --status says),
by status, failing keyword, failing path, error code and namespace.
`

// dlqStats is "writeguard dlq stats".
func dlqStats(ctx context.Context, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, stdout, stderr io.Writer) int {
	s, err := deadletter.Stats(ctx, dlq, filter)
	if err != nil {
		return failure(stderr, "dlq stats", err)
	}
	if f.asJSON {
		if err := writeJSON(stdout, statsJSON(s, f)); err != nil {
			return failure(stderr, "dlq stats", err)
		}
		return exitOK
	}
	printStats(stdout, s, f)
	return exitOK
}

// statsJSON is dlq stats --json's object.
func statsJSON(s deadletter.Summary, f dlqFlags) map[string]any {
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
	if s.InPieces > 0 || s.Pieces.Sets > 0 {
		out["in_pieces"] = s.InPieces
		out["pieces"] = map[string]int64{"sets": s.Pieces.Sets, "pieces": s.Pieces.Pieces, "bytes": s.Pieces.Bytes,
			"orphans": s.Pieces.Orphans, "unnamed": s.Pieces.Unnamed, "incomplete": s.Pieces.Incomplete}
	}
	return out
}

// printStats prints the totals and the envelopes that cannot be decoded,
// then a table per breakdown.
func printStats(stdout io.Writer, s deadletter.Summary, f dlqFlags) {
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
	if p := s.Pieces; s.InPieces > 0 || p.Sets > 0 {
		fmt.Fprintf(stdout, "%s kept in pieces (%s_pieces: %s, %s); %s orphaned, %s incomplete\n", plural(s.InPieces, "original"),
			f.coll, plural(p.Sets, "set"), plural(p.Bytes, "byte"), n(p.Orphans), n(p.Incomplete))
	}
	printStatsGroups(stdout, s)
}

// printStatsGroups prints a table per breakdown of s: status, keyword,
// path, code, namespace.
func printStatsGroups(stdout io.Writer, s deadletter.Summary) {
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

// wasWere is "was" for 1 and "were" otherwise.
func wasWere(n int64) string {
	if n == 1 {
		return "was"
	}
	return "were"
}
