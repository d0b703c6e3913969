// Services and their backups.
import { useEffect, useState } from 'preact/hooks';
import { byName, bytes, time } from './format.js';
import { useApi } from './state.js';
import { Empty, ListTable, Loading, Status, href } from './ui.jsx';

export function ServicesPage({ focus }) {
  const res = useApi('corpus.v1.ServiceService/ListServices', {});
  const [open, setOpen] = useState(focus ? { [focus]: true } : {});
  useEffect(() => {
    if (focus) setOpen((o) => ({ ...o, [focus]: true }));
  }, [focus]);
  const list = byName(res.data && res.data.services, 'service');
  return (
    <>
      <h1>Services</h1>
      <ListTable
        label="Services"
        empty="No services."
        res={res}
        rows={list}
        columns={[
          'Name',
          'Project',
          'Template',
          'State',
          'Node',
          'Linked projects',
          'Last backup',
          <span class="sr-only">Backups</span>,
        ]}
      >
        {(v) => {
          const s = v.service || {};
          const obs = s.observed || {};
          const expanded = !!open[s.name];
          return [
            <tr key={s.id || s.name} id={`svc-${s.name}`} data-testid="service-row" data-name={s.name}>
              <td>
                {s.name}
                {s.externalUrl ? <span class="muted small"> external</span> : null}
              </td>
              <td>
                {s.project ? <a href={href('projects', s.project)}>{s.project}</a> : <span class="muted">operators'</span>}
              </td>
              <td>
                {s.template}
                {s.version ? ` ${s.version}` : ''}
              </td>
              <td>
                <Status value={obs.state || v.guestStatus || s.desiredState} />
                {obs.message ? <span class="small"> {obs.message}</span> : null}
              </td>
              <td>
                {v.nodeName}
                {v.address ? <span class="muted small mono"> {v.address}</span> : null}
              </td>
              <td>
                {(s.links || []).map((l, i) => (
                  <span key={`${l.project}/${l.env}`}>
                    {i ? ', ' : ''}
                    <a href={href('projects', l.project)}>
                      {l.project}/{l.env}
                    </a>
                    {l.as ? <span class="muted small"> as {l.as}</span> : null}
                  </span>
                ))}
              </td>
              <td class="nowrap">
                {v.lastBackup ? `${time(v.lastBackup.finishedAt || v.lastBackup.startedAt)}` : '—'}
              </td>
              <td>
                <button
                  type="button"
                  class="ghost"
                  aria-expanded={expanded ? 'true' : 'false'}
                  aria-controls={`svc-b-${s.name}`}
                  onClick={() => setOpen({ ...open, [s.name]: !expanded })}
                >
                  {expanded ? 'Hide backups' : 'Backups'}
                </button>
              </td>
            </tr>,
            expanded ? (
              <tr key={`${s.name}-b`} id={`svc-b-${s.name}`} class="log-row">
                <td colSpan={8}>
                  <Backups service={s.name} />
                </td>
              </tr>
            ) : null,
          ];
        }}
      </ListTable>
    </>
  );
}

function Backups({ service }) {
  const res = useApi('corpus.v1.ServiceService/ListBackups', { service });
  const list = ((res.data && res.data.backups) || []).slice().sort((a, b) => {
    const x = (a.backup && a.backup.startedAt) || '';
    const y = (b.backup && b.backup.startedAt) || '';
    return x < y ? 1 : x > y ? -1 : 0;
  });
  if (!res.data) return res.error ? null : <Loading what="backups" />;
  if (!list.length) return <Empty>No backups of {service}.</Empty>;
  return (
    <table aria-label={`Backups of ${service}, newest first`}>
      <thead>
        <tr>
          <th scope="col">Started</th>
          <th scope="col">Size</th>
          <th scope="col">Status</th>
          <th scope="col">Trigger</th>
          <th scope="col">Stored on</th>
          <th scope="col">ID</th>
        </tr>
      </thead>
      <tbody>
        {list.map((bv) => {
          const b = bv.backup || {};
          return (
            <tr key={b.id}>
              <td class="nowrap">{time(b.startedAt)}</td>
              <td>{bytes(b.sizeBytes)}</td>
              <td>
                <Status value={b.status} />
                {b.message ? <span class="small"> {b.message}</span> : null}
              </td>
              <td>{b.trigger}</td>
              <td>{bv.nodeName}</td>
              <td class="mono small">{b.id}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
