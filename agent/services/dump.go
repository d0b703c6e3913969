package services

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"corpus/agent/backup"
	"corpus/drivers"
)

// ErrNotHere is returned when the service does not run on this node.
var ErrNotHere = errors.New("the service does not run on this node")

// ready returns the worker of a service, held (unlock releases it), and
// its guest's driver.
func (m *Manager) ready(ctx context.Context, service string) (w *worker, d drivers.Driver, unlock func(), err error) {
	w, d, err = m.find(service)
	if err != nil {
		return nil, nil, nil, err
	}
	w.op.Lock()
	if w.rt == nil {
		if err := w.fetch(ctx); err != nil {
			w.op.Unlock()
			return nil, nil, nil, err
		}
	}
	return w, d, w.op.Unlock, nil
}

func (m *Manager) find(service string) (*worker, drivers.Driver, error) {
	m.mu.Lock()
	var w *worker
	for _, x := range m.workers {
		if x.service == service {
			w = x
		}
	}
	m.mu.Unlock()
	if w == nil {
		return nil, nil, fmt.Errorf("service %s: %w", service, ErrNotHere)
	}
	_, d := m.a.Guest(w.guest)
	if d == nil {
		return nil, nil, fmt.Errorf("service %s: %w", service, ErrNotHere)
	}
	return w, d, nil
}

// backupNice is the niceness a backup script runs with: a dump shares
// the guest's CPU with the clients the service serves meanwhile, and
// they come first.
const backupNice = 10

// Dump runs the template's backup script in the service's guest, its
// output to w; it returns the dump's size and SHA-256 (hex).
func (m *Manager) Dump(ctx context.Context, service string, w io.Writer) (int64, string, error) {
	wk, d, unlock, err := m.ready(ctx, service)
	if err != nil {
		return 0, "", err
	}
	defer unlock()
	if _, ok := wk.rt.Service.TemplateSpec.GetFiles()["backup"]; !ok {
		return 0, "", fmt.Errorf("template %s has no backup script", wk.rt.Service.Template)
	}
	start := time.Now()
	c := backup.NewCounter(w)
	out, err := wk.script(ctx, d, "backup", backupNice, nil, c)
	if err != nil {
		return 0, "", fmt.Errorf("backup of %s: %s", service, lastLine(out, err))
	}
	m.cfg.Logger.Info("service dumped", "service", service, "bytes", c.Size(), "duration", time.Since(start).Round(time.Millisecond))
	return c.Size(), c.Sum(), nil
}

// Load restores a backup into the service: r is kept aside on the node
// until all of it is there and matches size and sum, and only then does
// the template's restore script read it (with the server stopped
// meanwhile when the template says restore: offline). It returns what
// the script said.
func (m *Manager) Load(ctx context.Context, service string, r io.Reader, size int64, sum string) (string, error) {
	if _, _, err := m.find(service); err != nil {
		return "", err
	}
	spool, err := backup.Spool(m.cfg.SpoolDir, r, size, sum)
	if err != nil {
		return "", err
	}
	defer spool.Close()
	wk, d, unlock, err := m.ready(ctx, service)
	if err != nil {
		return "", err
	}
	defer unlock()
	t := wk.rt.Service.TemplateSpec
	if _, ok := t.GetFiles()["restore"]; !ok {
		return "", fmt.Errorf("template %s has no restore script", wk.rt.Service.Template)
	}
	start := time.Now()
	if t.RestoreOffline {
		if err := wk.stopServer(ctx, d); err != nil {
			return "", fmt.Errorf("stopping the server for the restore: %w", err)
		}
	}
	out, err := wk.script(ctx, d, "restore", 0, spool, nil)
	if t.RestoreOffline {
		// Whatever the restore did, the server runs again.
		if serr := wk.startServer(context.WithoutCancel(ctx), d); serr != nil {
			err = errors.Join(err, fmt.Errorf("starting the server again: %w", serr))
		}
	}
	if err != nil {
		return string(out), fmt.Errorf("restore of %s: %s", service, lastLine(out, err))
	}
	m.cfg.Logger.Info("service restored", "service", service, "bytes", size, "duration", time.Since(start).Round(time.Millisecond))
	return string(out), nil
}
