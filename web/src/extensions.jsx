// The extensions page (operators), and who-set-what of an object.
import { unary } from './connect.js';
import { useAction, useApi } from './state.js';
import { DataTable, ListTable } from './ui.jsx';

const kinds = { mutate: 'Mutating', validate: 'Validating', lint: 'Lint (pushes)' };

export function ExtensionsPage() {
  const res = useApi('corpus.v1.ExtensionService/ListExtensions', {});
  const [run, busy] = useAction();
  const rows = (res.data && res.data.extensions) || [];
  const toggle = (e) =>
    run(async () => {
      await unary('corpus.v1.ExtensionService/SetExtensionDisabled', { name: e.name, disabled: !e.disabled });
      res.reload();
    });
  return (
    <>
      <h1>Extensions</h1>
      <p class="muted">
        Called before a write is accepted: mutating ones in this order, each seeing the one before, then validating ones
        in parallel; lint ones see a push before its deploy. Add them with <code>corpus extension add</code>.
      </p>
      <ListTable
        res={res}
        rows={rows}
        empty="No extensions."
        label="Extensions in call order"
        columns={['Name', 'Kind', 'Order', 'On', 'Priority', 'After', 'Before', 'Timeout', 'On failure', 'Calls', 'State', 'URL', 'Action']}
      >
        {(v) => {
          const e = v.extension || {};
          return (
            <tr key={e.name} data-testid="extension-row" data-name={e.name}>
              <td>{e.name}</td>
              <td>{kinds[e.kind] || e.kind}</td>
              <td>{v.order || ''}</td>
              <td>{(e.on || []).join(', ')}</td>
              <td>{e.priority || 0}</td>
              <td>{(e.after || []).join(', ')}</td>
              <td>{(e.before || []).join(', ')}</td>
              <td>{e.timeoutMs ? `${Number(e.timeoutMs) / 1000} s` : ''}</td>
              <td>{e.failurePolicy}</td>
              <td>{v.signed ? 'mutual TLS, signed' : 'mutual TLS'}</td>
              <td>{e.disabled ? 'disabled' : 'enabled'}</td>
              <td class="mono">{e.url}</td>
              <td>
                <button type="button" disabled={busy} onClick={() => toggle(e)} data-testid="extension-toggle" data-name={e.name}>
                  {e.disabled ? 'Enable' : 'Disable'}
                </button>
              </td>
            </tr>
          );
        }}
      </ListTable>
    </>
  );
}

// Admission shows what extensions set in an object, when they did.
export function Admission({ changes, what }) {
  if (!changes || !changes.length) return null;
  return (
    <section aria-labelledby="admission-title" data-testid="admission">
      <h2 id="admission-title">Set by extensions</h2>
      <DataTable label={`What extensions set in ${what}`} columns={['Extension', 'Field', 'Value']} rows={changes}>
        {(c, i) => (
          <tr key={i}>
            <td>{c.extension}</td>
            <td class="mono">{c.field}</td>
            <td class="mono">{c.value || '(removed)'}</td>
          </tr>
        )}
      </DataTable>
    </section>
  );
}
