// Projects: the list, and a project's environments and releases.
import { useRef, useState } from 'preact/hooks';
import { base64Bytes, stream, unary } from './connect.js';
import { DurationChart } from './charts.jsx';
import { byName, duration, releaseDuration, shortCommit, time } from './format.js';
import { useAction, useApi, useApp, useRole } from './state.js';
import { ConfirmButton, DataTable, Empty, Fields, ListTable, Listing, Loading, Status, href } from './ui.jsx';
import { Admission } from './extensions.jsx';

export function ProjectsPage() {
  const res = useApi('corpus.v1.ProjectService/ListProjects', {});
  const list = byName(res.data && res.data.projects, 'project');
  return (
    <>
      <h1>Projects</h1>
      <ListTable
        label="Projects"
        empty="No projects."
        res={res}
        rows={list}
        columns={['Name', 'Environments', 'Domains', 'Members']}
      >
        {(pv) => {
          const p = pv.project || {};
          return (
            <tr key={p.id || p.name} data-testid="project-row" data-name={p.name}>
              <td>
                <a href={href('projects', p.name)}>{p.name}</a>
              </td>
              <td>
                {(pv.envs || []).map((e) => (
                  <span class="env-chip" key={e.name}>
                    {e.name}
                    {e.currentRelease ? ` r${e.currentRelease}` : ''} <Status value={e.guestStatus} />
                  </span>
                ))}
              </td>
              <td>{(pv.envs || []).flatMap((e) => e.domains || []).join(', ')}</td>
              <td>{(p.members || []).join(', ')}</td>
            </tr>
          );
        }}
      </ListTable>
    </>
  );
}

export function ProjectPage({ name }) {
  const res = useApi('corpus.v1.ProjectService/GetProject', { name });
  const routes = useApi('corpus.v1.IngressService/ListRoutes', {}, { quiet: true });
  const pv = res.data && res.data.project;
  const certs = {};
  for (const r of (routes.data && routes.data.routes) || []) {
    const route = r.route || {};
    if (route.domain) certs[route.domain] = { https: !!route.https, cert: r.certificate || null, target: r.target };
  }
  const p = (pv && pv.project) || {};
  return (
    <>
      <p class="crumbs">
        <a href="#/projects">Projects</a> /
      </p>
      <h1>{name}</h1>
      {!pv ? (
        res.error ? null : <Loading />
      ) : (
        <>
          <Fields
            items={[
              ['Members', (p.members || []).join(', ')],
              ['Created', time(p.createdAt)],
            ]}
          />
          <Admission changes={p.admission} what={name} />
          {(pv.envs || []).length ? null : <Empty>No environments.</Empty>}
          {(pv.envs || []).map((e) => (
            <EnvSection key={e.name} project={name} env={e} certs={certs} raw={(p.envs || []).find((x) => x.name === e.name)} />
          ))}
        </>
      )}
    </>
  );
}

function certText(c) {
  if (!c) return 'no certificate yet';
  const parts = [c.state || 'unknown'];
  if (c.notAfter) parts.push(`until ${time(c.notAfter)}`);
  if (c.lastError) parts.push(`last error: ${c.lastError}`);
  return parts.join(', ');
}

function EnvSection({ project, env, certs, raw }) {
  const id = `env-${env.name}`;
  const scale = env.scale || {};
  const domains = env.domains || [];
  return (
    <section class="env" aria-labelledby={id}>
      <h2 id={id}>
        {env.name} <Status value={env.guestStatus} />
      </h2>
      <Fields
        items={[
          ['Current release', env.currentRelease ? `r${env.currentRelease}` : 'none yet'],
          ['Guest', env.guestName ? <a href={href('guests', env.guestName)}>{env.guestName}</a> : ''],
          ['Node', env.nodeName],
          ['Branch', raw && raw.branch],
          ['Git remote', env.gitRemote ? <code>{env.gitRemote}</code> : ''],
          [
            'Scale',
            Object.keys(scale)
              .sort()
              .map((k) => `${k}=${scale[k]}`)
              .join(', '),
          ],
          [
            'Services',
            (env.services || []).length ? (
              <span>
                {(env.services || []).map((s, i) => {
                  const svc = s.split(' ')[0];
                  return (
                    <span key={s}>
                      {i ? ', ' : ''}
                      <a href={href('services', svc)}>{s}</a>
                    </span>
                  );
                })}
              </span>
            ) : (
              ''
            ),
          ],
        ]}
      />
      {domains.length ? (
        <>
          <h3>Domains</h3>
          <ul class="plain">
            {domains.map((d) => {
              const c = certs[d];
              return (
                <li key={d}>
                  <span class="mono">{d}</span>{' '}
                  {c && c.https ? (
                    <span class="muted small">HTTPS: {certText(c.cert)}</span>
                  ) : c ? (
                    <span class="muted small">HTTP only</span>
                  ) : null}
                </li>
              );
            })}
          </ul>
        </>
      ) : null}
      {(env.instances || []).length > 1 ? <Instances env={env} /> : null}
      <Processes project={project} env={env.name} />
      <ConfigKeys project={project} env={env.name} />
      <Releases project={project} env={env.name} />
    </section>
  );
}

function Instances({ env }) {
  return (
    <>
      <h3>Instances</h3>
      <DataTable
        label={`Instances of ${env.name}`}
        columns={['#', 'Guest', 'Status', 'Node', 'Release', 'Processes']}
        rows={env.instances || []}
      >
        {(i) => (
          <tr key={i.index}>
            <td>{i.index}</td>
            <td>
              <a href={href('guests', i.guestName)}>{i.guestName}</a>
            </td>
            <td>
              <Status value={i.guestStatus} />
              {i.error ? <span class="small"> {i.error}</span> : null}
            </td>
            <td>{i.nodeName}</td>
            <td>{i.release ? `r${i.release}` : ''}</td>
            <td>{(i.processes || []).join(', ')}</td>
          </tr>
        )}
      </DataTable>
    </>
  );
}

function Processes({ project, env }) {
  const res = useApi('corpus.v1.ProjectService/ListProcesses', { project, env }, { quiet: true });
  const list = (res.data && res.data.processes) || [];
  return (
    <>
      <h3>Processes</h3>
      <ListTable
        label={`Processes of ${env}`}
        empty="No processes running."
        failed={(e) => <p class="muted small">Processes are not available: {e.message}</p>}
        res={res}
        rows={list}
        columns={['Type', 'State', 'Instance', 'Release', 'PID', 'Restarts', 'Started', 'Last exit']}
      >
        {(p, i) => (
          <tr key={`${p.name}-${p.instance || 1}-${i}`}>
            <td>
              {p.name}
              {p.port ? <span class="muted small"> :{p.port}</span> : null}
            </td>
            <td>
              <Status value={p.state} />
            </td>
            <td>{p.guest || p.instance || ''}</td>
            <td>{p.release}</td>
            <td>{p.pid || ''}</td>
            <td>{p.restarts || 0}</td>
            <td class="nowrap">{time(p.startedAt)}</td>
            <td>{p.lastExit}</td>
          </tr>
        )}
      </ListTable>
    </>
  );
}

function ConfigKeys({ project, env }) {
  const res = useApi('corpus.v1.ProjectService/GetConfig', { project, env }, { quiet: true });
  const vars = ((res.data && res.data.vars) || []).map((v) => v.key).sort();
  return (
    <>
      <h3>Config</h3>
      <Listing
        res={res}
        rows={vars}
        empty="No config variables."
        failed={(e) => <p class="muted small">Config is not available: {e.message}</p>}
      >
        {() => (
          <>
            {res.data.pending ? (
              <p class="small">The config changed since the serving release; it applies on the next deploy or restart.</p>
            ) : null}
            <ul class="keys" aria-label={`Config keys of ${env}`}>
              {vars.map((k) => (
                <li key={k} class="mono">
                  {k}
                </li>
              ))}
            </ul>
          </>
        )}
      </Listing>
    </>
  );
}

function Releases({ project, env }) {
  const { canWrite } = useRole();
  const res = useApi('corpus.v1.ProjectService/ListReleases', { project, env });
  const [open, setOpen] = useState({});
  const [rb, setRb] = useState(null);
  const ctl = useRef(null);
  const { reportError } = useApp();
  const releases = (res.data && res.data.releases) || [];
  const current = res.data && res.data.current;
  const bars = releases
    .slice()
    .reverse()
    .map((r) => ({ number: r.number || 0, ms: releaseDuration(r), status: r.status }));

  const rollback = async (number) => {
    if (ctl.current) ctl.current.abort();
    const c = new AbortController();
    ctl.current = c;
    const dec = new TextDecoder();
    let text = '';
    setRb({ number, text: '', state: 'running' });
    try {
      await stream(
        'corpus.v1.ProjectService/Rollback',
        { project, env, to: number },
        (m) => {
          if (m.output) text += dec.decode(base64Bytes(m.output), { stream: true });
          if (m.done) text += dec.decode();
          setRb({ number, text, state: m.done ? `done: r${m.current || number} is current` : 'running' });
        },
        c.signal,
      );
      setRb((s) => ({ number, text, state: s && s.state !== 'running' ? s.state : 'done' }));
    } catch (e) {
      if (e.name === 'AbortError') return;
      setRb({ number, text, state: `failed: ${e.message}` });
      if (!e.unauthenticated) reportError(e);
    } finally {
      if (ctl.current === c) ctl.current = null;
      res.reload();
    }
  };
  const running = rb && rb.state === 'running';

  return (
    <>
      <h3>Releases</h3>
      {rb ? (
        <div class="rollback-out" aria-live="polite">
          <div class="actions">
            <strong>Rollback to r{rb.number}</strong>
            <span class="small" role="status">
              {rb.state}
            </span>
            {rb.state !== 'running' ? (
              <button type="button" class="ghost" onClick={() => setRb(null)}>
                Hide
              </button>
            ) : null}
          </div>
          <pre class="log short" data-testid="rollback-output">
            {rb.text}
          </pre>
        </div>
      ) : null}
      <Listing res={res} rows={releases} empty="No releases yet: push to deploy.">
        {() => (
          <>
            <DurationChart title={`Deploy durations, ${project} ${env}`} bars={bars} />
            <DataTable
              label={`Releases of ${project} ${env}, newest first`}
              class="releases"
              rows={releases}
              columns={[
                'Release',
                'Commit',
                'Subject',
                'Author',
                'Trigger',
                'Status',
                'Started',
                'Duration',
                <span class="sr-only">Actions</span>,
              ]}
            >
              {(r) => {
                const n = r.number || 0;
                const isCurrent = n === current;
                const expanded = !!open[n];
                return [
                  <tr key={n} class={isCurrent ? 'current' : ''}>
                    <td>
                      r{n}
                      {isCurrent ? <strong class="small"> current</strong> : null}
                    </td>
                    <td class="mono" title={r.commit}>
                      {shortCommit(r.commit)}
                    </td>
                    <td class="subject">{r.subject}</td>
                    <td>{r.author}</td>
                    <td>{r.trigger}</td>
                    <td>
                      <Status value={r.status} />
                      {r.failedStep ? <span class="small"> at {r.failedStep}</span> : null}
                    </td>
                    <td class="nowrap">{time(r.startedAt)}</td>
                    <td class="nowrap">{duration(releaseDuration(r))}</td>
                    <td class="row-actions">
                      <button
                        type="button"
                        class="ghost"
                        aria-expanded={expanded ? 'true' : 'false'}
                        aria-controls={`rel-${env}-${n}`}
                        onClick={() => setOpen({ ...open, [n]: !expanded })}
                        data-testid="release-log-toggle"
                        data-release={String(n)}
                      >
                        {expanded ? 'Hide log' : 'Log'}
                      </button>{' '}
                      {canWrite && !isCurrent ? (
                        <ConfirmButton
                          label="Roll back to this release"
                          title={`Roll back ${project} ${env} to r${n}`}
                          message={`Roll ${project} ${env} back to r${n} (${shortCommit(r.commit)} ${r.subject || ''})? Its config is restored with it.`}
                          confirmLabel={`Roll back to r${n}`}
                          disabled={running || r.pruned}
                          testid="rollback"
                          attrs={{ 'data-release': String(n), title: r.pruned ? 'This release was pruned' : '' }}
                          onConfirm={() => rollback(n)}
                        />
                      ) : null}
                    </td>
                  </tr>,
                  expanded ? (
                    <tr key={`${n}-log`} id={`rel-${env}-${n}`} class="log-row">
                      <td colSpan={9}>
                        <ReleaseLog project={project} env={env} release={r} />
                      </td>
                    </tr>
                  ) : null,
                ];
              }}
            </DataTable>
          </>
        )}
      </Listing>
    </>
  );
}

function ReleaseLog({ project, env, release }) {
  const res = useApi('corpus.v1.ProjectService/GetRelease', { project, env, release: String(release.number || 0) });
  const r = (res.data && res.data.release) || null;
  if (!r) return res.error ? <p class="muted">The log is not available.</p> : <Loading what="log" />;
  return (
    <div>
      {(r.steps || []).length ? (
        <p class="small">
          Steps:{' '}
          {(r.steps || []).map((s, i) => (
            <span key={s.name} class={`step step-${s.status}`}>
              {i ? ' · ' : ''}
              {s.name} {s.status} {duration(Number(s.durationMs || 0))}
            </span>
          ))}
        </p>
      ) : null}
      {r.message ? <p class="small">{r.message}</p> : null}
      {(r.configChanges || []).length ? <p class="small">Config changes: {(r.configChanges || []).join(' ')}</p> : null}
      <pre class="log" data-testid="release-log" tabIndex={0} aria-label={`Deploy log of r${r.number}`}>
        {r.log || 'No log.'}
      </pre>
    </div>
  );
}
