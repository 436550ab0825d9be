package otelhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
	"github.com/writeguard/writeguard/policy"
)

// A batch of five orders meets a primary stepdown (retried after a
// backoff), then two orders fail validation and are dead-lettered. The
// spans go to the stdout exporter; to keep the output stable, the example
// writes the exporter's JSON to a buffer and prints it as a tree: names,
// writeguard and status attributes, events and statuses, without IDs and
// timings (and without db.system.name, db.namespace and
// db.collection.name, which every operation span has).
func ExampleNew() {
	var out bytes.Buffer // os.Stdout in a real program
	exp, err := stdouttrace.New(stdouttrace.WithWriter(&out), stdouttrace.WithoutTimestamps())
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp)))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	h, err := otelhook.New(otelhook.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}

	// A fake collection shop.orders that requires a qty field and whose
	// first write fails with a stepdown. With a real server:
	// writeguard.Wrap(client.Database("shop").Collection("orders"), ...).
	orders := mocks.NewFake("shop.orders").
		Validator(func(doc bson.Raw) (bson.Raw, bool) {
			_, err := doc.LookupErr("qty")
			return nil, err != nil
		}).
		Script(mocks.Reply(`{"ok":0,"code":189,"codeName":"PrimarySteppedDown","errmsg":"primary stepped down","errorLabels":["RetryableWriteError"]}`))
	g, err := writeguard.New(orders,
		writeguard.WithHooks(h),
		writeguard.WithDeadLetter(envelope.SinkFunc(func(context.Context, []envelope.Envelope) error { return nil })),
		writeguard.WithBackoff(policy.Backoff{Jitter: func() float64 { return 0.5 }}), // a stable delay: 50 ms
	)
	if err != nil {
		log.Fatal(err)
	}
	docs := []bson.D{
		{{Key: "_id", Value: 1}, {Key: "qty", Value: 3}},
		{{Key: "_id", Value: 2}},
		{{Key: "_id", Value: 3}, {Key: "qty", Value: 1}},
		{{Key: "_id", Value: 4}},
		{{Key: "_id", Value: 5}, {Key: "qty", Value: 7}},
	}
	_, err = g.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(false))
	fmt.Println("handled:", writeguard.Handled(err))

	printTree(&out)
	// Output:
	// handled: true
	// insertMany shop.orders db.operation.name=insert writeguard.method=insertMany db.operation.summary=insertMany shop.orders writeguard.attempts=2 writeguard.retries=1 writeguard.dead_lettered=2 writeguard.conflicts=0 writeguard.dispositions.dead_lettered=2 writeguard.dispositions.written=3
	//   event writeguard.retry writeguard.attempt=2 writeguard.backoff=0.05 writeguard.documents=5 writeguard.class=transient db.response.status_code=189
	//   insertMany shop.orders attempt writeguard.attempt=1 writeguard.documents=5 writeguard.backoff=0 db.response.status_code=189 writeguard.class=transient writeguard.failures=1 error.type=189 status=Error "attempt failed: transient failure, code 189"
	//   insertMany shop.orders attempt writeguard.attempt=2 writeguard.documents=5 writeguard.backoff=0.05 db.response.status_code=121 writeguard.class=invalid writeguard.failures=2
	//   insertMany shop.orders dead_letter writeguard.envelopes=2 writeguard.attempt=1 writeguard.fallback=false
}

// exportedSpan is the part of stdouttrace's JSON the tree shows.
type exportedSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	Attributes  []exportedAttr
	Events      []struct {
		Name       string
		Attributes []exportedAttr
	}
	Status struct{ Code, Description string }
}

type exportedAttr struct {
	Key   string
	Value struct{ Value any }
}

func (s exportedSpan) line() string {
	var b strings.Builder
	b.WriteString(s.Name)
	writeAttrs(&b, s.Attributes)
	if s.Status.Code != "Unset" {
		fmt.Fprintf(&b, " status=%s %q", s.Status.Code, s.Status.Description)
	}
	return b.String()
}

func writeAttrs(b *strings.Builder, attrs []exportedAttr) {
	for _, a := range attrs {
		switch a.Key {
		case "db.system.name", "db.namespace", "db.collection.name":
			continue
		}
		fmt.Fprintf(b, " %s=%v", a.Key, a.Value.Value)
	}
}

// printTree decodes the exporter's stream (one JSON span per line, each
// ended child before its parent) and prints it indented by parent.
func printTree(r io.Reader) {
	var spans []exportedSpan
	dec := json.NewDecoder(r)
	for {
		var s exportedSpan
		if err := dec.Decode(&s); err == io.EOF {
			break
		} else if err != nil {
			log.Fatal(err)
		}
		spans = append(spans, s)
	}
	children := map[string][]exportedSpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		children[s.Parent.SpanID] = append(children[s.Parent.SpanID], s)
		ids[s.SpanContext.SpanID] = true
	}
	var walk func(s exportedSpan, depth int)
	walk = func(s exportedSpan, depth int) {
		indent := strings.Repeat("  ", depth)
		fmt.Println(indent + s.line())
		for _, ev := range s.Events {
			var b strings.Builder
			writeAttrs(&b, ev.Attributes)
			fmt.Printf("%s  event %s%s\n", indent, ev.Name, b.String())
		}
		for _, c := range children[s.SpanContext.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, s := range spans {
		if !ids[s.Parent.SpanID] {
			walk(s, 0)
		}
	}
}
