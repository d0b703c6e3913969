// Volumes, DNS records and the audit log.
import { useState } from 'preact/hooks';
import { byName, bytes, num, time } from './format.js';
import { useApi } from './state.js';
import { Fields, ListTable, Loading, Meter, Status, href } from './ui.jsx';

export function VolumesPage() {
  const res = useApi('corpus.v1.VolumeService/ListVolumes', {});
  const list = byName(res.data && res.data.volumes, 'volume');
  return (
    <>
      <h1>Volumes</h1>
      <ListTable
        label="Volumes"
        empty="No volumes."
        res={res}
        rows={list}
        columns={['Name', 'Guest', 'Node', 'State', 'Used', 'Backups']}
      >
        {(vv) => {
          const v = vv.volume || {};
          const o = v.observed || {};
          const size = num(o.sizeBytes) || num(v.sizeBytes);
          return (
            <tr key={v.id || v.name} data-testid="volume-row" data-name={v.name}>
              <td>{v.name}</td>
              <td>{v.guestName ? <a href={href('guests', v.guestName)}>{v.guestName}</a> : <span class="muted">unbound</span>}</td>
              <td>{vv.nodeName}</td>
              <td>
                <Status value={o.state || v.desiredState} />
                {o.message ? <span class="small"> {o.message}</span> : null}
              </td>
              <td class="meter-cell">
                <Meter
                  label={`Space used on ${v.name}`}
                  used={num(o.usedBytes)}
                  total={size}
                  text={`${bytes(o.usedBytes)} of ${bytes(size)}`}
                />
              </td>
              <td>
                {v.backupSchedule ? `${v.backupSchedule}, keep ${v.backupKeep || 7}` : <span class="muted">none</span>}
              </td>
            </tr>
          );
        }}
      </ListTable>
    </>
  );
}

export function DnsPage() {
  const res = useApi('corpus.v1.DnsService/ListRecords', {});
  const d = res.data;
  const records = (d && d.records) || [];
  return (
    <>
      <h1>DNS</h1>
      {!d ? (
        res.error ? null : <Loading />
      ) : (
        <>
          <Fields
            items={[
              ['Zone', d.zone],
              ['Serial', d.serial !== undefined ? String(d.serial) : ''],
              ['Answers on', d.dnsAddr],
            ]}
          />
          <ListTable
            label={`Records of ${d.zone || 'the zone'}`}
            empty="No records."
            res={res}
            rows={records}
            columns={['Name', 'Type', 'TTL', 'Data', 'Origin']}
          >
            {(r, i) => (
              <tr key={`${r.name} ${r.type} ${r.data} ${i}`}>
                <td class="mono">{r.name}</td>
                <td>{r.type}</td>
                <td>{r.ttl || 0}</td>
                <td class="mono break">{r.data}</td>
                <td>{r.staticId ? <span title={r.staticId}>static</span> : <span class="muted">cluster</span>}</td>
              </tr>
            )}
          </ListTable>
        </>
      )}
    </>
  );
}

export function AuditPage() {
  const [form, setForm] = useState({ actor: '', action: '', target: '', limit: '100', includeSystem: false });
  const [query, setQuery] = useState({ limit: 100 });
  const res = useApi('corpus.v1.AuditService/ListAudit', query);
  const entries = ((res.data && res.data.entries) || []).slice().reverse();
  const set = (k) => (e) => {
    const t = e.currentTarget;
    setForm({ ...form, [k]: t.type === 'checkbox' ? t.checked : t.value });
  };
  const submit = (e) => {
    e.preventDefault();
    const q = {};
    for (const k of ['actor', 'action', 'target']) if (form[k].trim()) q[k] = form[k].trim();
    const limit = parseInt(form.limit, 10);
    q.limit = limit > 0 ? limit : 100;
    if (form.includeSystem) q.includeSystem = true;
    setQuery(q);
  };
  return (
    <>
      <h1>Audit</h1>
      <form class="filters" onSubmit={submit} aria-label="Audit filters">
        <div>
          <label for="audit-actor">Actor</label>
          <input id="audit-actor" value={form.actor} onInput={set('actor')} placeholder="user:alice" />
        </div>
        <div>
          <label for="audit-action">Action</label>
          <input id="audit-action" value={form.action} onInput={set('action')} placeholder="create_guest" />
        </div>
        <div>
          <label for="audit-target">Target</label>
          <input id="audit-target" value={form.target} onInput={set('target')} />
        </div>
        <div>
          <label for="audit-limit">Newest</label>
          <input id="audit-limit" type="number" min="1" max="10000" value={form.limit} onInput={set('limit')} />
        </div>
        <div class="check">
          <input id="audit-system" type="checkbox" checked={form.includeSystem} onChange={set('includeSystem')} />
          <label for="audit-system">Include system writes</label>
        </div>
        <div>
          <button type="submit" class="primary">
            Filter
          </button>
        </div>
      </form>
      <ListTable
        label="Audit log, newest first"
        empty="No entries match."
        res={res}
        rows={entries}
        columns={['Index', 'Time', 'Actor', 'Action', 'Target', 'Result']}
      >
        {(e) => (
          <tr key={e.index}>
            <td>{e.index}</td>
            <td class="nowrap">{time(e.time)}</td>
            <td>{e.actor}</td>
            <td>{e.action}</td>
            <td class="break">{e.target}</td>
            <td class={e.result && e.result !== 'ok' ? 'status-bad-text' : ''}>{e.result}</td>
          </tr>
        )}
      </ListTable>
    </>
  );
}
