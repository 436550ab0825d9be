package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// orderLineSID is an order line with a caller-assigned string _id, like
// the demo's content-derived ones.
type orderLineSID struct {
	ID   string    `bson:"_id"`
	Line orderLine `bson:",inline"`
}

// demoFaults is the fault schedule of `writeguard demo --faults` (the
// demo package's Script, which this module cannot import: it is internal
// to cmd/writeguard), applied to every insert on ns. Each insert command
// independently gets at most one of:
//
//	4 %  189 PrimarySteppedDown, labelled RetryableWriteError (not applied)
//	3 %  10107 NotWritablePrimary, labelled RetryableWriteError (not applied)
//	3 %  the reply is dropped after the insert was applied (network error)
//	5 %  112 WriteConflict on the documents whose _id ends in "0"
func demoFaults(ns string, seed int64) *faultproxy.Rule {
	retryable := []string{"RetryableWriteError"}
	return faultproxy.On("insert").In(ns).Always().Do(faultproxy.RandomSchedule(seed,
		faultproxy.Rate{P: 0.04, Fault: faultproxy.ErrorReply(faultproxy.CommandError{
			Code: 189, CodeName: "PrimarySteppedDown", Message: "Primary stepped down while waiting for replication", Labels: retryable})},
		faultproxy.Rate{P: 0.03, Fault: faultproxy.ErrorReply(faultproxy.CommandError{
			Code: 10107, CodeName: "NotWritablePrimary", Message: "not primary", Labels: retryable})},
		faultproxy.Rate{P: 0.03, Fault: faultproxy.CloseAfterForward()},
		faultproxy.Rate{P: 0.05, Fault: faultproxy.RejectDocuments(idEndsIn0, faultproxy.WriteError{
			Code: 112, Message: "WriteConflict error: this operation conflicted with another operation. Please retry your operation or multi-document transaction."})},
	))
}

func idEndsIn0(doc bson.Raw) bool {
	id, ok := doc.Lookup("_id").StringValueOK()
	return ok && len(id) > 0 && id[len(id)-1] == '0'
}

// Shape of one operation of BenchmarkConcurrentWriters.
const (
	concDocs    = 4800 // documents per operation, split evenly among the writers
	concBatch   = 50   // documents per InsertMany
	concTimeout = 2 * time.Minute
)

// concResult is what one run of the workload did.
type concResult struct {
	elapsed    time.Duration
	notWritten int64 // documents whose disposition is not a stored one
	exhausted  int64 // of which exhausted
	unknown    int64 // of which outcome unknown
	other      int64 // documents of calls that returned an error other than a Report
}

// concWorkload writes concDocs order lines with string _ids (prefix-<hex
// seq>, so one in 16 ends in "0") through w with writers goroutines, each
// sending its share in ordered InsertMany batches of concBatch.
func concWorkload(ctx context.Context, w writeguard.Collection, writers int, prefix string) (concResult, error) {
	var res concResult
	var firstErr error
	var mu sync.Mutex
	per := concDocs / writers
	var notWritten, exhausted, unknown, other atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for k := range writers {
		wg.Go(func() {
			for from := k * per; from < (k+1)*per; from += concBatch {
				docs := make([]any, 0, concBatch)
				for i := from; i < min(from+concBatch, (k+1)*per); i++ {
					docs = append(docs, orderLineSID{ID: prefix + "-" + strconv.FormatInt(int64(i), 16), Line: newOrderLine(i)})
				}
				_, err := w.InsertMany(ctx, docs)
				if err == nil {
					continue
				}
				var r *writeguard.Report
				if !errors.As(err, &r) {
					other.Add(int64(len(docs)))
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				for d, n := range r.Counts() {
					if !d.Stored() {
						notWritten.Add(int64(n))
					}
				}
				exhausted.Add(int64(r.Count(writeguard.Exhausted)))
				unknown.Add(int64(r.Count(writeguard.OutcomeUnknown)))
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.notWritten, res.exhausted, res.unknown, res.other = notWritten.Load(), exhausted.Load(), unknown.Load(), other.Load()
	return res, firstErr
}

// BenchmarkConcurrentWriters: 1, 4 and 16 writers share one client and
// write 4,800 order lines (caller-assigned string _ids) per operation, in
// ordered InsertMany batches of 50, to the embedded server behind a
// faultproxy. Each operation runs three variants one after the other on
// a freshly dropped collection (set-up untimed):
//
//   - raw: the *mongo.Collection, proxy without faults (the anchor);
//   - guarded: one Guarded shared by the writers (default options), proxy
//     without faults;
//   - guarded-faults: the same, proxy with the demo's fault schedule
//     (demoFaults: 15 % of inserts faulted).
//
// Metrics, per variant: <v>-docs/s (documents stored ÷ wall time);
// guarded/raw and faults/raw (docs/s ratios within the operation);
// faults-not-written/op (documents whose disposition is not stored:
// exhausted, outcome unknown; should be 0 when every transient fault is
// absorbed), faults-exhausted/op, faults-unknown/op, faults-missing/op
// (concDocs − documents counted in the collection), faults-retries/op and
// faults-refused/op (retries the budget allowed and refused), and
// faults-injected/op. ns/op is the sum of the three runs. Bounded: each run
// has a 2-minute context; run it with -benchtime 1x.
func BenchmarkConcurrentWriters(b *testing.B) {
	for _, writers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchConcurrent(b, writers)
		})
	}
}

func benchConcurrent(b *testing.B, writers int) {
	name := fmt.Sprintf("conc_%d", writers)
	ns := benchDB + "." + name
	plain, plainClient := upstreamProxy(b, false)
	defer closeUpstream(plain, plainClient)
	faulty, faultyClient := upstreamProxy(b, false, demoFaults(ns, 1))
	defer closeUpstream(faulty, faultyClient)

	var retries, refused atomic.Int64
	h := hooks.Hooks{
		RetryScheduled:  func(context.Context, *hooks.Retry) { retries.Add(1) },
		BudgetExhausted: func(context.Context, *hooks.BudgetExhausted) { refused.Add(1) },
	}
	rawColl := plainClient.Database(benchDB).Collection(name)
	g, err := writeguard.Wrap(rawColl)
	if err != nil {
		b.Fatal(err)
	}
	gf, err := writeguard.Wrap(faultyClient.Database(benchDB).Collection(name), writeguard.WithHooks(h))
	if err != nil {
		b.Fatal(err)
	}
	direct := directClient(b).Database(benchDB).Collection(name)

	variants := []struct {
		name string
		w    writeguard.Collection
	}{{"raw", rawColl}, {"guarded", g}, {"faults", gf}}
	var elapsed [3]time.Duration
	var stored [3]int64
	var notWritten, exhausted, unknown, missing, injected float64
	iter := 0
	for b.Loop() {
		iter++
		var rate [3]float64
		for i, v := range variants {
			b.StopTimer()
			if err := direct.Drop(context.Background()); err != nil {
				b.Fatal(err)
			}
			faultsBefore := faultCount(faulty.Stats())
			b.StartTimer()
			ctx, cancel := context.WithTimeout(context.Background(), concTimeout)
			res, err := concWorkload(ctx, v.w, writers, fmt.Sprintf("%s%d", v.name, iter))
			cancel()
			b.StopTimer()
			if err != nil {
				b.Fatalf("%s, %d writers: %v", v.name, writers, err)
			}
			n, err := direct.CountDocuments(context.Background(), bson.D{})
			if err != nil {
				b.Fatal(err)
			}
			if v.name != "faults" && (n != concDocs || res.notWritten != 0) {
				b.Fatalf("%s, %d writers: %d of %d stored, %d not written", v.name, writers, n, concDocs, res.notWritten)
			}
			elapsed[i] += res.elapsed
			stored[i] += n
			rate[i] = float64(n) / res.elapsed.Seconds()
			if v.name == "faults" {
				notWritten += float64(res.notWritten)
				exhausted += float64(res.exhausted)
				unknown += float64(res.unknown)
				missing += float64(concDocs - n)
				injected += float64(faultCount(faulty.Stats()) - faultsBefore)
			}
			b.StartTimer()
		}
		b.Logf("%2d writers: raw %6.0f docs/s, guarded %6.0f, guarded with faults %6.0f", writers, rate[0], rate[1], rate[2])
	}
	k := float64(iter)
	for i, v := range variants {
		b.ReportMetric(float64(stored[i])/elapsed[i].Seconds(), v.name+"-docs/s")
	}
	rawRate := float64(stored[0]) / elapsed[0].Seconds()
	b.ReportMetric(float64(stored[1])/elapsed[1].Seconds()/rawRate, "guarded/raw")
	b.ReportMetric(float64(stored[2])/elapsed[2].Seconds()/rawRate, "faults/raw")
	b.ReportMetric(notWritten/k, "faults-not-written/op")
	b.ReportMetric(exhausted/k, "faults-exhausted/op")
	b.ReportMetric(unknown/k, "faults-unknown/op")
	b.ReportMetric(missing/k, "faults-missing/op")
	b.ReportMetric(float64(retries.Load())/k, "faults-retries/op")
	b.ReportMetric(float64(refused.Load())/k, "faults-refused/op")
	b.ReportMetric(injected/k, "faults-injected/op")
}

// faultCount sums the faults a proxy fired.
func faultCount(st faultproxy.Stats) int64 {
	var n int64
	for _, v := range st.Faults {
		n += v
	}
	return n
}
