//go:build !race

package bench

// raceEnabled is true when the tests run with -race, whose
// instrumentation allocates: exact allocation counts are not checked then.
const raceEnabled = false
