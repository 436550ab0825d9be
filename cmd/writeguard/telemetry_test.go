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

// TestPrometheusScrapesDemo runs the demo with --metrics-addr, has a real
// Prometheus (Debian's prometheus package; .ci/run installs it) scrape it
// every second with the alerting rules of deploy/prometheus loaded, and
// reads back through Prometheus's HTTP API: the documents per disposition
// equal the demo's report, the dead-letter gauges equal its DLQ summary,
// every rule group loads, and every query of the Grafana dashboard
// returns data.
func TestPrometheusScrapesDemo(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (apt-get install prometheus): the real-Prometheus test is skipped; .ci/run installs it")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	metricsPort := freePort(t)
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--limit", "3000", "--batch", "250", "--json",
			"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--linger", "2m"}, &out, &errOut)
	}()
	// The report is printed before the linger.
	var res demo.Result
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := json.Unmarshal([]byte(out.String()), &res); err == nil && res.Input > 0 {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("demo exited %d before lingering: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report after 90s; stderr: %s", errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !res.OK {
		t.Fatalf("demo check failed: %v", res.Problems)
	}

	rules, err := filepath.Abs(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:\n  - job_name: writeguard-demo\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n", rules, metricsPort)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promPort := freePort(t)
	var promLog lockedBuffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort))
	cmd.Stdout, cmd.Stderr = &promLog, &promLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", promPort)

	// Dispositions, read back once two scrapes have landed (rate() needs
	// two samples).
	want := reportCounts(&res)
	var got map[string]int
	deadline = time.Now().Add(60 * time.Second)
	for {
		v, err := promQuery(base, `count_over_time(writeguard_call_inputs_total[1m])`)
		if err == nil && len(v) > 0 && minValue(v) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has not scraped the demo 3 times in 60s (%v); log:\n%s", err, promLog.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	v, err := promQuery(base, `sum by (writeguard_disposition) (writeguard_call_inputs_total)`)
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]int{}
	for k, n := range v {
		got[strings.TrimPrefix(k, "writeguard_disposition=")] = int(n)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Prometheus: documents by disposition %v; the demo's report %v", got, want)
	}
	t.Logf("prometheus: dispositions compared: prometheus %v = report %v", got, want)

	pending, err := promQuery(base, `sum(writeguard_dlq_envelopes{writeguard_envelope_status="pending"})`)
	if err != nil || len(pending) != 1 || int64(pending[""]) != res.DLQ.Pending {
		t.Errorf("Prometheus: pending envelopes %v (%v); the demo's DLQ summary %d", pending, err, res.DLQ.Pending)
	}
	t.Logf("prometheus: pending envelopes compared: prometheus %v = report %d", pending[""], res.DLQ.Pending)

	// The rules loaded.
	resp, err := http.Get(base + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(body), `"type":"alerting"`); n != 8 {
		t.Errorf("Prometheus loaded %d alerting rules, want 8: %s", n, body)
	}

	// Every dashboard query returns data.
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "writeguard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries++
			v, err := promQuery(base, tg.Expr)
			if err != nil || len(v) == 0 {
				t.Errorf("dashboard panel %q: %q returned no data (%v)", p.Title, tg.Expr, err)
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
	t.Logf("prometheus: %d dashboard queries returned data", queries)

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
