// Command corpus-supervisor runs a project's processes inside a guest; the
// agent installs it there (see agent/runtime/supervisor). It is built
// without cgo, so it runs on any Linux guest image.
//
//	corpus-supervisor daemon    serve in the foreground
//	corpus-supervisor start     start the daemon in the background, once
//	corpus-supervisor ctl       send the JSON request on stdin, print the answer
//	corpus-supervisor start-ctl start, then ctl
//	corpus-supervisor follow    send the follow request on stdin, copy the stream
//	corpus-supervisor tty CMD [ARGS...]  run CMD with stdin as its controlling terminal
//	corpus-supervisor env DIR ENVFILE CMD [ARGS...]  run CMD with the environment of the release in DIR
//	corpus-supervisor chroot ROOT DIR UID GID -- CMD [ARGS...]  run an image's CMD in its tree ROOT, with /proc and /dev
//	corpus-supervisor version
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"corpus/agent/runtime/supervisor"
	"corpus/internal/version"
)

const usage = "usage: corpus-supervisor daemon|start|ctl|start-ctl|follow|tty|env|chroot|version"

func main() {
	if len(os.Args) > 2 && os.Args[1] == "tty" {
		code, err := supervisor.RunTTY(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
		}
		os.Exit(code)
	}
	if len(os.Args) > 4 && os.Args[1] == "env" {
		err := supervisor.ExecInRelease(os.Args[2], os.Args[3], os.Args[4:])
		fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
		os.Exit(127)
	}
	if len(os.Args) > 2 && os.Args[1] == supervisor.ChrootCommand {
		code, err := supervisor.RunChrooted(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
		}
		os.Exit(code)
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "daemon":
		logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
		s := &supervisor.Supervisor{StateFile: supervisor.StateFile, LogDir: supervisor.LogDir, Version: version.Version, Logger: logger}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		logger.Info("corpus-supervisor serving", "version", version.Version, "socket", supervisor.Socket)
		if err := s.Serve(ctx, supervisor.Socket, supervisor.LockFile); err != nil {
			logger.Error("corpus-supervisor", "error", err)
			os.Exit(1)
		}
	case "start":
		start()
	case "ctl":
		ctl()
	case "start-ctl":
		start()
		ctl()
	case "follow":
		req := readRequest()
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		defer stop()
		if err := supervisor.Follow(ctx, supervisor.Socket, req, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
			os.Exit(3)
		}
	case "version":
		fmt.Println(version.Version)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}

// start starts the daemon in the background unless it runs, and waits
// until it answers.
func start() {
	self, err := os.Executable()
	if err == nil {
		err = supervisor.Detach(self, supervisor.Socket, supervisor.BootMarker, supervisor.LogDir+"/supervisor.log", 10*time.Second)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
		os.Exit(1)
	}
}

// ctl sends the request on stdin to the daemon and prints its answer.
func ctl() {
	req := readRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := supervisor.Call(ctx, supervisor.Socket, req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
		os.Exit(3)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

// readRequest reads the JSON request on stdin.
func readRequest() supervisor.Request {
	var req supervisor.Request
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "corpus-supervisor: reading the request:", err)
		os.Exit(2)
	}
	return req
}
