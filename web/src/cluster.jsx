// The cluster page and the metrics plots.
import { useEffect, useState } from 'preact/hooks';
import { unary } from './connect.js';
import { LineChart, colorAt, seriesOf } from './charts.jsx';
import { useApi, useApp, useRole } from './state.js';
import { DataTable, Fields, Loading, Status } from './ui.jsx';

export function ClusterPage() {
  const { isOps } = useRole();
  const status = useApi('corpus.v1.ClusterService/Status', {});
  const s = status.data;
  return (
    <>
      <h1>Cluster</h1>
      <section aria-labelledby="status-h">
        <h2 id="status-h">Status</h2>
        {!s ? (
          status.error ? null : <Loading />
        ) : (
          <Fields
            items={[
              ['Cluster', s.clusterId],
              ['Leader', s.leader ? `${s.leader}${s.leaderApi ? ` (${s.leaderApi})` : ''}` : 'none'],
              ['Replica', s.replica],
              ['Version', s.version],
              ['Index', s.index || '0'],
              ['Nodes', String(s.nodes || 0)],
              ['Guests', String(s.guests || 0)],
              ['Signed in as', s.who],
            ]}
          />
        )}
      </section>
      {isOps ? <RaftPeers /> : null}
      <section aria-labelledby="alloc-h">
        <h2 id="alloc-h">Node allocation</h2>
        <Metrics names={['node_cpu_allocated_ratio', 'node_memory_allocated_ratio']} />
      </section>
    </>
  );
}

function RaftPeers() {
  const peers = useApi('corpus.v1.ClusterService/RaftPeers', {});
  const list = (peers.data && peers.data.peers) || [];
  return (
    <section aria-labelledby="raft-h">
      <h2 id="raft-h">Replicas</h2>
      {!peers.data ? (
        peers.error ? null : <Loading />
      ) : (
        <DataTable
          label="Raft replicas"
          columns={['ID', 'Raft address', 'API address', 'Suffrage', 'Leader', 'Version']}
          rows={list}
        >
          {(p) => (
            <tr key={p.id}>
              <td>{p.id}</td>
              <td class="mono">{p.raftAddress}</td>
              <td class="mono">{p.apiAddress}</td>
              <td>
                <Status value={p.voter ? 'voter' : 'nonvoter'} />
              </td>
              <td>{p.leader ? <strong>★ leader</strong> : <span class="muted">follower</span>}</td>
              <td>{p.version}</td>
            </tr>
          )}
        </DataTable>
      )}
    </section>
  );
}

const charts = {
  node_cpu_allocated_ratio: { title: 'CPU allocated per node', label: 'node', ratio: true },
  node_memory_allocated_ratio: { title: 'Memory allocated per node', label: 'node', ratio: true },
  domain_requests_per_second: { title: 'Requests per second per domain', label: 'domain' },
  domain_errors_per_second: { title: 'Errors per second per domain', label: 'domain' },
};

// useSeries loads the metrics every step (15 s by default) and when the
// cluster's state changes.
function useSeries(enabled = true) {
  const { index } = useApp();
  const [data, setData] = useState(null);
  const [error, setError] = useState(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!enabled) return undefined;
    let live = true;
    const ctl = new AbortController();
    unary('corpus.v1.ClusterService/Series', {}, ctl.signal).then(
      (d) => live && (setData(d), setError(null)),
      (e) => live && e.name !== 'AbortError' && setError(e),
    );
    return () => {
      live = false;
      ctl.abort();
    };
  }, [index, tick, enabled]);
  const step = Math.max(15, Number((data && data.stepSeconds) || 15));
  useEffect(() => {
    if (!enabled) return undefined;
    const t = setInterval(() => setTick((n) => n + 1), step * 1000);
    return () => clearInterval(t);
  }, [step, enabled]);
  return { data, error };
}

export function Metrics({ names, series }) {
  const own = useSeries(!series);
  const { data, error } = series || own;
  if (!data) {
    return error ? <p class="muted">Metrics are not available: {error.message}</p> : <Loading what="metrics" />;
  }
  const colors = {};
  const labels = new Set();
  for (const n of names) for (const s of seriesOf(data, n, charts[n].label)) labels.add(s.label);
  [...labels].sort().forEach((l, i) => (colors[l] = colorAt(i)));
  return (
    <div class="charts">
      {names.map((n) => {
        const c = charts[n];
        const ratio = (v) => `${Math.round(v * 100)}%`;
        const rate = (v) => (v >= 100 ? String(Math.round(v)) : String(Math.round(v * 100) / 100));
        return (
          <LineChart
            key={n}
            title={c.title}
            series={seriesOf(data, n, c.label)}
            format={c.ratio ? ratio : rate}
            yMax={c.ratio ? 1 : undefined}
            colors={colors}
          />
        );
      })}
    </div>
  );
}

export function MetricsPage() {
  const series = useSeries();
  return (
    <>
      <h1>Metrics</h1>
      <section aria-labelledby="m-dom">
        <h2 id="m-dom">Domains</h2>
        <Metrics series={series} names={['domain_requests_per_second', 'domain_errors_per_second']} />
      </section>
      <section aria-labelledby="m-nodes">
        <h2 id="m-nodes">Nodes</h2>
        <Metrics series={series} names={['node_cpu_allocated_ratio', 'node_memory_allocated_ratio']} />
      </section>
    </>
  );
}
