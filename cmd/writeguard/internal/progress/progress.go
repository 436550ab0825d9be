// Package progress draws a one-line progress bar on a terminal.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// IsTerminal reports whether f is a character device (a terminal, not a
// pipe or a file).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Bar is a progress bar redrawn in place with "\r", at most every 100 ms.
// A nil *Bar does nothing, so callers need no "if". It is safe for
// concurrent use.
type Bar struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	total int
	done  int
	start time.Time
	last  time.Time
}

// New returns a bar writing to w, or nil when w is nil.
func New(w io.Writer, label string, total int) *Bar {
	if w == nil {
		return nil
	}
	return &Bar{w: w, label: label, total: total, start: time.Now()}
}

// Add advances the bar by n.
func (b *Bar) Add(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	if now := time.Now(); now.Sub(b.last) >= 100*time.Millisecond || b.done >= b.total {
		b.last = now
		b.draw()
	}
}

// Finish draws the final state and ends the line.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw()
	fmt.Fprintln(b.w)
}

func (b *Bar) draw() {
	const width = 30
	frac := 1.0
	if b.total > 0 {
		frac = float64(b.done) / float64(b.total)
	}
	if frac > 1 {
		frac = 1
	}
	fill := int(frac * width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %d/%d %3.0f%% %5.1fs ", b.label,
		strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		b.done, b.total, 100*frac, time.Since(b.start).Seconds())
}
