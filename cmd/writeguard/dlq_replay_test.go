package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// "dlq replay" refuses bad worker, lease, validator, -into, -allow and
// -quarantine-after flags with exit 2, and with --data-dir it will not
// write unchecked originals unless told so with --no-validator; with
// --uri it will not write until -into names where.
func TestReplayFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-validator", "--workers", "0"}, "-workers 0"},
		{[]string{"--no-validator", "--workers", "65"}, "-workers 65"},
		{[]string{"--no-validator", "--lease", "1ms"}, "-lease 1ms"},
		{[]string{"--no-validator", "--validator", "v.json"}, "exclusive"},
		{nil, "-no-validator"},
	} {
		args := append([]string{"dlq", "replay", "--data-dir", dir}, c.args...)
		code, _, errOut := runCmd(t, context.Background(), args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming %q", args, code, errOut, c.want)
		}
	}
	// With -uri the namespaces to write must be named; -allow takes
	// update, replace, delete.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--uri", "mongodb://127.0.0.1:1", "--no-validator"}, "-into db.collection"},
		{[]string{"--uri", "mongodb://127.0.0.1:1", "--no-validator", "--into", "orders"}, "-into orders: want db.collection"},
		{[]string{"--data-dir", dir, "--no-validator", "--allow", "drop"}, "-allow drop: want update, replace or delete"},
		{[]string{"--data-dir", dir, "--no-validator", "--quarantine-after", "-1"}, "-quarantine-after -1"},
	} {
		args := append([]string{"dlq", "replay"}, c.args...)
		code, _, errOut := runCmd(t, context.Background(), args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming %q", args, code, errOut, c.want)
		}
	}
	// A dry run rehearses the replay: the same validator flags (against
	// no validator every envelope would "pass" a replay that refuses to
	// start), so without one it is the same usage error.
	if code, _, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--dry-run"); code != exitUsage || !strings.Contains(errOut, "-no-validator") {
		t.Errorf("dry run without a validator flag: exit %d (%s), want 2 naming -no-validator", code, errOut)
	}
	// With -no-validator it goes on (the demo's data is missing here, so
	// it fails later, with exit 1).
	if code, _, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--dry-run", "--no-validator"); code != exitFail {
		t.Errorf("dry run with -no-validator: exit %d (%s), want 1 (no dead-letter collection)", code, errOut)
	}
}

// "dlq replay --workers 3 --no-validator" drains the demo's backlog: it
// says first what will check the writes, every envelope ends replayed
// once and the target holds each document once.
func TestReplayWorkers(t *testing.T) {
	const limit = 1000
	e := expect(t, limit)
	dir := t.TempDir()
	_, r := demoJSON(t, "--limit", strconv.Itoa(limit), "--data-dir", dir)
	before, _ := countTarget(t, dir)
	code, out, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--no-validator",
		"--workers", "3", "--batch", "4", "--lease", "20s", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "validation: none (-no-validator)") || !strings.Contains(errOut, "3 workers, batches of 4, lease 20s") {
		t.Errorf("stderr does not say what the replay does: %q", errOut)
	}
	var rep struct {
		Pending    int64 `json:"pending"`
		Namespaces []struct {
			Namespace  string `json:"namespace"`
			Validation string `json:"validation"`
			Replayed   int64
			Scanned    int64
			Batches    int
		} `json:"namespaces"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Namespaces) != 1 || rep.Pending != 0 {
		t.Fatalf("report %+v", rep)
	}
	ns := rep.Namespaces[0]
	if ns.Replayed != int64(e.invalidDistinct) || ns.Scanned != ns.Replayed || ns.Batches < 4 {
		t.Errorf("namespace %+v: want %d envelopes replayed once, in at least 4 batches", ns, e.invalidDistinct)
	}
	after, distinct := countTarget(t, dir)
	if after != before+e.invalidDistinct || distinct != after {
		t.Errorf("target %d documents (%d distinct) after the replay, want %d (demo: %d written)", after, distinct, before+e.invalidDistinct, r.Written)
	}
}

// "dlq replay --quarantine-after 1" with a validator that still rejects
// most envelopes quarantines those: the replay counts them and says so
// (exit 3), "dlq stats" and "dlq list --status quarantined" show them, a
// later replay skips them, and "--include-quarantined" retries them.
func TestReplayQuarantine(t *testing.T) {
	const limit = 1000
	e := expect(t, limit)
	dir := t.TempDir()
	demoJSON(t, "--limit", strconv.Itoa(limit), "--data-dir", dir)
	widened := filepath.Join("testdata", "widened_validator.json")
	stillInvalid := e.invalidDistinct - e.patternOnlyDistinct
	code, out, errOut := runCmd(t, context.Background(), "dlq", "replay", "--data-dir", dir, "--validator", widened, "--quarantine-after", "1", "--json")
	var rep struct {
		Namespaces []struct{ Replayed, StillInvalid, Quarantined int }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Namespaces) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	ns := rep.Namespaces[0]
	if code != exitCheck || ns.StillInvalid != stillInvalid || ns.Quarantined != stillInvalid ||
		!strings.Contains(errOut, strconv.Itoa(stillInvalid)+" envelopes quarantined after 1 failed replays") {
		t.Errorf("exit %d, %+v, stderr %q; want 3 and %d quarantined", code, ns, errOut, stillInvalid)
	}
	st := dlqJSON(t, 0, "stats", "--data-dir", dir)
	if num(st["quarantined"]) != stillInvalid || num(st["pending"]) != 0 || num(st["by_status"].(map[string]any)["quarantined"]) != stillInvalid {
		t.Errorf("stats %v; want %d quarantined", st, stillInvalid)
	}
	code, out, _ = runCmd(t, context.Background(), "dlq", "list", "--data-dir", dir, "--status", "quarantined", "--limit", "0", "--json")
	var items []struct {
		Status         string `json:"status"`
		ReplayFailures int    `json:"replay_failures"`
		ReplayReason   string `json:"replay_reason"`
	}
	if err := json.Unmarshal([]byte(out), &items); code != 0 || err != nil || len(items) != stillInvalid {
		t.Fatalf("list --status quarantined: exit %d, %v, %d items", code, err, len(items))
	}
	if it := items[0]; it.Status != "quarantined" || it.ReplayFailures != 1 || !strings.HasPrefix(it.ReplayReason, "quarantined after 1 failed replays") {
		t.Errorf("list item %+v", it)
	}
	// Skipped from now on ...
	again := dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator")
	if len(again["namespaces"].([]any)) != 0 {
		t.Errorf("a later replay: %v; want nothing to replay", again)
	}
	// ... until retried deliberately.
	rep2 := dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator", "--include-quarantined")
	if ns := rep2["namespaces"].([]any); len(ns) != 1 || num(ns[0].(map[string]any)["Replayed"]) != stillInvalid {
		t.Errorf("--include-quarantined: %v", rep2)
	}
}
