//go:build race

package e2e

// dlRace is true in a race-detector build, where the embedded server's
// SQLite runs tens of times slower: the heavier dead-letter tests size
// themselves down.
const dlRace = true
