// The nodes page.
import { useState } from 'preact/hooks';
import { unary } from './connect.js';
import { bytes, cpu, labelsText, num } from './format.js';
import { useAction, useApi, useRole } from './state.js';
import { ConfirmButton, Listing, Meter, Status } from './ui.jsx';

const modes = ['dev', 'staging', 'prod'];

// ActivateButton asks which mode a drained node returns to.
function ActivateButton({ name, disabled, onActivate }) {
  const [mode, setMode] = useState('prod');
  const id = `activate-mode-${name}`;
  return (
    <ConfirmButton
      label="Activate"
      title={`Activate ${name}`}
      message={`Set node ${name} back to mode "${mode}" so it takes guests again?`}
      confirmLabel={`Set mode ${mode}`}
      disabled={disabled}
      testid="activate"
      attrs={{ 'data-node': name }}
      onConfirm={() => onActivate(mode)}
    >
      <p>
        <label for={id}>Mode</label>{' '}
        <select id={id} value={mode} onChange={(e) => setMode(e.currentTarget.value)} data-testid="activate-mode">
          {modes.map((m) => (
            <option key={m} value={m}>
              {m}
            </option>
          ))}
        </select>
      </p>
    </ConfirmButton>
  );
}

export function NodesPage() {
  const { isOps } = useRole();
  const nodes = useApi('corpus.v1.NodeService/ListNodes', {});
  const [run, busy] = useAction();
  const list = (nodes.data && nodes.data.nodes) || [];
  const setMode = (name, mode) =>
    run(async () => {
      await unary('corpus.v1.NodeService/SetNodeMode', { name, mode });
      nodes.reload();
    });
  return (
    <>
      <h1>Nodes</h1>
      <Listing res={nodes} rows={list} empty="No nodes have joined yet.">
        <div class="cards">
          {list.map((v) => {
            const n = v.node || {};
            const cap = n.capacity || {};
            const al = v.allocated || {};
            const drained = n.mode === 'drain';
            return (
              <article class="card" key={n.id || n.name} aria-labelledby={`node-${n.name}`}>
                <header class="card-head">
                  <h2 id={`node-${n.name}`}>{n.name}</h2>
                  <Status value={n.status} />
                  <span class="tag">{n.mode || 'no mode'}</span>
                  {n.ineligible ? <span class="tag">ineligible</span> : null}
                </header>
                <Meter
                  label={`CPU allocated on ${n.name}`}
                  used={num(al.cpuMillis)}
                  total={num(cap.cpuMillis)}
                  text={`CPU ${cpu(al.cpuMillis)} of ${cpu(cap.cpuMillis)}`}
                />
                <Meter
                  label={`Memory allocated on ${n.name}`}
                  used={num(al.memoryBytes)}
                  total={num(cap.memoryBytes)}
                  text={`Memory ${bytes(al.memoryBytes)} of ${bytes(cap.memoryBytes)}`}
                />
                {num(cap.diskBytes) ? (
                  <Meter
                    label={`Disk allocated on ${n.name}`}
                    used={num(al.diskBytes)}
                    total={num(cap.diskBytes)}
                    text={`Disk ${bytes(al.diskBytes)} of ${bytes(cap.diskBytes)}`}
                  />
                ) : null}
                <dl class="fields compact">
                  <div class="field">
                    <dt>Address</dt>
                    <dd class="mono">{n.address || n.agentAddress || '—'}</dd>
                  </div>
                  <div class="field">
                    <dt>Guests</dt>
                    <dd>{String(v.guests || 0)}</dd>
                  </div>
                  <div class="field">
                    <dt>Version</dt>
                    <dd>{n.agentVersion || '—'}</dd>
                  </div>
                  <div class="field">
                    <dt>Drivers</dt>
                    <dd>
                      {(n.drivers || []).length
                        ? (n.drivers || []).map((d) => (
                            <span key={d.name} class={`tag ${d.healthy ? '' : 'tag-bad'}`} title={d.detail || ''}>
                              {d.name}
                              {d.healthy ? '' : ' (unhealthy)'}
                            </span>
                          ))
                        : '—'}
                    </dd>
                  </div>
                  <div class="field">
                    <dt>Labels</dt>
                    <dd>{labelsText(n.labels) || '—'}</dd>
                  </div>
                  {n.guestSubnet ? (
                    <div class="field">
                      <dt>Guest subnet</dt>
                      <dd class="mono">{n.guestSubnet}</dd>
                    </div>
                  ) : null}
                </dl>
                {isOps ? (
                  <div class="actions">
                    {drained ? (
                      <ActivateButton name={n.name} disabled={busy} onActivate={(mode) => setMode(n.name, mode)} />
                    ) : (
                      <ConfirmButton
                        label="Drain"
                        title={`Drain ${n.name}`}
                        message={`Drain node ${n.name}? Its stateless guests move to other nodes, each new copy started before the old one stops.`}
                        confirmLabel="Drain"
                        danger
                        disabled={busy}
                        testid="drain"
                        attrs={{ 'data-node': n.name }}
                        onConfirm={() => setMode(n.name, 'drain')}
                      />
                    )}
                  </div>
                ) : null}
              </article>
            );
          })}
        </div>
      </Listing>
    </>
  );
}
