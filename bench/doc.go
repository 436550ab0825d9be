// Package bench holds writeguard's benchmarks; it has no API. It is a
// module of its own (github.com/writeguard/writeguard/bench) because its
// failure-path and amplification benchmarks need the embedded FerretDB of
// cmd/writeguard/embedded, which the root module must not depend on.
//
// The benchmarks, all in _test.go files:
//
//   - BenchmarkOverhead{InsertOne,InsertMany10,InsertMany100,
//     InsertMany1000,BulkWrite100}/{raw,guarded}: a guarded collection
//     against the raw *mongo.Collection it wraps, on the happy path, with
//     order-line documents of eleven fields and no _id.
//     WRITEGUARD_BENCH_BACKEND selects the server: "null" (default:
//     faultproxy's null backend, which answers every command itself, so
//     the figures are client CPU) or "embedded" (an in-process FerretDB v1
//     on SQLite, reached directly).
//   - BenchmarkOverheadRatio: guarded/raw ns/op and (guarded − raw)
//     allocations per document for each of those cases, measured
//     interleaved in one process and reported with b.ReportMetric.
//   - BenchmarkDriverDocPath and BenchmarkIDFloorInsertMany100: where the
//     guarded path's extra cost goes (the driver's handling of a
//     document that already has an _id).
//   - BenchmarkClassify, BenchmarkExtractBulkWriteException100,
//     BenchmarkFailingKeywordsCorpus, BenchmarkEnvelopeBuild,
//     BenchmarkFingerprint: the hot pieces of the policy chain alone.
//   - BenchmarkDeadLetter1000/{unordered,ordered}: commands and sink
//     Puts to dead-letter 1,000 invalid documents of one InsertMany.
//   - BenchmarkStepdown10000/{guarded,raw-retrywrites}: 10,000 documents
//     through a scripted 2-second stepdown, against the embedded server.
//   - BenchmarkAmplification/<strategy> and TestAmplificationTable: the
//     raw driver, a naive retry loop, a per-code dispatcher and writeguard
//     under one seeded fault schedule: commands per document, documents
//     lost and duplicated. The test prints the markdown table; it is
//     skipped unless -run names it or WRITEGUARD_AMPLIFICATION=1.
//
// README.md has the commands that reproduce its tables and the figures
// measured on the reference machine.
package bench
