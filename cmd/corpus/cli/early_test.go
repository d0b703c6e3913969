package cli

import (
	"strings"
	"testing"
)

// TestRunsEarly: leaves of the client commands run from init; the
// daemons' commands, those they add below client groups, groups, help,
// completion and docs (which lists every command) wait for main.
func TestRunsEarly(t *testing.T) {
	for args, want := range map[string]bool{
		"guest create web --image busybox":           true,
		"--address 127.0.0.1:7400 guest list --json": true,
		"version":              true,
		"node list":            true,
		"":                     false,
		"guest":                false,
		"agent --state-dir /x": false,
		"coordinator":          false,
		"node add-k8s":         false,
		"image build busybox":  false,
		"help guest":           false,
		"completion bash":      false,
		"docs markdown /tmp/x": false,
		"--help":               false,
	} {
		if got := runsEarly(strings.Fields(args)); got != want {
			t.Errorf("runsEarly(%q) = %v, want %v", args, got, want)
		}
	}
}
