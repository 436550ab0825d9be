package mocks

import "context"

// TimeSeries makes f a time-series collection: it has no unique index on
// _id (MongoDB manual, time-series limitations), so a second insert of a
// document with the same _id is stored, not refused, and UniqueID reports
// false. It returns f.
func (f *Fake) TimeSeries() *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeSeries = true
	return f
}

// UniqueID reports whether _id is unique in f: false for a TimeSeries
// Fake (writeguard.UniqueIDTarget).
func (f *Fake) UniqueID(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.timeSeries, nil
}
