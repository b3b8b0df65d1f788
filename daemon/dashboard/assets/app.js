// traintl dashboard: a single page over the daemon's /v1 API (docs/API.md).
//
// Routes (the URL's hash): #/ the overview (nodes, jobs), #/jobs/<id> a job's page. Every
// API call carries the session cookie and, in the header X-Traintl-Ui, the session's page
// key, which the login answered and the page keeps in localStorage (the daemon accepts
// the cookie only with it: daemon/http/browser_session.h); a 401 shows the login form. A
// link with ?code= (traintl dashboard) logs in with that single-use code. Data is polled:
// every 2 s on the overview, every second on a running job's page. Text from the API goes
// into the page through textContent only.
'use strict';

(function () {
  const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'STOPPED']);
  // Reports a job page keeps per rank (and of rank 0's replicated history): beyond, the oldest go.
  const MAX_REPORTS_PER_RANK = 20000;
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b',
    '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const $ = (id) => document.getElementById(id);

  class AuthError extends Error {}

  // ---- helpers ---------------------------------------------------------------------------

  const KEY_ITEM = 'traintl.page_key';

  function pageKey() {
    try {
      return localStorage.getItem(KEY_ITEM) || 'none';
    } catch (_) {
      return 'none'; // storage off: every call gets 401, the form says so
    }
  }

  async function api(path, opts = {}) {
    const r = await fetch(path, {
      method: opts.method || 'GET',
      credentials: 'same-origin',
      headers: { 'X-Traintl-Ui': pageKey() },
      cache: 'no-store',
    });
    if (r.status === 401) throw new AuthError('not logged in');
    if (!r.ok) {
      let msg = `${r.status} ${r.statusText}`;
      try { msg = (await r.json()).error || msg; } catch (_) { /* not JSON */ }
      const err = new Error(msg);
      err.status = r.status;
      throw err;
    }
    return opts.text ? r.text() : r.json();
  }

  // An element with attributes and children (strings become text nodes, never HTML).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids) {
      if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  const enc = encodeURIComponent;

  function fmtNum(v) {
    if (typeof v !== 'number') return String(v);
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : String(+v.toPrecision(4));
  }

  function fmtDur(ms) {
    if (ms === null || ms === undefined || ms < 0) return '';
    let s = Math.round(ms / 1000);
    if (s < 60) return `${s} s`;
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    s %= 60;
    return h ? `${h} h ${m} min` : `${m} min ${s} s`;
  }

  const fmtAgo = (ms) => (ms ? `${fmtDur(Date.now() - ms) || '0 s'} ago` : '');
  const fmtTime = (ms) => (ms ? new Date(ms).toLocaleString() : '');
  const gib = (b) => `${((b || 0) / 2 ** 30).toFixed(1)} GiB`;
  const stateBadge = (s) => el('span', { class: `state state-${s}` }, s);
  // A job's size: an elastic job's range, and its current size while it runs ("3 of 2-4").
  const workersText = (j) => j.min_workers
    ? `${j.current_workers != null ? `${j.current_workers} of ` : ''}${j.min_workers}-${j.num_workers}`
    : String(j.num_workers);

  // Numeric entries of a metrics object, `loss` and the usual counters first, without the
  // ranks' bookkeeping.
  const NOT_SUMMARIZED = new Set(['rank', 'world_size', 'local_rank', 'node_rank', 'attempt']);
  function metricSummary(metrics, max) {
    const first = ['loss', 'epoch', 'step', 'training_iteration', 'accuracy'];
    const keys = Object.keys(metrics || {})
      .filter((k) => typeof metrics[k] === 'number' && !NOT_SUMMARIZED.has(k));
    keys.sort((a, b) => {
      const ia = first.indexOf(a);
      const ib = first.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
    });
    return keys.slice(0, max).map((k) => `${k}=${fmtNum(metrics[k])}`).join('  ');
  }

  // Re-renders `node` only when `value` changed (keeps open <details>, selections, scroll).
  const rendered = new WeakMap();
  function renderIfChanged(node, value, render) {
    const key = JSON.stringify(value);
    if (rendered.get(node) === key) return;
    rendered.set(node, key);
    render();
  }

  function fillTable(table, rows) {
    table.tBodies[0].replaceChildren(...rows);
  }

  function setConn(text) {
    $('conn').textContent = text;
    $('conn').classList.toggle('error', !!text);
  }

  // ---- views and polling -----------------------------------------------------------------

  let generation = 0; // bumped on every route change: older pollers see it and end
  let pollNow = null; // wakes the current poller early (after a user action)

  function show(view) {
    for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${view}`;
  }

  let loginFailed = false; // the page was loaded after a failed login
  let loggedIn = false; // an API call got past the session check
  let view = 'loading'; // the view of the route, shown once logged in

  function setView(v) {
    view = v;
    if (loggedIn) show(v);
  }

  function sessionOk() {
    if (loggedIn) return;
    loggedIn = true;
    loginFailed = false;
    $('nav').hidden = false;
    $('logout').hidden = false;
    show(view);
  }

  function showLogin(failed) {
    generation++;
    loggedIn = false;
    show('login');
    $('nav').hidden = true;
    $('logout').hidden = true;
    $('login-error').hidden = !failed;
    setConn('');
    $('login-token').focus();
  }

  async function poll(gen, tick) {
    while (gen === generation) {
      let delay;
      try {
        delay = await tick();
        if (gen === generation) {
          setConn('');
          sessionOk();
        }
      } catch (e) {
        if (e instanceof AuthError) {
          showLogin(loginFailed);
          loginFailed = false;
          return;
        }
        if (gen !== generation) return;
        // An HTTP error has a status (a job that does not exist: 404; no head yet: 503).
        if (e.status) sessionOk();
        setConn(e.status ? `error: ${e.message}` : `cannot reach the daemon: ${e.message}`);
        delay = 2000;
      }
      if (gen !== generation) return;
      await new Promise((resolve) => {
        const t = setTimeout(resolve, delay);
        pollNow = () => { clearTimeout(t); resolve(); };
      });
    }
  }

  let page = null; // the JobPage shown

  function route() {
    const gen = ++generation;
    if (page) page.dispose();
    page = null;
    const m = (location.hash || '#/').match(/^#\/jobs\/([^/]+)$/);
    let id = null;
    if (m) {
      try {
        id = decodeURIComponent(m[1]);
      } catch (e) {
        id = null; // a malformed link (%E0%A4%A): the overview, not a frozen page
      }
    }
    if (id !== null) {
      setView('job');
      const p = page = new JobPage(id, gen);
      poll(gen, () => p.tick());
    } else {
      setView('overview');
      document.title = 'traintl';
      poll(gen, () => overviewTick(gen));
    }
  }

  // ---- overview --------------------------------------------------------------------------

  async function overviewTick(gen) {
    const [nodes, jobs] = await Promise.all([api('/v1/nodes'), api('/v1/jobs?limit=100')]);
    if (gen !== generation) return 0;
    sessionOk();
    renderNodes(nodes.nodes || []);
    renderJobs(jobs.jobs || []);
    return 2000;
  }

  function renderNodes(nodes) {
    const res = (n, key) => {
      const total = (n.resources_total || {})[key] || 0;
      if (!total) return '–';
      const used = (n.resources_used || {})[key] || 0;
      return key === 'memory' ? `${gib(used)} / ${gib(total)}` : `${fmtNum(used)} / ${fmtNum(total)}`;
    };
    fillTable($('nodes'), nodes.map((n) => {
      const other = Object.keys(n.resources_total || {})
        .filter((k) => !['CPU', 'GPU', 'memory'].includes(k))
        .map((k) => `${k} ${res(n, k)}`).join(', ');
      return el('tr', { class: n.role === 'head' ? 'head' : null, 'data-node': n.node_id },
        el('td', { class: 'mono' }, n.node_id,
          n.role === 'head' ? el('span', { class: 'badge' }, 'head') : null),
        el('td', { class: 'mono' }, n.address),
        el('td', {}, n.role),
        el('td', {}, stateBadge(n.state)),
        el('td', {}, res(n, 'CPU')),
        el('td', {}, res(n, 'GPU')),
        el('td', {}, res(n, 'memory')),
        el('td', {}, other || '–'),
        el('td', {}, fmtAgo(n.last_heartbeat)));
    }));
  }

  function renderJobs(jobs) {
    $('jobs-empty').hidden = jobs.length > 0;
    fillTable($('jobs'), jobs.map((j) => {
      const end = j.ended_at || (j.started_at ? Date.now() : null);
      const note = j.state === 'PENDING' && j.pending_reason ? j.pending_reason
        : metricSummary(j.metrics, 4);
      return el('tr', { 'data-job': j.job_id },
        el('td', { class: 'mono' }, el('a', { href: `#/jobs/${enc(j.job_id)}` }, j.job_id)),
        el('td', {}, el('a', { href: `#/jobs/${enc(j.job_id)}` }, j.name)),
        el('td', {}, stateBadge(j.state)),
        el('td', {}, j.attempt),
        el('td', {}, workersText(j)),
        el('td', { title: fmtTime(j.submitted_at) }, fmtAgo(j.submitted_at)),
        el('td', {}, j.started_at ? fmtDur(end - j.started_at) : ''),
        el('td', { class: 'mono small', title: JSON.stringify(j.metrics || {}) }, note));
    }));
  }

  // ---- job page --------------------------------------------------------------------------

  class JobPage {
    constructor(ref, gen) {
      this.ref = ref; // what the URL names: an id, a prefix or a name
      this.gen = gen;
      this.id = null; // the job's id once known
      this.metric = null;
      this.rank = 0;
      this.chart = null;
      this.chartKey = '';
      this.restarts = [];
      this.markedPoints = false;
      this.metrics = { latest: {}, history: [], ranks: {} }; // every report fetched so far
      this.metricsSince = 0; // the newest report time fetched: the next poll asks from there
      for (const id of ['job-id', 'job-summary', 'chart-note', 'log', 'log-note']) {
        $(id).textContent = '';
      }
      $('job-name').textContent = ref;
      $('job-body').hidden = true;
      $('job-state').replaceChildren();
      $('job-message').hidden = true;
      $('job-warnings').replaceChildren();
      $('job-stop').hidden = true;
      $('metric-select').replaceChildren();
      $('rank-select').replaceChildren();
      fillTable($('attempts'), []);
      fillTable($('checkpoints'), []);
      for (const id of ['job-warnings', 'attempts', 'checkpoints', 'metric-select']) rendered.delete($(id));
      const chartEl = $('chart');
      chartEl.replaceChildren();
      chartEl.dataset.points = '0';
      chartEl.dataset.series = '0';
      chartEl.dataset.metric = '';
      $('metric-select').onchange = (e) => { this.metric = e.target.value; this.chartKey = ''; this.wake(); };
      $('rank-select').onchange = (e) => {
        this.rank = Number(e.target.value);
        $('log').textContent = '';
        this.wake();
      };
      $('job-stop').onclick = () => this.stop();
      window.onresize = () => {
        if (this.chart) this.chart.setSize({ width: chartEl.clientWidth, height: 300 });
      };
    }

    wake() { if (pollNow) pollNow(); }

    // Adds a metrics answer's reports to those fetched before; returns them all.
    merge(fresh) {
      const m = this.metrics;
      const add = (list, more) => {
        const seen = new Set(list.map((r) => `${r.attempt}:${r.seq}`));
        for (const r of more || []) {
          if (seen.has(`${r.attempt}:${r.seq}`)) continue;
          list.push(r);
          if (r.time > this.metricsSince) this.metricsSince = r.time;
        }
        // A bound on what a tab holds for a very long job: its oldest reports go.
        if (list.length > MAX_REPORTS_PER_RANK) list.splice(0, list.length - MAX_REPORTS_PER_RANK);
      };
      m.latest = fresh.latest || m.latest;
      add(m.history, fresh.history);
      for (const [rank, more] of Object.entries(fresh.ranks || {})) {
        if (!m.ranks[rank]) m.ranks[rank] = [];
        add(m.ranks[rank], more);
      }
      return m;
    }

    dispose() {
      if (this.chart) this.chart.destroy();
      this.chart = null;
      window.onresize = null;
    }

    async tick() {
      const base = `/v1/jobs/${enc(this.id || this.ref)}`;
      // Only the reports since the newest one fetched (the same millisecond again: a report
      // of that time may have come after the last answer; merge() drops the repeats).
      let d, fresh, ckpts;
      try {
        [d, fresh, ckpts] = await Promise.all([
          api(base),
          api(`${base}/metrics?ranks=all&since=${this.metricsSince}`),
          api(`${base}/checkpoints`),
        ]);
      } catch (e) {
        if (this.gen === generation && (e.status === 404 || e.status === 409)) {
          // No such job (or it was deleted), or an ambiguous name or prefix.
          $('job-message').textContent = e.message;
          $('job-message').className = 'error';
          $('job-message').hidden = false;
          $('job-body').hidden = true;
          $('job-stop').hidden = true;
        }
        throw e;
      }
      if (this.gen !== generation) return 0;
      sessionOk(); // shows the view before drawing: the chart takes the view's width
      this.id = d.job_id;
      const metrics = this.merge(fresh);
      this.renderDetail(d);
      this.renderChart(d, metrics);
      this.renderCheckpoints(ckpts.checkpoints || []);

      // The log once the job has started (before, the daemon has none: 404).
      const rank = this.rank;
      let log = null;
      if (d.started_at) {
        try {
          // At most 256 KiB a poll: a rank that prints megabytes without a newline is
          // shown by its end.
          log = await api(`/v1/jobs/${enc(d.job_id)}/logs?rank=${rank}&tail=200&max_bytes=262144`,
            { text: true });
        } catch (e) {
          if (e instanceof AuthError) throw e;
          log = { error: e.message };
        }
      }
      if (this.gen !== generation) return 0;
      if (rank === this.rank) this.renderLog(d, log);
      return TERMINAL.has(d.state) ? 5000 : 1000;
    }

    renderDetail(d) {
      document.title = `${d.name} · traintl`;
      $('job-name').textContent = d.name;
      $('job-id').textContent = d.job_id;
      $('job-state').replaceChildren(stateBadge(d.state));
      $('job-state').dataset.state = d.state;
      $('job-body').hidden = false;
      const stop = $('job-stop');
      stop.hidden = TERMINAL.has(d.state);
      const parts = [`attempt ${d.attempt}`, `${workersText(d)} worker${d.num_workers === 1 ? '' : 's'}`,
        `failures ${d.failures}/${d.max_failures}`, `submitted ${fmtTime(d.submitted_at)}`];
      if (d.started_at) parts.push(`ran ${fmtDur((d.ended_at || Date.now()) - d.started_at)}`);
      if (d.state === 'PENDING' && d.pending_reason) parts.push(`pending: ${d.pending_reason}`);
      $('job-summary').textContent = parts.join(' · ');
      $('job-message').hidden = !d.message;
      $('job-message').textContent = d.message || '';
      $('job-message').className = d.state === 'FAILED' ? 'error' : 'muted';

      const warnings = [];
      const p = d.progress;
      for (const s of (p && p.stragglers) || []) {
        const ms = (x) => `${(1000 * (x || 0)).toFixed(1)} ms`;
        warnings.push(`Straggler: rank ${s.rank} on ${s.node} is busy ${ms(s.busy_s)} per step, ` +
          `its peers ${ms(s.peers_busy_s)} (${(s.slower || 0).toFixed(1)}× slower).`);
      }
      if (p && p.stalled) {
        const st = p.stalled;
        warnings.push(`Stalled for ${fmtNum(st.for_s)} s in collective ${st.collective}: ranks ` +
          `${(st.waiting || []).join(', ')} wait for ranks ${(st.lagging || []).join(', ') || '?'}.`);
      }
      renderIfChanged($('job-warnings'), warnings, () => $('job-warnings').replaceChildren(
        ...warnings.map((w) => el('p', { class: 'warning' }, w))));

      const attempts = d.attempts || [];
      renderIfChanged($('attempts'), attempts, () => fillTable($('attempts'), attempts.map((a) => {
        const exit = a.signal !== null && a.signal !== undefined ? `signal ${a.signal}`
          : (a.exit_code !== null && a.exit_code !== undefined ? `exit ${a.exit_code}` : '');
        return el('tr', { 'data-attempt': a.attempt },
          el('td', {}, a.attempt),
          el('td', {}, stateBadge(a.state)),
          el('td', {}, fmtTime(a.started_at)),
          el('td', {}, fmtTime(a.ended_at)),
          el('td', {}, a.failed_rank ?? ''),
          el('td', {}, exit),
          el('td', { class: 'reason' }, a.reason || '', a.log_tail
            ? el('details', {}, el('summary', {}, 'log tail'), el('pre', { class: 'log small' }, a.log_tail))
            : null),
          el('td', { class: 'mono small' }, a.restored_from || ''));
      })));
      this.restarts = (d.attempts || []).filter((a) => a.attempt > 1 && a.started_at)
        .map((a) => ({ t: a.started_at / 1000, attempt: a.attempt }));

      const ranks = $('rank-select');
      if (ranks.options.length !== d.num_workers) {
        ranks.replaceChildren(...Array.from({ length: d.num_workers },
          (_, r) => el('option', { value: r }, `rank ${r}`)));
        ranks.value = String(Math.min(this.rank, d.num_workers - 1));
      }
    }

    // Every rank's reports: rank 0's replicated history, the others' latest in memory.
    static reportsByRank(d, m) {
      const out = new Map();
      const fromHead = m.ranks || {};
      for (let r = 0; r < d.num_workers; r++) {
        const mem = fromHead[String(r)] || [];
        const reports = r === 0 && (m.history || []).length >= mem.length ? m.history : mem;
        if (reports.length) out.set(r, reports);
      }
      return out;
    }

    renderChart(d, m) {
      const byRank = JobPage.reportsByRank(d, m);
      const names = new Set();
      for (const reports of byRank.values()) {
        for (const rep of reports) {
          for (const [k, v] of Object.entries(rep.metrics || {})) if (typeof v === 'number') names.add(k);
        }
      }
      const sorted = [...names].sort();
      if (!this.metric || !names.has(this.metric)) {
        this.metric = names.has('loss') ? 'loss' : sorted[0] || null;
      }
      const sel = $('metric-select');
      renderIfChanged(sel, sorted, () => {
        sel.replaceChildren(...sorted.map((k) => el('option', { value: k }, k)));
      });
      sel.hidden = $('metric-label').hidden = sorted.length === 0;
      if (this.metric) sel.value = this.metric;

      const chartEl = $('chart');
      const metric = this.metric;
      const ranks = [...byRank.keys()];
      // One x (time, seconds) for all ranks; a rank without a report at a time has null.
      const times = new Set();
      for (const r of ranks) {
        for (const rep of byRank.get(r)) {
          if (typeof rep.metrics[metric] === 'number') times.add(rep.time / 1000);
        }
      }
      const xs = [...times].sort((a, b) => a - b);
      const index = new Map(xs.map((t, i) => [t, i]));
      let points = 0;
      const ys = ranks.map((r) => {
        const y = new Array(xs.length).fill(null);
        for (const rep of byRank.get(r)) {
          const v = rep.metrics[metric];
          if (typeof v === 'number') { y[index.get(rep.time / 1000)] = v; points++; }
        }
        return y;
      });
      if (!points) {
        $('chart-note').textContent = d.started_at ? 'no metrics reported yet' : 'the job has not started';
        return;
      }
      $('chart-note').textContent = this.restarts.length ? 'dashed lines: restarts' : '';
      const key = `${metric}|${ranks.join(',')}`;
      if (!this.chart || key !== this.chartKey) {
        if (this.chart) this.chart.destroy();
        chartEl.replaceChildren();
        this.chartKey = key;
        this.chart = new uPlot({
          width: Math.max(chartEl.clientWidth, 300),
          height: 300,
          // A single report gets ten seconds of axis (uPlot would span years).
          scales: { x: { time: true, range: (u, lo, hi) => (hi > lo ? [lo, hi] : [lo - 5, hi + 5]) } },
          series: [{ label: 'time' }, ...ranks.map((r) => ({
            label: `rank ${r}`, stroke: COLORS[r % COLORS.length], width: 1.5, spanGaps: true,
          }))],
          axes: [{}, { label: metric, size: 60 }],
          hooks: { draw: [(u) => this.drawRestarts(u)] },
        }, [xs, ...ys], chartEl);
      } else {
        // Keep a zoom (a drag on the chart; a double click undoes it) across polls.
        const prev = this.chart.data[0];
        const sx = this.chart.scales.x;
        const zoomed = sx.min > prev[0] || sx.max < prev[prev.length - 1];
        this.chart.setData([xs, ...ys], !zoomed);
      }
      chartEl.dataset.points = String(points);
      chartEl.dataset.series = String(ranks.length);
      chartEl.dataset.metric = metric;
      if (!this.markedPoints) {
        this.markedPoints = true;
        performance.mark('traintl:chart-points');
      }
    }

    // A dashed vertical line where each restart (attempt 2, 3, ...) began.
    drawRestarts(u) {
      const ctx = u.ctx;
      const { left, top, width, height } = u.bbox;
      ctx.save();
      ctx.strokeStyle = '#888';
      ctx.fillStyle = '#555';
      ctx.setLineDash([6, 4]);
      ctx.font = `${Math.round(11 * devicePixelRatio)}px sans-serif`;
      for (const r of this.restarts) {
        const x = Math.round(u.valToPos(r.t, 'x', true));
        if (x < left || x > left + width) continue;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, top + height);
        ctx.stroke();
        ctx.fillText(`attempt ${r.attempt}`, x + 4, top + 12 * devicePixelRatio);
      }
      ctx.restore();
    }

    renderCheckpoints(list) {
      const more = list.length > 20 ? ', newest 20 shown' : '';
      $('ckpt-count').textContent = list.length ? `(${list.length} retained${more})` : '(none)';
      const shown = list.slice(-20).reverse();
      const table = $('checkpoints');
      renderIfChanged(table, shown.map((c) => c.id), () => fillTable(table, shown.map((c) =>
        el('tr', { class: c.latest ? 'latest' : null, 'data-checkpoint': c.id },
          el('td', {}, c.seq, c.latest ? el('span', { class: 'badge' }, 'latest') : null),
          el('td', {}, c.attempt),
          el('td', {}, fmtTime(c.created_at)),
          el('td', { class: 'mono small' }, metricSummary(c.metrics, 3)),
          el('td', { class: 'mono small' }, c.path)))));
    }

    renderLog(d, log) {
      const pre = $('log');
      pre.hidden = log === null;
      if (log === null) {
        pre.textContent = '';
        $('log-note').textContent = 'the job has not started';
        return;
      }
      if (typeof log !== 'string') {
        $('log-note').textContent = `no log: ${log.error}`;
        return;
      }
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (pre.textContent !== log) pre.textContent = log;
      pre.dataset.rank = String(this.rank);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
      $('log-note').textContent = `attempt ${d.attempt}, last 200 lines`;
    }

    async stop() {
      if (!this.id || !confirm(`Stop job ${$('job-name').textContent} (${this.id})?`)) return;
      const button = $('job-stop');
      button.disabled = true;
      try {
        await api(`/v1/jobs/${enc(this.id)}/stop`, { method: 'POST' });
      } catch (e) {
        if (e instanceof AuthError) { showLogin(false); return; }
        setConn(`stop failed: ${e.message}`);
      } finally {
        button.disabled = false;
      }
      this.wake();
    }
  }

  // ---- start -----------------------------------------------------------------------------

  // POST /ui/login with a token or a code: the cookie comes back, the page key in the body.
  async function logIn(fields) {
    const r = await fetch('/ui/login', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(fields).toString(),
      cache: 'no-store',
    });
    if (!r.ok) return false;
    const body = await r.json();
    try {
      localStorage.setItem(KEY_ITEM, body.page_key);
    } catch (_) {
      setConn('this browser keeps no storage for this page: the dashboard cannot log in');
      return false;
    }
    return true;
  }

  async function start() {
    const params = new URLSearchParams(location.search);
    const code = params.get('code');
    // Never keep a code (or an old link's token) in the address bar.
    if (params.has('code') || params.has('token') || params.has('login')) {
      history.replaceState(null, '', location.pathname + location.hash);
    }
    if (code) {
      try {
        loginFailed = !(await logIn({ code }));
      } catch (_) {
        loginFailed = true;
      }
    }
    $('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      let ok = false;
      try {
        ok = await logIn({ token: $('login-token').value });
      } catch (_) { /* the daemon is away: the form stays */ }
      if (!ok) {
        $('login-error').hidden = false;
        $('login-token').value = '';
        $('login-token').focus();
        return;
      }
      $('login-token').value = '';
      loginFailed = false;
      route();
    });
    $('logout').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin' });
      } catch (_) { /* the key goes anyway */ }
      try { localStorage.removeItem(KEY_ITEM); } catch (_) { /* storage off */ }
      showLogin(false);
    });
    // The first call of the page's poller tells whether there is a session: a 401 shows the
    // login form (no extra round trip before the data).
    window.addEventListener('hashchange', route);
    route();
  }

  start();
})();
