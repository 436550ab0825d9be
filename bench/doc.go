// Package bench holds writeguard's benchmarks; it has no API. It is a
// module of its own (github.com/writeguard/writeguard/bench) because its
// failure-path and amplification benchmarks need the embedded FerretDB of
// cmd/writeguard/embedded, which the root module must not depend on.
//
// The benchmarks, all in _test.go files:
//
//   - BenchmarkOverhead{InsertOne,InsertMany10,InsertMany100,
//     InsertMany1000,BulkWrite100}/{raw,raw-struct-id,raw-prepared,guarded,
//     guarded-id}: a guarded collection against the raw *mongo.Collection
//     it wraps, on the happy path, with order-line documents of eleven
//     fields. The raw collection is measured on three floors: order lines
//     without _id (raw), structs that already carry an ObjectID _id
//     (raw-struct-id), and exactly the bytes writeguard hands the driver,
//     a bson.Raw with its _id first (raw-prepared); the guarded one handed
//     order lines without _id (guarded) and with it (guarded-id). WRITEGUARD_BENCH_BACKEND selects the
//     server: "null" (default: faultproxy's null backend in a child
//     process, which answers every command itself, so the figures are
//     client CPU) or "embedded" (an in-process FerretDB v1 on SQLite,
//     reached directly). Their allocation counts are exact; their times
//     are wall-clock, for profiles, not ratios.
//   - BenchmarkThreadCPU/docs={100,1000}: the ratios and shares of the
//     happy path in thread CPU per call (a goroutine locked to its OS
//     thread, CLOCK_THREAD_CPUTIME_ID around each call), the variants
//     shuffled call by call, the null backend in a child process, an A/A
//     pair beside every ratio, exact allocation counts; it prints a
//     markdown table per case.
//   - BenchmarkThreadCPUSplit/docs={1,100,1000}: the same regime, a
//     guarded call split into the driver's part (its thread CPU inside the
//     driver against raw-prepared's) and writeguard's own (a guarded call
//     whose target answers at once, less the encoding alone).
//   - BenchmarkThreadClocks: getrusage's RUSAGE_THREAD against the
//     thread's CPU clock around one CPU-bound section.
//   - BenchmarkEndToEnd/batch={1,100,500}/writers={1,16}: documents per
//     second of the raw driver and a Guarded, interleaved call by call, on
//     the embedded server behind a faultproxy without faults, and the
//     server commands each sent (counted by the proxy).
//   - BenchmarkMemory: bytes allocated and peak heap of one unordered
//     InsertMany of 1,000,000 order lines and of 200,000 1-KiB documents,
//     all written and all rejected, raw (without and with caller _ids)
//     against guarded, with the null-backend proxy in a child process.
//   - BenchmarkDriverDocPath: where the guarded path's extra cost goes,
//     per document (the driver's handling of a document that already has
//     an _id).
//   - BenchmarkPrepare100/{per-document,slab}: writeguard's preparation of
//     100 documents, each copied with its _id, or all copied into one slab.
//   - BenchmarkClassify, BenchmarkExtractBulkWriteException100,
//     BenchmarkFailingKeywordsCorpus, BenchmarkEnvelopeBuild,
//     BenchmarkFingerprint: the hot pieces of the policy chain alone.
//   - BenchmarkDeadLetter1000/{unordered,ordered}: time, bytes,
//     allocations, commands and sink Puts to dead-letter 1,000 invalid
//     documents of one InsertMany.
//   - BenchmarkStepdown10000/{guarded,raw-retrywrites}: 10,000 documents
//     through a scripted 2-second stepdown, against the embedded server.
//   - BenchmarkConcurrentWriters/writers={1,4,16}: documents per second
//     of 1, 4 and 16 writers sharing one Guarded on the embedded server
//     behind a faultproxy at the demo's fault rate, against the raw driver
//     at the same concurrency without faults, and the documents not
//     written.
//   - BenchmarkBudget/writers={16,50}/faults={5,15,30}%/budget=...: the
//     default retry budget, gRPC's retry throttling (gRFC A6) and no
//     budget, under many writers and a fraction of transiently failing
//     commands: retries allowed and refused, documents exhausted.
//   - BenchmarkBudgetFailover/writers={16,50}/budget=...: the same budgets
//     against a 1-second outage that fails every in-flight write.
//   - BenchmarkFailover/budget={default,none}: 16 writers × 5 ordered
//     InsertMany of 100 through a one-second failover on the replica-set
//     bed (10107 for 1 s, the writes in flight applied and their replies
//     dropped): time to all stored against the no-fault time plus the
//     outage (recovery/floor), insert commands per batch beside their
//     floor, read-backs, lost and duplicated, and a trace of where the
//     writer that finished last spent its time.
//   - BenchmarkThrottled/limit={off,aimd-outside}: 16 writers against the
//     bed's ingress rate limiter (462 above 40 inserts per second):
//     goodput and commands per document, today's code against an AIMD
//     concurrency limit sketched outside writeguard.
//   - BenchmarkAmplification/<strategy> and TestAmplificationTable: the
//     raw driver, a naive retry loop, a per-code dispatcher and writeguard
//     under one seeded fault schedule: commands per document, documents
//     lost and duplicated, and writeguard's commands by class. The test
//     prints the markdown tables; it is skipped unless -run names it or
//     WRITEGUARD_AMPLIFICATION=1.
//   - TestReadmeAmplification and TestReadmeAllocations: README.md's
//     amplification tables and the happy path's allocation counts are
//     what these produce (the tables' wall-time column excepted; -update
//     rewrites the blocks that drifted).
//
// README.md has the commands that reproduce its tables and the figures
// measured on the reference machine.
package bench
