package envelope

// The fixtures of this package's tests, for its external tests
// (sinks_test.go, which stores envelopes through the sinks of package dlq).
var (
	SampleEnvelope = sampleEnvelope
	ExactOriginal  = exactOriginal
	CorpusErrInfo  = corpusErrInfo
	Failure121     = failure121
	MustMarshal    = mustMarshal
	Lookup         = lookup
	StringsOf      = strings_
	T1             = t1
)
