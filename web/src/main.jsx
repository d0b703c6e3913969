// The corpus dashboard.
import '@xterm/xterm/css/xterm.css';
import './app.css';
import { render } from 'preact';
import { useCallback, useEffect, useMemo, useState } from 'preact/hooks';
import { AuditPage, DnsPage, VolumesPage } from './volumes.jsx';
import { ClusterPage, MetricsPage } from './cluster.jsx';
import { ExtensionsPage } from './extensions.jsx';
import { getSession, login, logout, setCsrf, setUnauthenticatedHandler, unary } from './connect.js';
import { GuestPage, GuestsPage } from './guests.jsx';
import { NodesPage } from './nodes.jsx';
import { ProjectPage, ProjectsPage } from './projects.jsx';
import { ServicesPage } from './services.jsx';
import { AppContext } from './state.js';
import { ErrorBanner } from './ui.jsx';

function parseRoute() {
  const h = location.hash.replace(/^#/, '');
  const parts = h
    .split('?')[0]
    .split('/')
    .filter(Boolean)
    .map((p) => {
      try {
        return decodeURIComponent(p);
      } catch (_) {
        return p;
      }
    });
  return parts;
}

function useRoute() {
  const [route, setRoute] = useState(parseRoute);
  useEffect(() => {
    const on = () => setRoute(parseRoute());
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

// useClusterIndex follows the cluster's state index with long polls.
function useClusterIndex(active) {
  const [index, setIndex] = useState('0');
  useEffect(() => {
    if (!active) return undefined;
    const ctl = new AbortController();
    const backoff = [2000, 5000, 10000, 30000];
    (async () => {
      let last = '0';
      let fails = 0;
      while (!ctl.signal.aborted) {
        const began = Date.now();
        try {
          const r = await unary('corpus.v1.ClusterService/Wait', { afterIndex: last, waitSeconds: '30' }, ctl.signal);
          fails = 0;
          const next = String((r && r.index) || '0');
          if (next !== last) {
            last = next;
            setIndex(next);
          } else if (Date.now() - began < 1000 && last !== '0') {
            await sleep(1000, ctl.signal);
          }
        } catch (e) {
          if (ctl.signal.aborted || (e && e.unauthenticated)) return;
          await sleep(backoff[Math.min(fails, backoff.length - 1)], ctl.signal);
          fails++;
        }
      }
    })();
    return () => ctl.abort();
  }, [active]);
  return index;
}

const navItems = [
  ['', 'Cluster'],
  ['nodes', 'Nodes'],
  ['guests', 'Guests'],
  ['projects', 'Projects'],
  ['services', 'Services'],
  ['volumes', 'Volumes'],
  ['dns', 'DNS'],
  ['metrics', 'Metrics'],
  ['extensions', 'Extensions', 'ops'],
  ['audit', 'Audit', 'ops'],
];

function Page({ route, role }) {
  const [top, arg] = route;
  switch (top || '') {
    case '':
      return <ClusterPage />;
    case 'nodes':
      return <NodesPage />;
    case 'guests':
      return arg ? <GuestPage key={arg} name={arg} /> : <GuestsPage />;
    case 'projects':
      return arg ? <ProjectPage key={arg} name={arg} /> : <ProjectsPage />;
    case 'services':
      return <ServicesPage focus={arg} />;
    case 'volumes':
      return <VolumesPage />;
    case 'dns':
      return <DnsPage />;
    case 'metrics':
      return <MetricsPage />;
    case 'audit':
      return role === 'ops' ? <AuditPage /> : <p>The audit log is for operators.</p>;
    case 'extensions':
      return role === 'ops' ? <ExtensionsPage /> : <p>Extensions are for operators.</p>;
    default:
      return (
        <>
          <h1>Not found</h1>
          <p>
            There is no page here. <a href="#/">Back to the cluster</a>.
          </p>
        </>
      );
  }
}

function Login({ onLogin, error, setError }) {
  const [token, setToken] = useState('');
  const [user, setUser] = useState('');
  const [password, setPassword] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = (body) => async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const s = await login(body);
      setToken('');
      setPassword('');
      onLogin(s);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="login" id="main">
      <h1>corpus</h1>
      <ErrorBanner error={error} onDismiss={() => setError(null)} />
      <form onSubmit={submit({ token: token.trim() })} aria-labelledby="login-token-h" class="card">
        <h2 id="login-token-h">Log in with an API token</h2>
        <label for="login-token">API token</label>
        <input
          id="login-token"
          type="password"
          autocomplete="off"
          spellcheck={false}
          required
          value={token}
          onInput={(e) => setToken(e.currentTarget.value)}
          data-testid="login-token"
        />
        <button type="submit" class="primary" disabled={busy} data-testid="login-submit">
          Log in
        </button>
      </form>
      <form onSubmit={submit({ user: user.trim(), password })} aria-labelledby="login-pw-h" class="card">
        <h2 id="login-pw-h">Log in with a password</h2>
        <label for="login-user">User name</label>
        <input
          id="login-user"
          autocomplete="username"
          required
          value={user}
          onInput={(e) => setUser(e.currentTarget.value)}
          data-testid="login-user"
        />
        <label for="login-password">Password</label>
        <input
          id="login-password"
          type="password"
          autocomplete="current-password"
          required
          value={password}
          onInput={(e) => setPassword(e.currentTarget.value)}
          data-testid="login-password"
        />
        <button type="submit" class="primary" disabled={busy} data-testid="login-password-submit">
          Log in with password
        </button>
      </form>
    </main>
  );
}

function App() {
  const [session, setSession] = useState(undefined);
  const [error, setError] = useState(null);
  const [menu, setMenu] = useState(false);
  const route = useRoute();

  const enter = useCallback((s) => {
    setCsrf(s ? s.csrf : '');
    setSession(s || null);
  }, []);

  useEffect(() => {
    setUnauthenticatedHandler(() => {
      setCsrf('');
      setSession(null);
      setError({ code: 'failed', message: 'Your session ended: log in again.' });
    });
    getSession().then(enter, (e) => {
      setError(e);
      enter(null);
    });
  }, []);

  // The session ends at expiresAt; show the login page then.
  useEffect(() => {
    if (!session || !session.expiresAt) return undefined;
    const left = new Date(session.expiresAt).getTime() - Date.now();
    if (!Number.isFinite(left)) return undefined;
    const t = setTimeout(
      () => {
        enter(null);
        setError({ code: 'failed', message: 'Your session expired: log in again.' });
      },
      Math.max(0, Math.min(left, 2147483000)),
    );
    return () => clearTimeout(t);
  }, [session]);

  useEffect(() => setMenu(false), [route.join('/')]);

  const index = useClusterIndex(!!session);
  const reportError = useCallback((e) => setError(e), []);
  const ctx = useMemo(() => ({ session, index, reportError }), [session, index, reportError]);

  if (session === undefined) {
    return (
      <p class="muted boot" role="status">
        Loading…
      </p>
    );
  }
  if (!session) {
    return (
      <Login
        error={error}
        setError={setError}
        onLogin={(s) => {
          setError(null);
          enter(s);
        }}
      />
    );
  }

  const role = session.role || 'viewer';
  const doLogout = async () => {
    try {
      await logout();
    } catch (_) {
      // the session is gone either way
    }
    setError(null);
    enter(null);
  };
  const current = route[0] || '';

  return (
    <AppContext.Provider value={ctx}>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main').focus())}>
        Skip to content
      </a>
      <header class="top">
        <button
          type="button"
          class="menu-toggle ghost"
          aria-expanded={menu ? 'true' : 'false'}
          aria-controls="nav"
          onClick={() => setMenu(!menu)}
        >
          Menu
        </button>
        <a class="brand" href="#/">
          corpus
        </a>
        <div class="who">
          <span class="user" data-testid="user">
            {session.user || 'ops token'}
          </span>
          <span class="tag" data-testid="role">
            {role}
          </span>
          <button type="button" onClick={doLogout} data-testid="logout">
            Log out
          </button>
        </div>
      </header>
      <div class="layout">
        <nav aria-label="Main" id="nav" class={menu ? 'open' : ''}>
          <ul>
            {navItems
              .filter(([, , only]) => !only || only === role)
              .map(([path, label]) => (
                <li key={path}>
                  <a href={`#/${path}`} aria-current={current === path ? 'page' : undefined}>
                    {label}
                  </a>
                </li>
              ))}
          </ul>
        </nav>
        <main id="main" tabIndex={-1}>
          <ErrorBanner error={error} onDismiss={() => setError(null)} />
          <Page route={route} role={role} />
        </main>
      </div>
    </AppContext.Provider>
  );
}

render(<App />, document.getElementById('app'));
