package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	"github.com/writeguard/writeguard/otelhook"
)

const watchUsage = `Usage: writeguard dlq watch [flags]

Reads the dead-letter collection every --interval and serves its backlog as
metrics until interrupted: writeguard.dlq.envelopes (by status),
writeguard.dlq.failing_keywords (the failing keywords of the pending
envelopes, by keyword: an envelope counts once under each of its keywords,
so do not sum it as envelopes) and writeguard.dlq.oldest_pending.age
(seconds), through --metrics-addr
(Prometheus) and/or OTLP (--otlp-endpoint or OTEL_EXPORTER_OTLP_*). Run one
per dead-letter collection: the writers need none (otelhook.ObserveDLQ).

Flags:
`

// dlqWatch is "writeguard dlq watch".
func dlqWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("writeguard dlq watch", flag.ContinueOnError)
	var uri, dataDir, db, coll string
	var interval time.Duration
	var tf telemetryFlags
	fs.StringVar(&uri, "uri", "", "MongoDB `URI` of the deployment holding the dead-letter collection")
	fs.StringVar(&dataDir, "data-dir", "", "use the embedded server's data in `DIR` (as left by 'writeguard demo --data-dir DIR')")
	fs.StringVar(&db, "db", demo.DefaultDatabase, "`database` of the dead-letter collection")
	fs.StringVar(&coll, "dlq", demo.DefaultDLQ, "dead-letter `collection`")
	fs.DurationVar(&interval, "interval", otelhook.DefaultPollInterval, "read the collection every `DURATION` (≥ 1s)")
	addTelemetryFlags(fs, &tf, false)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), watchUsage)
		fs.PrintDefaults()
	}
	pos, code, stop := parseFlags(fs, args, stdout, stderr)
	if stop {
		return code
	}
	const name = "dlq watch"
	switch {
	case len(pos) > 0:
		return usageError(stderr, name, "unexpected argument %q", pos[0])
	case interval < time.Second:
		return usageError(stderr, name, "-interval %v: want ≥ 1s", interval)
	case tf.check() != "":
		return usageError(stderr, name, "%s", tf.check())
	case !tf.exportsMetrics():
		return usageError(stderr, name, "nothing to serve: give -metrics-addr or -otlp-endpoint (or set OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT; not OTEL_SDK_DISABLED=true)")
	}
	c, err := conn.Open(ctx, conn.Options{URI: uri, DataDir: dataDir})
	if err != nil {
		return failure(stderr, name, err)
	}
	defer c.Close(context.Background())
	dlq := c.Client.Database(db).Collection(coll)
	if err := checkDLQExists(ctx, c.Client.Database(db), coll); err != nil {
		return failure(stderr, name, err)
	}
	tel, err := startTelemetry(ctx, &tf, "writeguard-dlq-watch", stderr)
	if err != nil {
		return failure(stderr, name, err)
	}
	defer func() {
		if err := tel.Close(); err != nil {
			fmt.Fprintf(stderr, "writeguard %s: telemetry: %s\n", name, scrubbed(err.Error()))
		}
	}()
	obs, err := otelhook.ObserveDLQ(ctx, dlq, otelhook.WithMeterProvider(tel.MeterProvider), otelhook.WithPollInterval(interval))
	if err != nil {
		return failure(stderr, name, err)
	}
	defer func() { _ = obs.Stop() }()
	f := obs.Figures()
	fmt.Fprintf(stdout, "watching %s.%s every %v: %d pending\n", db, coll, interval, f.ByStatus["pending"])
	<-ctx.Done()
	return exitOK
}

// observeRun starts the backlog gauges of a dlq command run with
// telemetry flags, before the command changes anything, and returns what
// ends them: a last read (the figures after the command; a keyword seen
// at the start and gone since reads 0), --linger, an export (OTLP) and
// the stop.
func observeRun(ctx context.Context, tel *telemetry, dlq *mongo.Collection, stderr io.Writer, name string) func() {
	obs, err := otelhook.ObserveDLQ(context.WithoutCancel(ctx), dlq, otelhook.WithMeterProvider(tel.MeterProvider))
	if err != nil {
		fmt.Fprintf(stderr, "writeguard %s: dead-letter gauges: %s\n", name, scrubbed(err.Error()))
		return func() {}
	}
	return func() {
		defer func() { _ = obs.Stop() }()
		if err := obs.Poll(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(stderr, "writeguard %s: dead-letter gauges: %s\n", name, scrubbed(err.Error()))
		}
		tel.Linger(ctx)
		if err := tel.Flush(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(stderr, "writeguard %s: telemetry: %s\n", name, scrubbed(err.Error()))
		}
	}
}
