// Formatting of API values for display.

export function num(v) {
  if (v === undefined || v === null || v === '') return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

export function bytes(v) {
  let n = num(v);
  if (!n) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

export function cpu(millis) {
  const n = num(millis);
  if (!n) return '0';
  const cores = n / 1000;
  return `${Number.isInteger(cores) ? cores : cores.toFixed(2)} CPU`;
}

function pad(n) {
  return String(n).padStart(2, '0');
}

export function parseTime(ts) {
  if (!ts) return null;
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) || d.getTime() <= 0 ? null : d;
}

export function time(ts) {
  const d = parseTime(ts);
  if (!d) return '';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// clock is HH:MM, or HH:MM:SS with seconds set.
export function clock(ms, seconds) {
  const d = new Date(ms);
  const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return seconds ? `${hm}:${pad(d.getSeconds())}` : hm;
}

export function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  const rest = Math.round(s % 60);
  if (m < 60) return `${m} min ${rest} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

// releaseDuration is finishedAt - startedAt in ms, or null.
export function releaseDuration(r) {
  const a = parseTime(r.startedAt);
  const b = parseTime(r.finishedAt);
  if (!a || !b) return null;
  return b.getTime() - a.getTime();
}

export function percent(ratio) {
  if (!Number.isFinite(ratio)) return '';
  return `${Math.round(ratio * 100)}%`;
}

export function shortCommit(c) {
  return c ? c.slice(0, 8) : '';
}

export function labelsText(labels) {
  if (!labels) return '';
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(', ');
}

// byName sorts wrapped items such as {guest: {name}} by item[key].name,
// returning a new array.
export function byName(items, key) {
  const name = (v) => (v && v[key] && v[key].name) || '';
  return (items || []).slice().sort((a, b) => {
    const x = name(a);
    const y = name(b);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}
