package otelhook_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/writeguard/writeguard/otelhook"
)

var update = flag.Bool("update", false, "rewrite the captured blocks of ../README.md from the test's output")

// TestReadmeTelemetry checks the two captured blocks of the README's
// "Tracing and metrics" section: the span tree ExampleNew prints, and the
// metrics of the same call. With -update it rewrites them.
func TestReadmeTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetMeterProvider(mp) // ExampleNew's otelhook.New reads the global meter provider
	t.Cleanup(func() {
		otel.SetMeterProvider(noop.NewMeterProvider())
		_ = mp.Shutdown(context.Background())
	})

	tree := strings.TrimPrefix(captureStdout(t, ExampleNew), "handled: true\n")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	checkCaptured(t, "../README.md", map[string]string{
		"otelhook-spans":   tree,
		"otelhook-metrics": metricLines(t, rm),
	})
}

// captureStdout returns what f prints on os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	defer func() { os.Stdout = old }()
	f()
	os.Stdout = old
	w.Close()
	return string(<-done)
}

// metricLines renders the metric points: name{attributes} value, in the
// order of otelhook.Instruments, points sorted. The attributes every point
// has are written out on the first line only, "..." after. The duration's
// sum is left out (it is a time).
func metricLines(t *testing.T, rm metricdata.ResourceMetrics) string {
	t.Helper()
	type point struct {
		attrs attribute.Set
		value string
	}
	byName := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					byName[m.Name] = append(byName[m.Name], point{dp.Attributes, fmt.Sprint(dp.Value)})
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					byName[m.Name] = append(byName[m.Name], point{dp.Attributes, fmt.Sprintf("count=%d sum=%d", dp.Count, dp.Sum)})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					byName[m.Name] = append(byName[m.Name], point{dp.Attributes, fmt.Sprintf("count=%d", dp.Count)})
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					byName[m.Name] = append(byName[m.Name], point{dp.Attributes, fmt.Sprint(dp.Value)})
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, d)
			}
		}
	}
	common := []string{"db.collection.name", "db.namespace", "db.operation.name", "db.system.name", "writeguard.method"}
	var b strings.Builder
	first := true
	for _, name := range otelhook.Instruments() {
		pts := byName[name]
		lines := make([]string, 0, len(pts))
		for _, p := range pts {
			var kvs []string
			if first {
				for _, kv := range p.attrs.ToSlice() {
					kvs = append(kvs, fmt.Sprintf("%s=%q", kv.Key, kv.Value.String()))
				}
			} else {
				kvs = append(kvs, "...")
				for _, kv := range p.attrs.ToSlice() {
					if !slices.Contains(common, string(kv.Key)) {
						kvs = append(kvs, fmt.Sprintf("%s=%q", kv.Key, kv.Value.String()))
					}
				}
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %s", name, strings.Join(kvs, ","), p.value))
		}
		sort.Strings(lines)
		for _, l := range lines {
			b.WriteString(l + "\n")
			first = false
		}
	}
	return b.String()
}

// checkCaptured compares each block of path marked
// "<!-- captured: NAME -->" (the fenced block right after the marker) with
// want[NAME], and with -update rewrites them.
func checkCaptured(t *testing.T, path string, want map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	var out bytes.Buffer
	found := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		out.WriteString(lines[i])
		name, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "<!-- captured: ")
		if !ok {
			continue
		}
		name = strings.TrimSpace(strings.TrimSuffix(name, "-->"))
		w, ok := want[name]
		if !ok {
			continue
		}
		found[name] = true
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s: marker %q is not followed by a fenced block", path, name)
		}
		out.WriteString(lines[i+1])
		j := i + 2
		var got strings.Builder
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			got.WriteString(lines[j])
		}
		if j >= len(lines) {
			t.Fatalf("%s: block %q is not closed", path, name)
		}
		if got.String() != w && !*update {
			t.Errorf("%s: captured block %q drifted from the output; run 'go test ./otelhook -run TestReadme -update'\n--- README\n%s--- output\n%s", path, name, got.String(), w)
		}
		out.WriteString(w)
		out.WriteString(lines[j])
		i = j
	}
	for name := range want {
		if !found[name] {
			t.Errorf("%s: no block marked <!-- captured: %s -->", path, name)
		}
	}
	if *update && !bytes.Equal(out.Bytes(), data) {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rewritten", path)
	}
}
