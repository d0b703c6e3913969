// Hand-drawn SVG charts: time series lines and per-release bars.
import { clock, duration, labelsText } from './format.js';

const palette = ['#2f6fdf', '#d9480f', '#2b8a3e', '#ae3ec9', '#e67700', '#0c8599', '#c2255c', '#5c940d', '#1864ab', '#862e9c'];

export function colorAt(i) {
  return palette[i % palette.length];
}

const W = 640;
const H = 220;
const M = { top: 14, right: 14, bottom: 30, left: 66 };

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

// LineChart draws one line per series: series [{label, points:[[ms, value]]}].
export function LineChart({ title, description, series, format, yMax, colors }) {
  const color = (s, i) => (colors && colors[s.label]) || colorAt(i);
  const fmt = format || ((v) => String(Math.round(v * 100) / 100));
  const all = series.flatMap((s) => s.points);
  const id = 'c' + hash(title);
  if (!all.length) {
    return (
      <figure class="chart">
        <figcaption>{title}</figcaption>
        <p class="muted">No data yet.</p>
      </figure>
    );
  }
  let t0 = Infinity;
  let t1 = -Infinity;
  let vmax = 0;
  for (const [t, v] of all) {
    if (t < t0) t0 = t;
    if (t > t1) t1 = t;
    if (v > vmax) vmax = v;
  }
  if (t1 === t0) t1 = t0 + 1;
  const top = yMax !== undefined ? Math.max(yMax, niceMax(vmax)) : niceMax(vmax);
  const iw = W - M.left - M.right;
  const ih = H - M.top - M.bottom;
  const x = (t) => M.left + ((t - t0) / (t1 - t0)) * iw;
  const y = (v) => M.top + ih - (Math.max(0, v) / top) * ih;
  const yTicks = [0, top / 2, top];
  const xTicks = [t0, t0 + (t1 - t0) / 2, t1];
  const summary = series
    .map((s) => {
      const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
      return `${s.label}: ${fmt(last)}`;
    })
    .join('; ');
  const secs = t1 - t0 < 10 * 60 * 1000;
  const tick = (t) => clock(t, secs);
  const label = `${title}, ${tick(t0)} to ${tick(t1)}. Latest: ${summary}`;
  return (
    <figure class="chart">
      <figcaption id={id}>{title}</figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={`${id}-t ${id}-d`} preserveAspectRatio="xMidYMid meet">
        <title id={`${id}-t`}>{title}</title>
        <desc id={`${id}-d`}>{description ? `${description} ${label}` : label}</desc>
        {yTicks.map((v) => (
          <g key={'y' + v}>
            <line class="grid" x1={M.left} x2={W - M.right} y1={y(v)} y2={y(v)} />
            <text class="tick" x={M.left - 6} y={y(v) + 4} text-anchor="end">
              {fmt(v)}
            </text>
          </g>
        ))}
        {xTicks.map((t, i) => (
          <text
            key={'x' + i}
            class="tick"
            x={x(t)}
            y={H - 8}
            text-anchor={i === 0 ? 'start' : i === 2 ? 'end' : 'middle'}
          >
            {tick(t)}
          </text>
        ))}
        <line class="axis" x1={M.left} x2={M.left} y1={M.top} y2={M.top + ih} />
        <line class="axis" x1={M.left} x2={W - M.right} y1={M.top + ih} y2={M.top + ih} />
        {series.map((s, i) => (
          <polyline
            key={s.label}
            fill="none"
            stroke={color(s, i)}
            stroke-width="2"
            stroke-linejoin="round"
            points={s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ')}
          />
        ))}
      </svg>
      <ul class="legend" aria-label={`${title} legend`}>
        {series.map((s, i) => (
          <li key={s.label}>
            <span class="swatch" style={{ background: color(s, i) }} aria-hidden="true" />
            {s.label}
            <span class="muted"> {s.points.length ? fmt(s.points[s.points.length - 1][1]) : ''}</span>
          </li>
        ))}
      </ul>
    </figure>
  );
}

function hash(s) {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
  return (h >>> 0).toString(36);
}

// seriesOf picks the series of one metric name as LineChart series,
// labelled by the given label key.
export function seriesOf(resp, name, labelKey) {
  const out = [];
  for (const s of (resp && resp.series) || []) {
    if (s.name !== name) continue;
    const label = (s.labels && s.labels[labelKey]) || labelsText(s.labels) || name;
    const points = (s.points || [])
      .map((p) => [Number(p.unix || 0) * 1000, Number(p.value || 0)])
      .filter(([t, v]) => t > 0 && Number.isFinite(v))
      .sort((a, b) => a[0] - b[0]);
    out.push({ label, points });
  }
  out.sort((a, b) => (a.label < b.label ? -1 : a.label > b.label ? 1 : 0));
  return out;
}

function secondsTick(ms) {
  const s = ms / 1000;
  if (s >= 600) return `${Math.round(s / 60)} min`;
  return `${Math.round(s * 10) / 10} s`;
}

const statusColor = { succeeded: '#2b8a3e', failed: '#c92a2a', deploying: '#e67700' };

// DurationChart draws one bar per release: its deploy's duration,
// colored by status. bars: [{number, ms, status}] oldest first.
export function DurationChart({ title, bars }) {
  const id = 'd' + hash(title);
  const shown = bars.filter((b) => b.ms !== null).slice(-40);
  if (!shown.length) {
    return (
      <figure class="chart">
        <figcaption>{title}</figcaption>
        <p class="muted">No finished deploys yet.</p>
      </figure>
    );
  }
  const top = niceMax(Math.max(...shown.map((b) => b.ms)));
  const iw = W - M.left - M.right;
  const ih = H - M.top - M.bottom;
  const slot = iw / shown.length;
  const bw = Math.max(2, Math.min(36, slot * 0.7));
  const y = (v) => M.top + ih - (v / top) * ih;
  const every = Math.ceil(shown.length / 12);
  const desc = shown.map((b) => `r${b.number} ${b.status || ''} ${duration(b.ms)}`).join('; ');
  const statuses = [...new Set(shown.map((b) => b.status || 'unknown'))].sort();
  return (
    <figure class="chart narrow">
      <figcaption id={id}>{title}</figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={`${id}-t ${id}-d`}>
        <title id={`${id}-t`}>{title}</title>
        <desc id={`${id}-d`}>{`Deploy duration per release: ${desc}`}</desc>
        {[0, top / 2, top].map((v) => (
          <g key={'y' + v}>
            <line class="grid" x1={M.left} x2={W - M.right} y1={y(v)} y2={y(v)} />
            <text class="tick" x={M.left - 6} y={y(v) + 4} text-anchor="end">
              {secondsTick(v)}
            </text>
          </g>
        ))}
        <line class="axis" x1={M.left} x2={W - M.right} y1={M.top + ih} y2={M.top + ih} />
        {shown.map((b, i) => {
          const cx = M.left + slot * i + slot / 2;
          return (
            <g key={b.number}>
              <rect
                x={(cx - bw / 2).toFixed(1)}
                y={y(b.ms).toFixed(1)}
                width={bw.toFixed(1)}
                height={Math.max(1, M.top + ih - y(b.ms)).toFixed(1)}
                fill={statusColor[b.status] || '#868e96'}
              >
                <title>{`r${b.number}: ${duration(b.ms)} (${b.status || 'unknown'})`}</title>
              </rect>
              {i % every === 0 ? (
                <text class="tick" x={cx} y={H - 8} text-anchor="middle">
                  {`r${b.number}`}
                </text>
              ) : null}
            </g>
          );
        })}
      </svg>
      <ul class="legend" aria-label={`${title} legend`}>
        {statuses.map((s) => (
          <li key={s}>
            <span class="swatch" style={{ background: statusColor[s] || '#868e96' }} aria-hidden="true" />
            {s}
          </li>
        ))}
      </ul>
    </figure>
  );
}
