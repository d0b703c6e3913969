package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// BasePath is the PATH processes get unless the config (or an image) sets
// one.
const BasePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Environ is the environment a process of a project's release gets, the
// one function that makes it: a base (PATH, HOME the release's folder
// dir, LANG), then the release's environment file envFile (a JSON object
// the deploy wrote: corpus.yaml's env, the project's config with its
// secrets and links, CORPUS_*), then CORPUS_PROCESS and, for a process
// that listens, PORT. Sorted, as "KEY=value".
func Environ(dir, envFile, process string, port int) ([]string, error) {
	env := map[string]string{"PATH": BasePath, "HOME": dir, "LANG": "C.UTF-8"}
	if envFile != "" {
		b, err := os.ReadFile(envFile)
		if err != nil {
			return nil, fmt.Errorf("reading the environment: %w", err)
		}
		var fromFile map[string]string
		if err := json.Unmarshal(b, &fromFile); err != nil {
			return nil, fmt.Errorf("environment file %s: %w", envFile, err)
		}
		for k, v := range fromFile {
			env[k] = v
		}
	}
	env["CORPUS_PROCESS"] = process
	if port > 0 {
		env["PORT"] = strconv.Itoa(port)
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// ShellProcess is CORPUS_PROCESS in a shell's environment.
const ShellProcess = "shell"

// ExecInRelease replaces this process with argv, run with the
// environment the processes of the release in dir get (Environ, envFile
// its environment file) over the one it was given (TERM, say): what
// `corpus-supervisor env` does for shells. An environment file that
// cannot be read is said on stderr and the command runs without it (a
// shell is how one looks into that). It returns only on error.
func ExecInRelease(dir, envFile string, argv []string) error {
	if len(argv) == 0 {
		return errors.New("env: no command")
	}
	app, err := Environ(dir, envFile, ShellProcess, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "corpus-supervisor: %v; running without the release's environment\n", err)
		if app, err = Environ(dir, "", ShellProcess, 0); err != nil {
			return err
		}
	}
	env := map[string]string{}
	for _, kv := range append(os.Environ(), app...) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	// The command is looked up on the release's PATH.
	os.Setenv("PATH", env["PATH"])
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, list)
}
