package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
)

// reportCounts is the demo report's count per disposition, by the
// disposition's name in writeguard.disposition (zero counts left out).
func reportCounts(r *demo.Result) map[string]int {
	// The report counts a duplicate row that writeguard reported
	// already_written (it met its twin's write after a lost reply and read
	// it back identical) as a conflict (DuplicatesReadBack); the telemetry
	// carries writeguard's own disposition.
	m := map[string]int{
		"written": r.Written, "already_written": r.AlreadyWritten + r.DuplicatesReadBack, "dead_lettered": r.DeadLettered,
		"conflict_skipped": r.Conflicts - r.DuplicatesReadBack, "failed": r.Failed, "exhausted": r.Exhausted,
		"unknown": r.Unknown, "not_attempted": r.NotAttempted,
	}
	for k, v := range r.Other {
		m[k] += v
	}
	for k, v := range m {
		if v == 0 {
			delete(m, k)
		}
	}
	return m
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader on two
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promQuery runs an instant query against Prometheus's HTTP API and
// returns the vector's samples as label set → value.
func promQuery(base, q string) (map[string]float64, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		keys := make([]string, 0, len(s.Metric))
		for k, v := range s.Metric {
			keys = append(keys, k+"="+v)
		}
		sort.Strings(keys)
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		out[strings.Join(keys, ",")] = v
	}
	return out, nil
}

// promServer is a real Prometheus (Debian's prometheus package; .ci/run
// installs it) scraping writeguard processes every second, with the
// alerting rules of deploy/prometheus loaded.
type promServer struct {
	base string // its HTTP API
	log  *lockedBuffer
}

// startPrometheus starts Prometheus scraping 127.0.0.1:port for each job of
// targets, evaluating the rules every second; t's cleanup kills it.
func startPrometheus(t *testing.T, bin string, targets map[string]int) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:\n", rules)
	for job, port := range targets {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n", job, port)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promPort := freePort(t)
	p := &promServer{base: fmt.Sprintf("http://127.0.0.1:%d", promPort), log: &lockedBuffer{}}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort))
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// waitFor polls q until ok accepts its result, for at most d.
func (p *promServer) waitFor(t *testing.T, q string, d time.Duration, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		v, err := promQuery(p.base, q)
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus: %q not as expected after %v (%v, %v); log:\n%s", q, d, v, err, p.log.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// startDemo runs the demo with args until ctx is done, and returns its
// report once printed (before the linger) and its exit code's channel.
func startDemo(t *testing.T, ctx context.Context, args ...string) (demo.Result, chan int, *lockedBuffer) {
	t.Helper()
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"demo", "--json", "--linger", "2m"}, args...), &out, &errOut) }()
	var res demo.Result
	deadline := time.Now().Add(3 * time.Minute) // the race detector slows the embedded server tenfold
	for {
		if err := json.Unmarshal([]byte(out.String()), &res); err == nil && res.Input > 0 {
			return res, done, &errOut
		}
		select {
		case code := <-done:
			t.Fatalf("demo %v exited %d before lingering: %s", args, code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo %v: no report after 3 minutes; stderr: %s", args, errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPrometheusScrapesDemo has a real Prometheus scrape two demos every
// second, with the alerting rules of deploy/prometheus loaded, and reads
// back through its HTTP API:
//
//   - the demo (writeguard_demo): the documents per disposition equal its
//     report, the pending envelopes its DLQ summary, every rule loads, and
//     every query of the Grafana dashboard returns data for the demo's
//     database and collections picked in its variables;
//   - a demo without retries (--max-attempts 1, database
//     writeguard_unretried), started while Prometheus already scrapes its
//     port: its documents given up after injected faults appear as new
//     series, the first occurrence of each, and the ticket
//     WriteguardDocumentsNotWritten fires on them (increase() alone reads
//     a series born at its first value as 0).
func TestPrometheusScrapesDemo(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (apt-get install prometheus): the real-Prometheus test is skipped; .ci/run installs it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mainPort, unretriedPort := freePort(t), freePort(t)
	prom := startPrometheus(t, bin, map[string]int{"writeguard-demo": mainPort, "writeguard-unretried": unretriedPort})

	res, done, errOut := startDemo(t, ctx, "--limit", "3000", "--batch", "250", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", mainPort))
	if !res.OK {
		t.Fatalf("demo check failed: %v", res.Problems)
	}
	demoNS := `db_namespace="` + demo.DefaultDatabase + `"`
	// The dead-letter gauges appear once the writes are over (the demo
	// starts them before its report): two scrapes of them, and the
	// dispositions scraped are final.
	prom.waitFor(t, `count_over_time(writeguard_dlq_envelopes{`+demoNS+`,writeguard_envelope_status="pending"}[1m])`, 60*time.Second,
		func(v map[string]float64) bool { return len(v) > 0 && minValue(v) >= 2 })
	want := reportCounts(&res)
	v, err := promQuery(prom.base, `sum by (writeguard_disposition) (writeguard_call_inputs_total{`+demoNS+`})`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for k, n := range v {
		got[strings.TrimPrefix(k, "writeguard_disposition=")] = int(n)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Prometheus: documents by disposition %v; the demo's report %v", got, want)
	}
	t.Logf("prometheus: dispositions compared: prometheus %v = report %v", got, want)

	pending, err := promQuery(prom.base, `sum(writeguard_dlq_envelopes{`+demoNS+`,writeguard_envelope_status="pending"})`)
	if err != nil || len(pending) != 1 || int64(pending[""]) != res.DLQ.Pending {
		t.Errorf("Prometheus: pending envelopes %v (%v); the demo's DLQ summary %d", pending, err, res.DLQ.Pending)
	}
	t.Logf("prometheus: pending envelopes compared: prometheus %v = report %d", pending[""], res.DLQ.Pending)

	checkRulesLoaded(t, prom)
	checkDashboard(t, prom, map[string]string{"namespace": demo.DefaultDatabase, "collection": "orders", "dlq": demo.DefaultDLQ})
	firstOccurrenceFires(t, ctx, prom, unretriedPort)

	cancel()
	select {
	case code := <-done:
		if code != exitFail && code != exitOK { // interrupted linger: exit 0 (finished) or 1
			t.Errorf("demo exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Error("demo did not stop after the linger was cancelled")
	}
}

// checkRulesLoaded: Prometheus loaded every alerting rule of alerts.yml.
func checkRulesLoaded(t *testing.T, prom *promServer) {
	t.Helper()
	resp, err := http.Get(prom.base + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	names := alertNames(t)
	if n := strings.Count(string(body), `"type":"alerting"`); n != len(names) {
		t.Errorf("Prometheus loaded %d alerting rules, alerts.yml has %d: %s", n, len(names), body)
	}
}

// checkDashboard: every query of the Grafana dashboard, with its
// variables set to vars, returns data.
func checkDashboard(t *testing.T, prom *promServer, vars map[string]string) {
	t.Helper()
	queries := 0
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			queries++
			q := tg.Expr
			for k, v := range vars {
				q = strings.ReplaceAll(q, "$"+k, v)
			}
			v, err := promQuery(prom.base, q)
			if err != nil || len(v) == 0 {
				t.Errorf("dashboard panel %q: %q returned no data (%v)", p.Title, q, err)
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
	t.Logf("prometheus: %d dashboard queries returned data for %v", queries, vars)
}

// firstOccurrenceFires runs a demo without retries while Prometheus
// scrapes its port, and waits for WriteguardDocumentsNotWritten to fire on
// the documents it gave up: series that did not exist before.
func firstOccurrenceFires(t *testing.T, ctx context.Context, prom *promServer, port int) {
	t.Helper()
	const db = "writeguard_unretried"
	// Prometheus has tried the port (down: the series do not exist).
	prom.waitFor(t, `count_over_time(up{job="writeguard-unretried"}[1m])`, 30*time.Second,
		func(v map[string]float64) bool { return len(v) == 1 })
	res, done, _ := startDemo(t, ctx, "--limit", "1000", "--batch", "250", "--seed", "4", "--max-attempts", "1", "--db", db,
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	defer func() {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	}()
	if res.Exhausted+res.Unknown+res.Failed+res.NotAttempted == 0 {
		t.Fatalf("the demo without retries left every document written or handled: %+v", res)
	}
	alerts := prom.waitFor(t, `ALERTS{alertname="WriteguardDocumentsNotWritten",alertstate="firing",db_namespace="`+db+`"}`, 60*time.Second,
		func(v map[string]float64) bool { return len(v) > 0 })
	sel := `writeguard_call_inputs_total{db_namespace="` + db + `",writeguard_disposition=~"failed|not_attempted|exhausted|unknown|dead_letter_failed"}`
	born, _ := promQuery(prom.base, `sum by (writeguard_disposition) (min_over_time(`+sel+`[10m]))`)
	inc, _ := promQuery(prom.base, `sum by (writeguard_disposition) (increase(`+sel+`[10m]))`)
	for labels := range alerts {
		t.Logf("prometheus: first occurrence: WriteguardDocumentsNotWritten fired {%s}; the series were born at %v (first samples), increase() over them reads %v",
			labels, born, inc)
	}
}

// dashboardPanels reads the Grafana dashboard's panels.
func dashboardPanels(t *testing.T) []dashboardPanel {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "writeguard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct{ Panels []dashboardPanel }
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	return dash.Panels
}

type dashboardPanel struct {
	Title   string
	Targets []struct{ Expr string }
}

// TestDashboardVariables: every query of the Grafana dashboard is filtered
// by the database variable and by a collection variable ($collection for
// the guarded collections, $dlq for the dead-letter collections), so no
// panel sums every collection whatever the selection.
func TestDashboardVariables(t *testing.T) {
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			// Metric names, with their selector: "by (...)" clauses name
			// labels, and a brace group is consumed with its metric.
			expr := regexp.MustCompile(`by \([^)]*\)`).ReplaceAllString(tg.Expr, "")
			for _, sel := range regexp.MustCompile(`\{[^}]*\}|writeguard_[a-z_]+(\{[^}]*\})?`).FindAllStringSubmatch(expr, -1) {
				if strings.HasPrefix(sel[0], "{") {
					continue
				}
				if !strings.Contains(sel[1], `db_namespace=~"$namespace"`) ||
					!strings.Contains(sel[1], `db_collection_name=~"$collection"`) && !strings.Contains(sel[1], `db_collection_name=~"$dlq"`) {
					t.Errorf("panel %q: %s is not filtered by $namespace and $collection (or $dlq)", p.Title, sel[0])
				}
			}
		}
	}
}

func minValue(m map[string]float64) float64 {
	first := true
	var lo float64
	for _, v := range m {
		if first || v < lo {
			lo, first = v, false
		}
	}
	return lo
}

// TestDLQWatch: "dlq watch" serves the pending envelopes of a dead-letter
// collection left by the demo on its Prometheus endpoint, equal to the
// demo's DLQ.
func TestDLQWatch(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd(t, context.Background(), "demo", "--limit", "800", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("demo exit %d: %s", code, errOut)
	}
	var res demo.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := freePort(t)
	var wout, werr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dlq", "watch", "--data-dir", dir, "--interval", "1s", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port)}, &wout, &werr)
	}()
	want := fmt.Sprintf(`writeguard_envelope_status="pending"} %d`, res.DLQ.Pending)
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(body, want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q on /metrics after 30s; stderr %s; body:\n%s", want, werr.String(), body)
		}
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("dlq watch exit %d: %s", code, werr.String())
	}
}

// TestTelemetryFlagErrors: a bad export flag is a usage error (exit 2)
// naming the flag, found before any connection.
func TestTelemetryFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--metrics-addr", "9464"}, "-metrics-addr"},
		{[]string{"demo", "--otlp-endpoint", "ftp://collector:4318"}, "-otlp-endpoint"},
		{[]string{"demo", "--linger", "-1s"}, "-linger"},
		{[]string{"dlq", "stats", "--data-dir", "DIR", "--metrics-addr", "localhost"}, "-metrics-addr"},
		{[]string{"dlq", "watch"}, "nothing to serve"},
		{[]string{"dlq", "watch", "--metrics-addr", "127.0.0.1:0", "--interval", "10ms"}, "-interval"},
	} {
		for i, a := range tc.args {
			if a == "DIR" {
				tc.args[i] = t.TempDir()
			}
		}
		code, _, errOut := runCmd(t, context.Background(), tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
}
