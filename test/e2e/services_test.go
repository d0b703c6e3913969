package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// notesWorker is a project's app that keeps its data in the service it
// is linked to: at start it writes a row through DATABASE_URL, then it
// reads the rows back every half second into /tmp/notes (or the error).
const notesWorker = `#!/bin/sh
psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q \
  -c "CREATE TABLE IF NOT EXISTS notes (id serial PRIMARY KEY, note text NOT NULL)" \
  -c "INSERT INTO notes (note) SELECT 'hello from the app' WHERE NOT EXISTS (SELECT 1 FROM notes)" || exit 1
while :; do
  if out=$(psql "$DATABASE_URL" -tAc "SELECT note FROM notes ORDER BY id" 2>&1); then
    printf '%s\n' "$out" >/tmp/notes.new
  else
    printf 'error: %s\n' "$out" >/tmp/notes.new
  fi
  mv /tmp/notes.new /tmp/notes
  sleep 0.5
done
`

// serviceView is what `corpus service show --json` says.
type serviceView struct {
	Service struct {
		Service struct {
			Name     string `json:"name"`
			Observed struct {
				State   string `json:"state"`
				Message string `json:"message"`
			} `json:"observed"`
			Links []struct {
				Project string   `json:"project"`
				Env     string   `json:"env"`
				Keys    []string `json:"keys"`
			} `json:"links"`
		} `json:"service"`
		Address    string   `json:"address"`
		SecretKeys []string `json:"secret_keys"`
	} `json:"service"`
}

func (c *cluster) service(name string) serviceView {
	c.t.Helper()
	var v serviceView
	if err := c.json(&v, "service", "show", name); err != nil {
		c.t.Fatal(err)
	}
	return v
}

// waitHealthy waits for a service to pass its health check.
func (c *cluster) waitHealthy(name string, within time.Duration) {
	c.t.Helper()
	eventually(c.t, within, "service "+name+" healthy", func() error {
		if v := c.service(name); v.Service.Service.Observed.State != "healthy" {
			return fmt.Errorf("service %s is %q: %s", name, v.Service.Service.Observed.State, v.Service.Service.Observed.Message)
		}
		return nil
	})
}

// buildImage builds an image with packages into an agent's state folder
// from the host: the agents' namespaces have no route to the Debian
// mirror, as a node that is offline would not.
func buildImage(t *testing.T, a *agentProc, packages string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(15*time.Minute))
	defer cancel()
	start := time.Now()
	if out, err := exec.CommandContext(ctx, corpusBin, "image", "build", "debian/bookworm", "--driver", "lxc",
		"--packages", packages, "--state-dir", a.stateDir).CombinedOutput(); err != nil {
		t.Fatalf("image build: %v\n%s", err, out)
	}
	t.Logf("debian/bookworm +%s built in %s", packages, time.Since(start).Round(time.Second))
}

// TestServicePostgres: a PostgreSQL service from the built-in template,
// in a guest of its own, linked to a project whose app writes and reads
// a row through DATABASE_URL; a guest that is not linked cannot connect;
// a backup kept off the guest, the table dropped, the restore brings the
// row back; an export and an import go through a file here; an agent
// restart keeps the data and the link; delete is refused while linked.
func TestServicePostgres(t *testing.T) {
	if os.Getenv("CORPUS_TEST_DEBIAN") == "" {
		t.Skip("slow: builds the debian/bookworm image with PostgreSQL (apt); set CORPUS_TEST_DEBIAN=1 (CI does)")
	}
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	a.kill()
	buildImage(t, a, "postgresql-15")
	c.waitNodeDown(a.name)
	a.proc = c.startAgent(a, "--address", nodeAddr)
	c.waitNodeReady(a.name)

	if out := c.mustCLI("service", "templates"); !strings.Contains(out, "postgresql") || !strings.Contains(out, "redis") || !strings.Contains(out, "mariadb") {
		t.Fatalf("service templates:\n%s", out)
	}
	for _, bad := range [][]string{
		{"service", "create", "x", "--template", "oracle"},
		{"service", "create", "x", "--template", "postgresql", "--size", "1M"},
		{"service", "create", "x", "--template", "postgresql", "--version", "9"},
		{"service", "create", "x", "--external", "not a url"},
	} {
		if out, _, code := c.cli(bad...); code == 0 {
			t.Errorf("%s succeeded:\n%s", strings.Join(bad, " "), out)
		}
	}
	if out := c.mustCLI("service", "list"); !strings.Contains(out, "no services") {
		t.Errorf("bad creates left something:\n%s", out)
	}

	start := time.Now()
	c.mustCLI("service", "create", "db", "--template", "postgresql", "--size", "256M", "--memory", "256M")
	c.waitHealthy("db", 5*time.Minute)
	t.Logf("service create to healthy: %s", time.Since(start).Round(100*time.Millisecond))
	c.mustCLI("service", "create", "db", "--template", "postgresql", "--size", "256M", "--memory", "256M") // the same again: fine
	if v := c.service("db"); len(v.Service.SecretKeys) != 1 || v.Service.SecretKeys[0] != "PASSWORD" {
		t.Errorf("service show: secrets %v, want PASSWORD by name only", v.Service.SecretKeys)
	}
	if out := c.mustCLI("--json", "service", "show", "db"); strings.Contains(out, "CREATE ROLE") || strings.Contains(out, "\"files\"") {
		t.Errorf("service show leaks the template's scripts:\n%s", out)
	}

	l := deployLabOn(t, c, a, client, nodeAddr, []string{"--image", "debian/bookworm", "--packages", "postgresql-15", "--memory", "256M", "--cpus", "0.5"})
	out := c.mustCLI("service", "link", "db", "hello", "--as", "DATABASE")
	if !strings.Contains(out, "DATABASE_URL") || !strings.Contains(out, "first push runs with it") {
		t.Errorf("service link before the first push:\n%s", out)
	}
	l.write("worker.sh", notesWorker, 0o755)
	l.write("Procfile", "worker: exec sh worker.sh\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "notes app")
	l.mustPush()
	notes := func() string { return l.guestSh("cat /tmp/notes 2>/dev/null || true") }
	eventually(t, time.Minute, "the app reads its row", func() error {
		if got := notes(); got != "hello from the app" {
			return fmt.Errorf("/tmp/notes = %q", got)
		}
		return nil
	})

	// Reach: the linked guest connects; a guest that is not linked
	// (same node, same image) does not, with the right password even.
	url := strings.TrimSpace(c.mustCLI("config", "get", "hello", "DATABASE_URL"))
	if got := l.guestSh(fmt.Sprintf("psql '%s' -tAc 'SELECT 42'", url)); got != "42" {
		t.Errorf("the linked guest's query = %q", got)
	}
	c.mustCLI("guest", "create", "stranger", "--image", "debian/bookworm", "--packages", "postgresql-15", "--memory", "128M", "--cpus", "0.2")
	waitRunning(t, c, "stranger")
	if out, errOut, code := c.cli("guest", "exec", "stranger", "--", "psql", url+"?connect_timeout=3", "-tAc", "SELECT 42"); code == 0 || strings.Contains(out, "42") {
		t.Errorf("a guest not linked to db connected to it:\n%s%s", out, errOut)
	}

	// Backup, drop the table, restore: the row is back.
	out = c.mustCLI("service", "backup", "db")
	if !strings.Contains(out, "done: backup") {
		t.Fatalf("service backup:\n%s", out)
	}
	var backups struct {
		Backups []struct {
			Backup struct {
				Id     string `json:"id"`
				Status string `json:"status"`
				Sha256 string `json:"sha256"`
			} `json:"backup"`
		} `json:"backups"`
	}
	if err := c.json(&backups, "service", "backups", "db"); err != nil || len(backups.Backups) != 1 || backups.Backups[0].Backup.Status != "succeeded" {
		t.Fatalf("service backups: %v, %+v", err, backups)
	}
	first := backups.Backups[0].Backup.Id
	c.mustCLI("guest", "exec", "svc-db", "--", "sh", "-c", `su postgres -c "psql -d corpus -qc 'DROP TABLE notes'"`)
	eventually(t, 10*time.Second, "the app sees the table gone", func() error {
		if got := notes(); !strings.HasPrefix(got, "error:") {
			return fmt.Errorf("/tmp/notes = %q", got)
		}
		return nil
	})
	c.mustCLI("service", "restore", "db", "--from", first)
	eventually(t, 10*time.Second, "the row is back", func() error {
		if got := notes(); got != "hello from the app" {
			return fmt.Errorf("/tmp/notes = %q", got)
		}
		return nil
	})

	// Export to a file here and import it back as a backup of its own.
	file := filepath.Join(tempDir(t), "db.pgdump")
	c.mustCLI("service", "export", first, "-o", file)
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Fatalf("export wrote %v, %v", st, err)
	}
	out = c.mustCLI("service", "import", "db", file)
	if !strings.Contains(out, "imported as backup") {
		t.Errorf("service import:\n%s", out)
	}
	// A file that is not what it claims is refused whole.
	if err := os.WriteFile(file, []byte("not a dump"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mustCLI("service", "import", "db", file) // stored: its checksum is its own
	if err := c.json(&backups, "service", "backups", "db"); err != nil || len(backups.Backups) != 3 {
		t.Fatalf("service backups after imports: %v, %d", err, len(backups.Backups))
	}
	if out, _, code := c.cli("service", "restore", "db", "--from", backups.Backups[0].Backup.Id); code == 0 {
		t.Errorf("restoring garbage succeeded:\n%s", out)
	}
	eventually(t, 10*time.Second, "the data survived a failed restore", func() error {
		if got := notes(); got != "hello from the app" {
			return fmt.Errorf("/tmp/notes = %q", got)
		}
		return nil
	})

	// An agent restart keeps the data and the link.
	a.kill()
	a.proc = c.startAgent(a, "--address", nodeAddr)
	// The service's state is the one reported before the kill until the
	// new agent reports; what follows asks the new agent itself.
	eventually(t, time.Minute, "the restarted agent serves exec", func() error {
		if _, errOut, code := c.cli("guest", "exec", "svc-db", "--", "true"); code != 0 {
			return errors.New(strings.TrimSpace(errOut))
		}
		return nil
	})
	c.waitHealthy("db", 2*time.Minute)
	if got := strings.TrimSpace(c.mustCLI("config", "get", "hello", "DATABASE_URL")); got != url {
		t.Errorf("DATABASE_URL after an agent restart = %q, want %q", got, url)
	}
	if got := notes(); got != "hello from the app" {
		t.Errorf("/tmp/notes after an agent restart = %q", got)
	}

	// The guest destroyed by hand: made again empty, the service is
	// installed again and serves its data from the volume.
	lxcPath := filepath.Join(a.stateDir, "lxc")
	if out, err := exec.Command("lxc-destroy", "-P", lxcPath, "-n", "svc-db", "-f").CombinedOutput(); err != nil {
		t.Fatalf("lxc-destroy: %v\n%s", err, out)
	}
	eventually(t, 3*time.Minute, "the app reads its row from the remade guest", func() error {
		if got := notes(); got != "hello from the app" {
			return fmt.Errorf("/tmp/notes = %q", got)
		}
		return nil
	})
	c.waitHealthy("db", time.Minute)

	// Deleting while linked is refused; unlink takes the variables away.
	if _, errOut, code := c.cli("service", "delete", "db", "--yes"); code == 0 || !strings.Contains(errOut, "linked to hello/dev") {
		t.Errorf("service delete while linked: exit %d\n%s", code, errOut)
	}
	// (The app cannot run without its database: the variables go with
	// the next deploy.)
	c.mustCLI("service", "unlink", "db", "hello", "--no-restart")
	if out, _, code := c.cli("config", "get", "hello", "DATABASE_URL"); code == 0 {
		t.Errorf("DATABASE_URL after unlink: %s", out)
	}
	// Deleted without --purge, made again: the data is back (the role
	// with the new password).
	c.mustCLI("service", "delete", "db", "--yes")
	gone := func() error {
		if out, _, code := c.cli("guest", "show", "svc-db"); code == 0 {
			return fmt.Errorf("guest svc-db still there:\n%s", out)
		}
		return nil
	}
	eventually(t, time.Minute, "the service's guest gone", gone)
	// Its data is on n1: a node gossip found down (a busy machine) keeps
	// it until the node is back.
	c.waitNodeReady(a.name)
	c.mustCLI("service", "create", "db", "--template", "postgresql", "--size", "256M", "--memory", "256M")
	c.waitHealthy("db", 3*time.Minute)
	if got := strings.TrimSpace(c.mustCLI("guest", "exec", "svc-db", "--", "sh", "-c", `su postgres -c "psql -d corpus -tAc 'SELECT note FROM notes'"`)); got != "hello from the app" {
		t.Errorf("the service made again on its volume reads %q", got)
	}
	c.mustCLI("service", "delete", "db", "--purge", "--yes")
	eventually(t, time.Minute, "the service's guest gone", func() error {
		if out, _, code := c.cli("guest", "show", "svc-db"); code == 0 {
			return fmt.Errorf("guest svc-db still there:\n%s", out)
		}
		return nil
	})
	var all map[string]json.RawMessage
	if err := c.json(&all, "service", "backups"); err != nil || len(all["backups"]) > 0 {
		t.Errorf("backups after delete --purge: %v %s", err, all["backups"])
	}
}

// waitRunning waits for a guest to run.
func waitRunning(t *testing.T, c *cluster, name string) {
	t.Helper()
	eventually(t, 3*time.Minute, "guest "+name+" running", func() error {
		if v := c.guest(name); v.Status != "running" {
			return fmt.Errorf("guest %s is %v", name, v)
		}
		return nil
	})
}

// guestPassword is the shell that reads a service's PASSWORD in its guest
// (the environment the agent wrote there, readable by root only).
const guestPassword = `PW=$(sed -n 's/.*"PASSWORD":"\([^"]*\)".*/\1/p' /usr/local/lib/corpus/service/env.json)`

// TestServiceMariaDBAndRedis: the other built-in templates go through the
// same path: healthy, a backup, the data changed, the restore brings it
// back (redis's with its server stopped meanwhile, as its template says).
// Then redis's node dies: the service is lost, and a restore onto the
// node that kept its backup brings it back with its data as the backup
// had it, its link pointed at the new address; the dead node, back,
// keeps the old volume (it may hold newer data) and drops the guest.
func TestServiceMariaDBAndRedis(t *testing.T) {
	if os.Getenv("CORPUS_TEST_DEBIAN") == "" {
		t.Skip("slow: builds the debian/bookworm images with MariaDB and Redis (apt); set CORPUS_TEST_DEBIAN=1 (CI does)")
	}
	c := newCluster(t)
	a := c.addAgent("n1")
	a.kill()
	buildImage(t, a, "mariadb-server")
	buildImage(t, a, "redis-server,redis-tools")
	c.waitNodeDown(a.name)
	a.proc = c.startAgent(a)
	c.waitNodeReady(a.name)
	c.mustCLI("service", "create", "maria", "--template", "mariadb", "--size", "256M", "--memory", "256M")
	c.mustCLI("service", "create", "cache", "--template", "redis", "--size", "64M", "--memory", "64M")
	c.waitHealthy("maria", 5*time.Minute)
	c.waitHealthy("cache", 5*time.Minute)
	sh := func(guest, script string) string {
		t.Helper()
		return strings.TrimSpace(c.mustCLI("guest", "exec", guest, "--", "sh", "-c", script))
	}
	for _, tc := range []struct {
		service, guest, write, change, read string
	}{
		{"maria", "svc-maria",
			`mariadb -u root corpus -e "CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')"`,
			`mariadb -u root corpus -e "DROP TABLE t"`,
			`mariadb -u root corpus -N -e "SELECT v FROM t" 2>&1`},
		{"cache", "svc-cache",
			guestPassword + `; REDISCLI_AUTH=$PW redis-cli -p 6379 set k kept`,
			guestPassword + `; REDISCLI_AUTH=$PW redis-cli -p 6379 set k changed`,
			guestPassword + `; REDISCLI_AUTH=$PW redis-cli -p 6379 get k`},
	} {
		sh(tc.guest, tc.write)
		if got := sh(tc.guest, tc.read); got != "kept" {
			t.Fatalf("%s: wrote kept, read %q", tc.service, got)
		}
		out := c.mustCLI("service", "backup", tc.service)
		if !strings.Contains(out, "done: backup") {
			t.Fatalf("%s backup:\n%s", tc.service, out)
		}
		sh(tc.guest, tc.change)
		if out, _, _ := c.cli("guest", "exec", tc.guest, "--", "sh", "-c", tc.read); strings.TrimSpace(out) == "kept" {
			t.Fatalf("%s: the change did not take", tc.service)
		}
		c.mustCLI("service", "restore", tc.service)
		eventually(t, time.Minute, tc.service+" restored", func() error {
			if _, _, code := c.cli("guest", "exec", tc.guest, "--", "sh", "-c", tc.read); code != 0 {
				return fmt.Errorf("reading %s failed", tc.service)
			}
			if got := sh(tc.guest, tc.read); got != "kept" {
				return fmt.Errorf("%s reads %q after the restore", tc.service, got)
			}
			return nil
		})
		c.waitHealthy(tc.service, time.Minute)
	}

	// A second node (staging mode: a staging project goes there) keeps
	// the next backup. A project on n2 linked to redis on n1 reaches it
	// across the nodes (guest subnets routed, sources kept); one that is
	// not linked does not.
	b := c.addAgent("n2", "--label", "mode=staging")
	b.kill()
	buildImage(t, b, "redis-server,redis-tools")
	c.waitNodeDown("n2")
	b.proc = c.startAgent(b)
	c.waitNodeReady("n2")
	c.lab.routeGuestSubnets(c)
	for _, p := range []string{"app", "other"} {
		c.mustCLI("project", "create", p, "--env", "staging", "--image", "busybox", "--memory", "32M", "--cpus", "0.1")
		waitRunning(t, c, p+"-staging")
		if n := c.guest(p + "-staging").NodeName; n != "n2" {
			t.Fatalf("%s-staging runs on %s, want n2", p, n)
		}
	}
	c.mustCLI("service", "link", "cache", "app", "--env", "staging")
	host := strings.TrimSpace(c.mustCLI("config", "get", "app", "REDIS_HOST", "--env", "staging"))
	ping := "echo PING | nc -w 3 " + host + " 6379"
	eventually(t, 30*time.Second, "app on n2 reaches redis on n1", func() error {
		if out, _, _ := c.cli("guest", "exec", "app-staging", "--", "sh", "-c", ping); !strings.Contains(out, "NOAUTH") {
			return fmt.Errorf("redis from n2 said %q", out)
		}
		return nil
	})
	if out, _, _ := c.cli("guest", "exec", "other-staging", "--", "sh", "-c", ping); strings.Contains(out, "NOAUTH") {
		t.Errorf("a project on n2 not linked to cache reached it: %q", out)
	}
	c.mustCLI("node", "mode", "n2", "dev")                           // for the restore onto it below
	c.mustCLI("service", "link", "cache", "app", "--env", "staging") // the same again: nothing changes
	oldURL := strings.TrimSpace(c.mustCLI("config", "get", "app", "REDIS_URL", "--env", "staging"))
	if out, errOut, code := c.cli("service", "restore", "cache", "--to-node", "n2"); code == 0 || !strings.Contains(errOut, "not lost") {
		t.Errorf("restore --to-node of a service that is not lost: exit %d\n%s%s", code, out, errOut)
	}
	if out := c.mustCLI("service", "backup", "cache"); !strings.Contains(out, "done: backup") {
		t.Fatalf("cache backup:\n%s", out)
	}
	var kept struct {
		Backups []struct {
			NodeName string `json:"node_name"`
		} `json:"backups"`
	}
	if err := c.json(&kept, "service", "backups", "cache"); err != nil || len(kept.Backups) == 0 || kept.Backups[0].NodeName != "n2" {
		t.Fatalf("the newest backup of cache is kept on %+v (%v), want n2: off the service's node", kept, err)
	}
	sh("svc-cache", guestPassword+`; REDISCLI_AUTH=$PW redis-cli -p 6379 set k newer-than-the-backup`)
	c.killNode(a)
	eventually(t, time.Minute, "cache lost", func() error {
		if v := c.service("cache"); v.Service.Service.Observed.State != "lost" {
			return fmt.Errorf("cache is %q", v.Service.Service.Observed.State)
		}
		return nil
	})
	out, errOut, code := c.cli("service", "restore", "cache", "--to-node", "n2")
	if code != 0 {
		t.Fatalf("restore onto n2: exit %d\n%s%s", code, out, errOut)
	}
	out = errOut + out // progress on stderr, the result on stdout
	t.Logf("restore of the lost service onto n2:\n%s", out)
	for _, want := range []string{"svc-cache-2", "stays on node n1 as volume svc-cache", "s old", "done: restored from backup"} {
		if !strings.Contains(out, want) {
			t.Errorf("restore onto n2 does not say %q:\n%s", want, out)
		}
	}
	c.waitHealthy("cache", time.Minute)
	if got := sh("svc-cache-2", guestPassword+`; REDISCLI_AUTH=$PW redis-cli -p 6379 get k`); got != "kept" {
		t.Errorf("cache on n2 reads k = %q, want the backup's kept", got)
	}
	v := c.service("cache")
	newURL := strings.TrimSpace(c.mustCLI("config", "get", "app", "REDIS_URL", "--env", "staging"))
	if newURL == oldURL || !strings.Contains(newURL, "@"+v.Service.Address+":6379") {
		t.Errorf("REDIS_URL after the restore = %q (was %q), want the new address %s", newURL, oldURL, v.Service.Address)
	}

	// n1 returns: the lost guest goes, its volume stays, unbound.
	c.restartAgent(a)
	eventually(t, time.Minute, "the lost guest removed from n1", func() error {
		if got := guestContainers(a.lxc); slices.Contains(got, "svc-cache") {
			return fmt.Errorf("containers on n1: %v", got)
		}
		return nil
	})
	if out := c.mustCLI("volume", "list"); !regexp.MustCompile(`svc-cache\s.*n1`).MatchString(out) {
		t.Errorf("volume list after n1 returned:\n%s", out)
	}
}

// TestServiceSaysWhyItsGuestCannotRun: a service whose guest cannot be
// made is unhealthy, saying why, instead of starting for ever. Here an
// operator's template asks for a package Debian does not have (the
// image build fails; so it did on a host without the debian template).
func TestServiceSaysWhyItsGuestCannotRun(t *testing.T) {
	templates := operatorTemplate(t, "kv", map[string]string{
		"service.yaml": "name: kv\nversions: [\"1\"]\nimage: debian/bookworm\npackages: [corpus-no-such-package]\nport: 6379\nvolume: {path: /srv/data}\n",
	})
	c := newCluster(t, "--service-templates", templates)
	a := c.addAgent("n1")
	c.mustCLI("service", "create", "kv", "--template", "kv", "--size", "64M")
	// The build's progress (the guest's message) keeps the wait going.
	const want = "its guest svc-kv cannot run: creating: creating container svc-kv: building image debian/bookworm +corpus-no-such-package"
	eventually(t, 2*time.Minute, "service kv unhealthy, saying why", func() error {
		o := c.service("kv").Service.Service.Observed
		if o.State != "unhealthy" || !strings.Contains(o.Message, want) {
			return fmt.Errorf("service kv is %q: %q; want unhealthy: %q (guest %s)", o.State, o.Message, want, c.guest("svc-kv"))
		}
		return nil
	})
	if out := c.mustCLI("service", "show", "kv"); !strings.Contains(out, "unhealthy: "+want) {
		t.Errorf("service show kv:\n%s", out)
	}
	// The agent tries the guest again, twice more here (its log says
	// "building image" each time; the guest shows "creating"
	// meanwhile): the service stays unhealthy for the same reason
	// throughout, and does not go back to "starting".
	tries := func() int { return strings.Count(a.log.String(), `msg="building image"`) }
	first := tries()
	eventually(t, 2*time.Minute, "guest svc-kv tried twice more", func() error {
		o := c.service("kv").Service.Service.Observed
		if o.State != "unhealthy" || !strings.Contains(o.Message, want) {
			t.Fatalf("service kv while the agent tries its guest again: %q: %q, want unhealthy: %q", o.State, o.Message, want)
		}
		if n := tries() - first; n < 2 {
			return fmt.Errorf("the agent built the guest's image %d more times", n)
		}
		return nil
	})
}

// TestServiceBackupYields: a service's backup runs with a lower CPU
// priority than the server it dumps, so the service's clients come
// first. An operator's template on busybox whose backup is its own
// niceness, exported.
func TestServiceBackupYields(t *testing.T) {
	templates := operatorTemplate(t, "nicety", map[string]string{
		"service.yaml": "name: nicety\nversions: [\"1\"]\nimage: busybox\nport: 7000\nvolume: {path: /srv/data}\n",
		"backup":       "#!/bin/sh\ncut -d' ' -f19 /proc/$$/stat\n", // nice, the 19th field
	})
	c := newCluster(t, "--service-templates", templates)
	c.addAgent("n1")
	c.mustCLI("service", "create", "nc", "--template", "nicety", "--size", "64M", "--memory", "64M")
	c.waitHealthy("nc", 2*time.Minute)
	if out := c.mustCLI("service", "backup", "nc"); !strings.Contains(out, "done: backup") {
		t.Fatalf("service backup:\n%s", out)
	}
	var backups struct {
		Backups []struct {
			Backup struct {
				ID string `json:"id"`
			} `json:"backup"`
		} `json:"backups"`
	}
	if err := c.json(&backups, "service", "backups", "nc"); err != nil || len(backups.Backups) != 1 {
		t.Fatalf("service backups: %v, %+v", err, backups)
	}
	file := filepath.Join(tempDir(t), "nc.dump")
	c.mustCLI("service", "export", backups.Backups[0].Backup.ID, "-o", file)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != "10" {
		t.Errorf("the backup script ran with niceness %q, want 10", got)
	}
}

// operatorTemplate writes an operator's service template of name with
// files (setup, start and health that do nothing, unless files has its
// own) and returns the folder to give --service-templates.
func operatorTemplate(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(tempDir(t), "templates", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{
		"setup":  "#!/bin/sh\nexit 0\n",
		"start":  "#!/bin/sh\nexec sleep 1000000\n",
		"health": "#!/bin/sh\nexit 0\n",
	}
	maps.Copy(all, files)
	for file, body := range all {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Dir(dir)
}
