package engine

// OrderedWindowFrom is the number of passes of one ordered call that must
// stop at a rejected document before its tail is sent in a window
// (OrderedWindow). Until then each pass sends the whole pending tail, as
// the driver would: a call with one or two handled documents per batch
// (the common case: a duplicate skipped, an invalid document
// dead-lettered) pays no extra commands, while a call through many
// rejections still gets the window after its third (issue 32: the window
// from the first rejection took the amplification benchmark's seed 1 from
// 48 to 71 commands; bench/README.md §4).
const OrderedWindowFrom = 3

// nextWindow sets the window of an ordered call's next pass after a pass
// of sent documents that stopped at c.stopAt (-1: it did not stop at a
// document), counting the stops (c.stops).
//
// While a bisection narrows down a poison document (bisect.go) the window
// is left as it is and the pass's stop is not counted: the bisection's
// halves already bound what each pass sends, and a window opened in the
// middle of it would cut its halves and end it (narrow), sending the
// poison document again with valid ones.
func (c *Call) nextWindow(sent int) {
	if c.ext.bis.active {
		return
	}
	if c.stopAt >= 0 {
		c.stops++
	}
	if c.stops < OrderedWindowFrom {
		return // the whole tail: c.window stays 0
	}
	c.window = OrderedWindow(c.window, sent, c.stopAt)
}
