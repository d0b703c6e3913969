// An interactive shell in a guest over the dashboard's websocket.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal as XTerm } from '@xterm/xterm';
import { useEffect, useRef, useState } from 'preact/hooks';
import { getCsrf } from './connect.js';

export function Terminal({ guest, onClose }) {
  const box = useRef(null);
  const [status, setStatus] = useState('connecting…');
  const [ended, setEnded] = useState(false);
  useEffect(() => {
    const term = new XTerm({
      cursorBlink: true,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace',
      fontSize: 14,
      scrollback: 5000,
      screenReaderMode: false,
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current);
    try {
      fit.fit();
    } catch (_) {
      // not laid out yet
    }
    const enc = new TextEncoder();
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url =
      `${scheme}//${location.host}/ui/shell?guest=${encodeURIComponent(guest)}` +
      `&csrf=${encodeURIComponent(getCsrf())}&cols=${term.cols}&rows=${term.rows}`;
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    let finished = false;
    const end = (text) => {
      if (finished) return;
      finished = true;
      setStatus(text);
      setEnded(true);
    };
    ws.onopen = () => {
      setStatus('connected');
      term.focus();
    };
    ws.onmessage = (e) => {
      if (typeof e.data === 'string') {
        let m = null;
        try {
          m = JSON.parse(e.data);
        } catch (_) {
          return;
        }
        if (m && m.error !== undefined) end(`error: ${m.error}`);
        else if (m && m.exit !== undefined) end(`exited with ${m.exit}`);
        return;
      }
      term.write(new Uint8Array(e.data));
    };
    ws.onerror = () => end('connection failed');
    ws.onclose = (e) => end(e.reason ? `closed: ${e.reason}` : 'connection closed');
    const send = (data) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(data);
    };
    const d1 = term.onData((d) => send(enc.encode(d)));
    const d2 = term.onBinary((d) => {
      const b = new Uint8Array(d.length);
      for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
      send(b);
    });
    const d3 = term.onResize(({ cols, rows }) => send(JSON.stringify({ resize: { cols, rows } })));
    let raf = 0;
    const ro = new ResizeObserver(() => {
      cancelAnimationFrame(raf);
      raf = requestAnimationFrame(() => {
        try {
          fit.fit();
        } catch (_) {
          // hidden
        }
      });
    });
    ro.observe(box.current);
    return () => {
      finished = true;
      cancelAnimationFrame(raf);
      ro.disconnect();
      d1.dispose();
      d2.dispose();
      d3.dispose();
      ws.onclose = ws.onerror = ws.onmessage = ws.onopen = null;
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000);
      term.dispose();
    };
  }, [guest]);
  return (
    <section class="terminal-panel" aria-label={`Terminal of ${guest}`}>
      <div class="actions">
        <h2 class="inline">Terminal</h2>
        <span class={`small ${ended ? 'status-bad-text' : 'muted'}`} role="status" data-testid="terminal-status">
          {status}
        </span>
        <button type="button" onClick={onClose} data-testid="close-terminal">
          Close terminal
        </button>
      </div>
      <div class="terminal" ref={box} data-testid="terminal" role="group" aria-label={`Shell in ${guest}`} />
    </section>
  );
}
