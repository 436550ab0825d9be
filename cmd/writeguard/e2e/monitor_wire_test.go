package e2e

import (
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/writeguard/writeguard"
)

// wireMonitor is the one place the bed installs writeguard's wire monitor
// around its own command monitor m: the hidden-attempt cases and the
// oracle with TRUTH_MONITOR=on use it.
func wireMonitor(m *event.CommandMonitor) *event.CommandMonitor {
	return writeguard.Monitor(m)
}
