// Shared application state: the session, the cluster's state index and
// the error banner, and hooks pages use to load data.
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useRef, useState } from 'preact/hooks';
import { unary } from './connect.js';

export const AppContext = createContext(null);

export function useApp() {
  return useContext(AppContext);
}

// useRole says what the signed-in user may do.
export function useRole() {
  const { session } = useApp();
  const role = (session && session.role) || 'viewer';
  return { role, isOps: role === 'ops', canWrite: role === 'ops' || role === 'dev' };
}

// useApi calls a unary procedure when the page shows, when the request
// changes and whenever the cluster's state index moves. The previous
// answer stays while a new one loads.
export function useApi(procedure, request, options) {
  const enabled = !options || options.enabled !== false;
  const { index, reportError } = useApp();
  const key = procedure + ' ' + JSON.stringify(request || {});
  const [state, setState] = useState({ key, data: null, error: null, loading: true });
  const [nonce, setNonce] = useState(0);
  const lastReported = useRef('');
  useEffect(() => {
    if (!enabled) return undefined;
    let live = true;
    const ctl = new AbortController();
    unary(procedure, request, ctl.signal).then(
      (data) => {
        if (!live) return;
        lastReported.current = '';
        setState({ key, data, error: null, loading: false });
      },
      (error) => {
        if (!live || error.name === 'AbortError') return;
        setState((s) => ({ key, data: s.key === key ? s.data : null, error, loading: false }));
        if (!error.unauthenticated && !(options && options.quiet) && lastReported.current !== error.message) {
          lastReported.current = error.message;
          reportError(error);
        }
      },
    );
    return () => {
      live = false;
      ctl.abort();
    };
  }, [key, index, nonce, enabled]);
  const reload = useCallback(() => setNonce((n) => n + 1), []);
  if (state.key !== key) return { data: null, error: null, loading: true, reload };
  return { ...state, reload };
}

// useAction runs a write and reports its error to the banner; busy is
// true meanwhile.
export function useAction() {
  const { reportError } = useApp();
  const [busy, setBusy] = useState(false);
  const run = useCallback(
    async (fn) => {
      setBusy(true);
      try {
        return await fn();
      } catch (e) {
        if (e && e.name !== 'AbortError' && !e.unauthenticated) reportError(e);
        return undefined;
      } finally {
        setBusy(false);
      }
    },
    [reportError],
  );
  return [run, busy];
}

// useTick re-renders every ms milliseconds by bumping a counter.
export function useTick(ms) {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const t = setInterval(() => setTick((n) => n + 1), ms);
    return () => clearInterval(t);
  }, [ms]);
  return tick;
}
