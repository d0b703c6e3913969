// Package supervisor is the process supervisor corpus runs inside each
// guest that has processes: a small static program (cmd/corpus-supervisor,
// no cgo, no libraries) that the agent copies into the guest, so it runs
// on any image, busybox included, and keeps the processes up when the
// agent is away or restarting.
//
// It runs a project's processes (Procfile lines) as the project's user in
// a release's folder with the release's environment, restarts them when
// they exit (with backoff, counting restarts), captures their output into
// capped, rotated log files, and stops them with SIGTERM (or the
// process's own stop signal) and, after a grace period, SIGKILL, to the
// whole process group. The processes of a release made from an OCI image
// run chrooted in the image's tree, with /proc and /dev mounted there
// for them alone (chroot.go). What it runs is kept in a state file, so a
// restarted supervisor (a rebooted guest) runs the same processes again.
//
// The agent speaks to it with one JSON request and one JSON answer over a
// unix socket in the guest, through `corpus-supervisor ctl` run by the
// driver's exec: nothing about it depends on the guest's network.
//
// Why not an existing supervisor: runit and s6 are not in every image
// (busybox's runit applets are, Debian's minbase has none), supervisord
// needs Python, and none of them starts a new generation beside the old
// one on another port, which zero-downtime deploys need. This one is a
// few hundred lines and ships with corpus.
package supervisor

import (
	"encoding/json"
	"fmt"
	"time"
)

// Paths inside the guest.
const (
	Socket    = "/run/corpus-supervisor.sock"
	LockFile  = "/run/corpus-supervisor.lock"
	StateDir  = "/var/lib/corpus-supervisor"
	StateFile = StateDir + "/state.json"
	LogDir    = "/var/log/corpus"
	// Binary is where the agent installs the supervisor in a guest.
	Binary = "/usr/local/lib/corpus/corpus-supervisor"
	// BootMarker is there when the guest's main command starts the
	// supervisor (BootScript): start then waits for that one.
	BootMarker = "/run/corpus-supervisor.boot"
)

// BootScript is the main command of a guest without an init of its own
// (a Kubernetes pod), run by sh with the supervisor's path as $1 and
// BootMarker as $2: it marks the guest as booting its supervisor, waits
// for the agent to install it (a new guest has none; a restarted
// container keeps it in a kept folder), then becomes the supervisor,
// which starts again the processes its state file names.
const BootScript = `mkdir -p "${2%/*}" && : > "$2"
trap 'exit 0' TERM INT
while [ ! -x "$1" ]; do sleep 1 & wait $!; done
exec "$1" daemon
`

// Operations.
const (
	OpPing   = "ping"
	OpStart  = "start"
	OpStop   = "stop"
	OpStatus = "status"
	// OpFreePort answers the first of Ports nothing listens on.
	OpFreePort = "free_port"
	// OpFollow streams the processes' output (see journal.go): a
	// FollowHeader line, then Record lines.
	OpFollow = "follow"
	// OpReady says the processes Names of generation ID of Project
	// answered the caller's own check (web's health check): a start
	// waiting out their MinUptime stops waiting for them.
	OpReady = "ready"
)

// Process states.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateBackoff  = "backoff"
	StateStopping = "stopping"
	StateStopped  = "stopped"
)

// Request is one call to the supervisor.
type Request struct {
	Op string `json:"op"`
	// Start: a generation to run.
	Generation *Generation `json:"generation,omitempty"`
	// Stop: the generation of Project to stop (all of the project's when
	// ID is empty), keeping the others.
	Project string   `json:"project,omitempty"`
	ID      string   `json:"id,omitempty"`
	Names   []string `json:"names,omitempty"`
	// Ports are the candidates of a free_port request, in order.
	Ports []int `json:"ports,omitempty"`
	// Follow: the records after After of the run Epoch, then new ones,
	// for For (0: until the reader goes).
	Epoch string   `json:"epoch,omitempty"`
	After uint64   `json:"after,omitempty"`
	For   Duration `json:"for,omitempty"`
}

// Generation is a set of processes of one release of a project, started
// together; a deploy starts the new generation beside the old one, then
// stops the old.
type Generation struct {
	Project string `json:"project"`
	// ID is unique among the project's generations ("r3", "r3.2").
	ID      string `json:"id"`
	Release string `json:"release"`
	// Dir is where the processes run (the release's folder); with Root,
	// a folder inside Root.
	Dir string `json:"dir"`
	// Root, when set, is the root the processes run under (chroot): the
	// file system of a release made from an OCI image.
	Root string `json:"root,omitempty"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	// EnvFile is a JSON object of environment variables (the project's
	// config, secrets included), readable by the project's user only.
	EnvFile   string    `json:"env_file"`
	Processes []Process `json:"processes"`
	// Grace is how long a stopping process gets between its stop signal
	// and SIGKILL.
	Grace Duration `json:"grace"`
	// MinUptime is how long each process must stay up for the start to
	// succeed; a process that exits sooner fails it with its last output.
	// A process the caller marks ready (OpReady) has proven itself
	// sooner: the start answers once every process is ready or up
	// MinUptime, and at once when one exits.
	MinUptime Duration `json:"min_uptime"`
}

// Process is one Procfile line.
type Process struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// Argv, when set, is run as it is instead of Command by /bin/sh -c
	// (an image's entrypoint and cmd); Command then only describes it.
	Argv []string `json:"argv,omitempty"`
	// StopSignal, when set, is the signal that stops it (an image's stop
	// signal) in place of SIGTERM; SIGKILL follows after the grace.
	StopSignal int `json:"stop_signal,omitempty"`
	// Port is given as PORT (web).
	Port int `json:"port,omitempty"`
	// InnerPort, for a process of a generation with Root, runs it in a
	// network of its own where PORT is InnerPort (an image's exposed
	// port); Port, in the guest's network, leads there (ownnet.go).
	InnerPort int `json:"inner_port,omitempty"`
}

// Response answers a Request.
type Response struct {
	Error     string   `json:"error,omitempty"`
	Version   string   `json:"version,omitempty"`
	Processes []Status `json:"processes,omitempty"`
	// Output is the last lines of a process that failed a start.
	Output []string `json:"output,omitempty"`
	// Port answers free_port.
	Port int `json:"port,omitempty"`
}

// Status is how one process is.
type Status struct {
	Project    string    `json:"project"`
	Generation string    `json:"generation"`
	Release    string    `json:"release"`
	Name       string    `json:"name"`
	Command    string    `json:"command"`
	State      string    `json:"state"`
	PID        int       `json:"pid,omitempty"`
	Port       int       `json:"port,omitempty"`
	Restarts   int       `json:"restarts"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	LastExit   string    `json:"last_exit,omitempty"`
}

// Duration is a time.Duration written as "1.5s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}
