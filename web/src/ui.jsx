// Small shared components.
import { useEffect, useRef, useState } from 'preact/hooks';
import { percent } from './format.js';

export function href(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(p)).join('/');
}

export function ErrorBanner({ error, onDismiss }) {
  if (!error) return null;
  return (
    <div class="banner" role="alert" data-testid="error">
      <span class="banner-text">
        {error.code && error.code !== 'failed' ? <strong>{error.code.replace(/_/g, ' ')}: </strong> : null}
        {error.message}
      </span>
      <button type="button" class="ghost" onClick={onDismiss} aria-label="Dismiss error">
        Dismiss
      </button>
    </div>
  );
}

export function Loading({ what }) {
  return (
    <p class="muted" role="status">
      Loading{what ? ` ${what}` : ''}…
    </p>
  );
}

export function Empty({ children }) {
  return <p class="muted">{children}</p>;
}

// Status shows a one-word state with a color class.
export function Status({ value }) {
  const v = value || 'unknown';
  return <span class={`status status-${statusClass(v)}`}>{v}</span>;
}

function statusClass(v) {
  switch (v) {
    case 'running':
    case 'ready':
    case 'healthy':
    case 'succeeded':
    case 'valid':
    case 'ok':
    case 'voter':
    case 'present':
      return 'good';
    case 'failed':
    case 'down':
    case 'unhealthy':
    case 'lost':
    case 'missing':
    case 'backoff':
      return 'bad';
    case 'pending':
    case 'creating':
    case 'deploying':
    case 'starting':
    case 'initializing':
    case 'placed':
    case 'deleting':
    case 'drain':
    case 'stopping':
    case 'moving':
      return 'warn';
    default:
      return 'neutral';
  }
}

// Meter is a capacity bar with its values as text too.
export function Meter({ label, used, total, text }) {
  const ratio = total > 0 ? used / total : 0;
  const clamped = Math.max(0, Math.min(1, ratio));
  const level = ratio > 0.9 ? 'bad' : ratio > 0.75 ? 'warn' : 'good';
  const valueText = `${text || ''}${total > 0 ? ` (${percent(ratio)})` : ''}`;
  return (
    <div class="meter-wrap">
      <div
        class="meter"
        role="meter"
        aria-label={label}
        aria-valuemin="0"
        aria-valuemax={total > 0 ? total : 1}
        aria-valuenow={Math.min(used, total > 0 ? total : 1)}
        aria-valuetext={valueText}
      >
        <div class={`meter-fill meter-${level}`} style={{ width: `${(clamped * 100).toFixed(1)}%` }} />
      </div>
      <span class="meter-text">{valueText}</span>
    </div>
  );
}

// Fields shows name/value pairs; values are text or elements.
export function Fields({ items }) {
  return (
    <dl class="fields">
      {items
        .filter((it) => it && it[1] !== undefined && it[1] !== null && it[1] !== '')
        .map(([k, v]) => (
          <div class="field" key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </div>
        ))}
    </dl>
  );
}

// ConfirmButton asks in a dialog before running onConfirm; children are
// extra form controls shown under the message.
export function ConfirmButton({ label, title, message, confirmLabel, onConfirm, disabled, danger, testid, attrs, children }) {
  const [open, setOpen] = useState(false);
  const ref = useRef(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) {
      if (d.showModal) d.showModal();
      else d.setAttribute('open', '');
    } else if (!open && d.open) {
      d.close();
    }
  }, [open]);
  return (
    <>
      <button
        type="button"
        class={danger ? 'danger' : ''}
        disabled={disabled}
        onClick={() => setOpen(true)}
        data-testid={testid}
        {...(attrs || {})}
      >
        {label}
      </button>
      {open ? (
        <dialog ref={ref} class="confirm" aria-label={title || label} onClose={() => setOpen(false)}>
          <form
            method="dialog"
            onSubmit={(e) => {
              e.preventDefault();
              setOpen(false);
              onConfirm();
            }}
          >
            <h2>{title || label}</h2>
            <p>{message}</p>
            {children}
            <div class="actions">
              <button type="button" class="ghost" onClick={() => setOpen(false)} data-testid="confirm-cancel">
                Cancel
              </button>
              <button type="submit" class={danger ? 'danger' : 'primary'} data-testid="confirm" autofocus>
                {confirmLabel || label}
              </button>
            </div>
          </form>
        </dialog>
      ) : null}
    </>
  );
}

// Listing shows Loading until res has data, then empty text for no rows,
// else its children (a function is called for them). failed renders
// res.error; by default nothing is shown, as the banner reports it.
export function Listing({ res, rows, empty, failed, children }) {
  if (!res.data) return res.error ? (failed ? failed(res.error) : null) : <Loading />;
  if (!rows.length) return <Empty>{empty}</Empty>;
  return typeof children === 'function' ? children() : children;
}

// DataTable is a scrollable table with column headers; children maps a
// row to its <tr> (or an array of them).
export function DataTable({ label, columns, rows, class: cls, children }) {
  return (
    <div class="table-wrap">
      <table aria-label={label} class={cls}>
        <thead>
          <tr>
            {columns.map((c, i) => (
              <th scope="col" key={i}>
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{rows.map(children)}</tbody>
      </table>
    </div>
  );
}

// ListTable is a DataTable inside a Listing.
export function ListTable({ res, rows, empty, failed, ...table }) {
  return (
    <Listing res={res} rows={rows} empty={empty} failed={failed}>
      {() => <DataTable rows={rows} {...table} />}
    </Listing>
  );
}
