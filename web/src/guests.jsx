// The guests list and a guest's page.
import { useEffect, useRef, useState } from 'preact/hooks';
import { stream, unary } from './connect.js';
import { byName, bytes, cpu, time } from './format.js';
import { useAction, useApi, useRole } from './state.js';
import { Terminal } from './terminal.jsx';
import { ConfirmButton, DataTable, Fields, ListTable, Loading, Status, href } from './ui.jsx';
import { Admission } from './extensions.jsx';

// useGuestProjects maps guest names to "project/env" from ListProjects.
function useGuestProjects() {
  const projects = useApi('corpus.v1.ProjectService/ListProjects', {}, { quiet: true });
  const map = {};
  for (const pv of (projects.data && projects.data.projects) || []) {
    const name = pv.project && pv.project.name;
    for (const e of pv.envs || []) {
      if (e.guestName) map[e.guestName] = { project: name, env: e.name };
      for (const i of e.instances || []) {
        if (i.guestName) map[i.guestName] = { project: name, env: e.name };
      }
    }
  }
  return map;
}

export function GuestsPage() {
  const guests = useApi('corpus.v1.GuestService/ListGuests', {});
  const owners = useGuestProjects();
  const list = byName(guests.data && guests.data.guests, 'guest');
  return (
    <>
      <h1>Guests</h1>
      <ListTable
        label="Guests"
        empty="No guests."
        res={guests}
        rows={list}
        columns={['Name', 'State', 'Node', 'Driver', 'Image', 'Address', 'Project']}
      >
        {(g) => {
          const guest = g.guest || {};
          const spec = guest.spec || {};
          const owner = owners[guest.name];
          return (
            <tr key={guest.id || guest.name} data-testid="guest-row" data-name={guest.name}>
              <td>
                <a href={href('guests', guest.name)}>{guest.name}</a>
              </td>
              <td>
                <Status value={g.status} />
                {guest.desiredState && guest.desiredState !== g.status ? (
                  <span class="muted small"> → {guest.desiredState}</span>
                ) : null}
              </td>
              <td>{g.nodeName || <span class="muted">{guest.pendingReason || 'unplaced'}</span>}</td>
              <td>{spec.driver}</td>
              <td class="mono">{spec.image}</td>
              <td class="mono">{guest.address}</td>
              <td>
                {owner ? (
                  <a href={href('projects', owner.project)}>
                    {owner.project}/{owner.env}
                  </a>
                ) : (
                  ''
                )}
              </td>
            </tr>
          );
        }}
      </ListTable>
    </>
  );
}

export function GuestPage({ name }) {
  const { isOps, role } = useRole();
  const res = useApi('corpus.v1.GuestService/GetGuest', { name });
  const [run, busy] = useAction();
  const [terminal, setTerminal] = useState(false);
  useEffect(() => setTerminal(false), [name]);
  const g = res.data && res.data.guest;
  const action = (proc) =>
    run(async () => {
      await unary(proc, { name });
      res.reload();
    });
  return (
    <>
      <p class="crumbs">
        <a href="#/guests">Guests</a> /
      </p>
      <h1>{name}</h1>
      {!g ? (
        res.error ? null : <Loading />
      ) : (
        <>
          <div class="actions">
            <Status value={res.data.status} />
            {isOps ? (
              <>
                <button
                  type="button"
                  disabled={busy || g.desiredState === 'running'}
                  onClick={() => action('corpus.v1.GuestService/StartGuest')}
                  data-testid="start"
                >
                  Start
                </button>
                <ConfirmButton
                  label="Stop"
                  title={`Stop ${name}`}
                  message={`Stop guest ${name}?`}
                  danger
                  disabled={busy || g.desiredState === 'stopped'}
                  testid="stop"
                  onConfirm={() => action('corpus.v1.GuestService/StopGuest')}
                />
              </>
            ) : null}
            {role !== 'viewer' && !terminal ? (
              <button
                type="button"
                class="primary"
                onClick={() => setTerminal(true)}
                data-testid="open-terminal"
                disabled={res.data.status !== 'running'}
                title={res.data.status !== 'running' ? 'The guest is not running' : ''}
              >
                Open terminal
              </button>
            ) : null}
          </div>
          {terminal ? <Terminal guest={name} onClose={() => setTerminal(false)} /> : null}
          <GuestDetails view={res.data} />
          <Admission changes={g.admission} what={name} />
          <Events events={g.events || []} />
        </>
      )}
      <LogPanel name={name} />
    </>
  );
}

function GuestDetails({ view }) {
  const g = view.guest || {};
  const spec = g.spec || {};
  const obs = g.observed || {};
  const r = spec.resources || {};
  const ports = (spec.ports || [])
    .map((p) => `${p.hostPort || 0}→${p.guestPort || 0}/${p.protocol || 'tcp'}`)
    .join(', ');
  const vol = spec.volume;
  return (
    <section aria-labelledby="g-details">
      <h2 id="g-details">Details</h2>
      <Fields
        items={[
          ['Status', view.status],
          ['Desired', g.desiredState],
          ['Observed', obs.state ? `${obs.state}${obs.message ? `: ${obs.message}` : ''}` : ''],
          ['Pending', g.pendingReason],
          ['Node', view.nodeName],
          ['Address', g.address],
          ['Driver', spec.driver],
          ['Image', spec.image],
          ['CPU', r.cpuMillis ? cpu(r.cpuMillis) : ''],
          ['Memory', r.memoryBytes ? bytes(r.memoryBytes) : ''],
          ['Disk', r.diskBytes ? bytes(r.diskBytes) : ''],
          ['Ports', ports],
          [
            'Volume',
            vol ? `${vol.useVolume || g.name}${vol.sizeBytes ? ` (${bytes(vol.sizeBytes)})` : ''} at ${vol.path || '/srv/data'}` : '',
          ],
          ['Release', obs.release ? `r${obs.release}` : ''],
          ['Release error', obs.releaseError],
          ['PID', obs.pid && obs.pid !== '0' ? String(obs.pid) : ''],
          ['Packages', (spec.packages || []).join(', ')],
          ['Privileged', spec.privileged ? 'yes' : ''],
          ['Created', time(g.createdAt)],
          ['Updated', time(obs.updatedAt)],
          ['ID', g.id],
        ]}
      />
    </section>
  );
}

function Events({ events }) {
  if (!events.length) return null;
  const list = events.slice().reverse();
  return (
    <section aria-labelledby="g-events">
      <h2 id="g-events">Events</h2>
      <DataTable label="Guest events, newest first" columns={['Time', 'Type', 'Message']} rows={list}>
        {(e, i) => (
          <tr key={i}>
            <td class="nowrap">{time(e.time)}</td>
            <td>{e.type}</td>
            <td>{e.message}</td>
          </tr>
        )}
      </DataTable>
    </section>
  );
}

const maxLines = 5000;

function logText(l) {
  const parts = [time(l.time)];
  if (l.source && l.source !== 'app') parts.push(`[${l.source}]`);
  if (l.process) parts.push(`${l.process}${l.release ? `@${l.release}` : ''}:`);
  parts.push(l.line || '');
  return parts.join(' ');
}

// LogPanel shows a guest's log: its tail, then new lines while Follow is
// on.
export function LogPanel({ name }) {
  const [lines, setLines] = useState([]);
  const [follow, setFollow] = useState(false);
  const [state, setState] = useState('loading');
  const [error, setError] = useState('');
  const [source, setSource] = useState('');
  const [gen, setGen] = useState(0);
  const pre = useRef(null);
  const stick = useRef(true);
  useEffect(() => {
    const ctl = new AbortController();
    let buf = [];
    let pending = null;
    const flush = () => {
      pending = null;
      const add = buf;
      buf = [];
      setLines((old) => {
        const next = old.concat(add);
        return next.length > maxLines ? next.slice(next.length - maxLines) : next;
      });
    };
    setLines([]);
    setError('');
    setState(follow ? 'following' : 'loading');
    stick.current = true;
    const req = { name, tail: 500, follow };
    if (source) req.sources = [source];
    stream(
      'corpus.v1.GuestService/GuestLogs',
      req,
      (l) => {
        buf.push(logText(l));
        if (!pending) pending = setTimeout(flush, 50);
      },
      ctl.signal,
    ).then(
      () => {
        if (pending) clearTimeout(pending);
        flush();
        setState('done');
      },
      (e) => {
        if (e.name === 'AbortError') return;
        if (pending) clearTimeout(pending);
        flush();
        setState('failed');
        setError(e.message);
      },
    );
    return () => {
      ctl.abort();
      if (pending) clearTimeout(pending);
    };
  }, [name, follow, source, gen]);
  useEffect(() => {
    const el = pre.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [lines]);
  const onScroll = () => {
    const el = pre.current;
    if (el) stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  };
  return (
    <section aria-labelledby="g-logs" class="logs">
      <h2 id="g-logs">Log</h2>
      <div class="actions">
        <label class="check">
          <input
            type="checkbox"
            checked={follow}
            onChange={(e) => setFollow(e.currentTarget.checked)}
            data-testid="log-follow"
          />
          Follow
        </label>
        <label for="log-source">Source</label>
        <select id="log-source" value={source} onChange={(e) => setSource(e.currentTarget.value)}>
          <option value="">all</option>
          <option value="app">app</option>
          <option value="deploy">deploy</option>
          <option value="system">system</option>
        </select>
        {!follow ? (
          <button type="button" class="ghost" onClick={() => setGen((n) => n + 1)}>
            Reload
          </button>
        ) : null}
        <span class="muted small" role="status">
          {state === 'following'
            ? 'following new lines'
            : state === 'loading'
              ? 'loading…'
              : state === 'failed'
                ? `stopped: ${error}`
                : `${lines.length} lines`}
        </span>
      </div>
      <pre
        ref={pre}
        class="log"
        data-testid="guest-log"
        tabIndex={0}
        aria-label={`Log of ${name}`}
        onScroll={onScroll}
      >
        {lines.length ? lines.join('\n') : state === 'loading' ? '' : 'No log lines.'}
      </pre>
    </section>
  );
}
