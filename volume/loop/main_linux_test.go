package loop

import (
	"testing"

	"corpus/internal/mounttest"
)

// TestMain runs the tests in a mount namespace of their own (see
// mounttest).
func TestMain(m *testing.M) { mounttest.Main(m.Run) }
