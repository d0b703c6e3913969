package volumes

import (
	"testing"

	"corpus/internal/mounttest"
)

// TestMain runs the tests in a mount namespace of their own (see
// mounttest): the volume tests mount loop volumes that a mount namespace
// made elsewhere on the host meanwhile would otherwise hold busy.
func TestMain(m *testing.M) { mounttest.Main(m.Run) }
