package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// alertsFile is the shipped alerting rules, from this package's directory.
var alertsFile = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")

// firstOccurrence is how an alert's metrics look when they first appear:
// the series (a Prometheus series selector) with their values in promtool's
// notation from the moment they appear, and how long after that the alert
// must be firing. once marks the alerts that must fire on one event: their
// counters appear at 1 and never grow.
type firstOccurrence struct {
	series [][2]string
	after  string
	once   bool
}

const ns = `db_namespace="shop",db_collection_name="orders"`

// firstOccurrences holds a scenario for every alert of alerts.yml; a new
// alert without one fails TestAlertsFireOnFirstOccurrence.
var firstOccurrences = map[string]firstOccurrence{
	"WriteguardDeadLetterFailed": {series: [][2]string{
		{`writeguard_call_inputs_total{` + ns + `,writeguard_disposition="dead_letter_failed"}`, "2+2x40"}}, after: "12m"},
	"WriteguardDocumentsExhausted": {series: [][2]string{
		{`writeguard_call_inputs_total{` + ns + `,writeguard_disposition="exhausted"}`, "5+5x40"}}, after: "12m"},
	"WriteguardDocumentsUnknown": {series: [][2]string{
		{`writeguard_call_inputs_total{` + ns + `,writeguard_disposition="unknown"}`, "1+1x40"}}, after: "12m"},
	"WriteguardDeadLetterFlood": {series: [][2]string{
		{`writeguard_dead_letter_flood_total{` + ns + `}`, "1x40"}}, after: "1m", once: true},
	"WriteguardDocumentsNotWritten": {series: [][2]string{
		{`writeguard_call_inputs_total{` + ns + `,writeguard_disposition="failed",db_response_status_code="8000"}`, "1x40"}}, after: "1m", once: true},
	"WriteguardUnclassifiedFailures": {series: [][2]string{
		{`writeguard_unclassified_total{` + ns + `,db_response_status_code="8000"}`, "1x40"}}, after: "1m", once: true},
	"WriteguardDeadLetterShareHigh": {series: [][2]string{
		{`writeguard_call_inputs_total{` + ns + `,writeguard_disposition="dead_lettered"}`, "30+30x40"},
		{`writeguard_call_inputs_total{` + ns + `,writeguard_disposition="written"}`, "70+70x40"}}, after: "25m"},
	"WriteguardDLQPendingGrowing": {series: [][2]string{
		{`writeguard_dlq_envelopes{db_namespace="shop",db_collection_name="orders_dlq",writeguard_envelope_status="pending"}`, "0+5x60"}}, after: "40m"},
	"WriteguardDLQOldestPendingOld": {series: [][2]string{
		{`writeguard_dlq_oldest_pending_age_seconds{db_namespace="shop",db_collection_name="orders_dlq"}`, "90000+60x40"}}, after: "12m"},
	"WriteguardRetryBudgetExhausted": {series: [][2]string{
		{`writeguard_budget_exhausted_total{` + ns + `,db_response_status_code="189"}`, "1+1x40"}}, after: "7m"},
	"WriteguardAttemptsPerDocumentHigh": {series: [][2]string{
		{`writeguard_input_attempts_sum{` + ns + `}`, "300+300x40"},
		{`writeguard_input_attempts_count{` + ns + `}`, "100+100x40"}}, after: "30m"},
	"WriteguardDLQQuarantined": {series: [][2]string{
		{`writeguard_dlq_envelopes{db_namespace="shop",db_collection_name="orders_dlq",writeguard_envelope_status="quarantined"}`, "2x40"}}, after: "6m"},
}

// alertNames returns the names of the alerts of alerts.yml, in order.
func alertNames(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)\s*$`).FindAllStringSubmatch(string(raw), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatalf("%s: no alert", alertsFile)
	}
	return names
}

// TestAlertsFireOnFirstOccurrence: every shipped alert fires on series that
// start absent — as a writeguard process's counters do: a series appears
// with its first increment, its first sample already 1 — and, for the
// alerts on rare events, on one event (a counter that appears at 1 and
// never grows). For each alert it writes a promtool test group whose
// series are absent for 10 minutes and then follow the alert's scenario,
// expecting no alert (exp_alerts: []), and requires promtool to report
// that very alert firing at the scenario's time: an alert that stays
// silent fails the test. Before the rules counted a new series
// (alerts.yml, "First occurrences"), WriteguardUnclassifiedFailures,
// WriteguardDeadLetterFlood and the ticket stayed silent here.
func TestAlertsFireOnFirstOccurrence(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus): the first-occurrence test of the alerting rules is skipped; .ci/run installs it")
	}
	names := alertNames(t)
	for name := range firstOccurrences {
		if !slices.Contains(names, name) {
			t.Errorf("a first-occurrence scenario for %s, which alerts.yml does not have", name)
		}
	}
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n", rules)
	var tested []string
	for _, name := range names {
		sc, ok := firstOccurrences[name]
		if !ok {
			t.Errorf("alert %s has no first-occurrence scenario in alerts_test.go: add one", name)
			continue
		}
		tested = append(tested, name)
		fmt.Fprintf(&b, "  - interval: 1m\n    input_series:\n")
		for _, s := range sc.series {
			if sc.once && !strings.HasPrefix(s[1], "1x") {
				t.Fatalf("%s: a once scenario's series must appear at 1 and stay (1xN), not %q", name, s[1])
			}
			fmt.Fprintf(&b, "      - series: '%s'\n        values: '_x10 %s'\n", s[0], s[1])
		}
		fmt.Fprintf(&b, "    alert_rule_test:\n      - alertname: %s\n        eval_time: %s\n        exp_alerts: []\n", name, addMinutes(t, sc.after, 10))
	}
	file := filepath.Join(t.TempDir(), "first_occurrence_test.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	if err == nil {
		t.Fatalf("no alert fired on a first occurrence:\n%s", out)
	}
	fired := firedAlerts(string(out))
	for _, name := range tested {
		if !fired[name] {
			t.Errorf("%s did not fire on series that start absent (scenario %+v)", name, firstOccurrences[name])
		}
	}
	if t.Failed() {
		t.Logf("promtool:\n%s\ntest file:\n%s", out, b.String())
	}
}

// firedAlerts returns the alerts promtool reported firing where none was
// expected: each failure block "alertname: X, time: T, exp:[], got:[...]"
// whose got lists X.
func firedAlerts(out string) map[string]bool {
	fired := map[string]bool{}
	blocks := regexp.MustCompile(`(?m)^\s*alertname: (\S+), time: `).FindAllStringSubmatchIndex(out, -1)
	for i, m := range blocks {
		end := len(out)
		if i+1 < len(blocks) {
			end = blocks[i+1][0]
		}
		name := out[m[2]:m[3]]
		_, got, _ := strings.Cut(out[m[1]:end], "got:")
		if strings.Contains(got, `alertname="`+name+`"`) {
			fired[name] = true
		}
	}
	return fired
}

// addMinutes returns d ("12m") plus n minutes, in promtool's notation.
func addMinutes(t *testing.T, d string, n int) string {
	t.Helper()
	var m int
	if _, err := fmt.Sscanf(d, "%dm", &m); err != nil {
		t.Fatalf("scenario time %q: want minutes (\"12m\")", d)
	}
	return fmt.Sprintf("%dm", m+n)
}
