// keyfleet dashboard: renders /api/status and every server-sent event of
// /api/events. No framework, no build step; every value reaches the page
// through textContent, never as HTML.
'use strict';

(() => {
  const readOnly = document.body.dataset.readOnly === 'true';
  const $ = (id) => document.getElementById(id);
  const charts = new Map(); // credential id -> its <img>, kept across renders
  let chartSample = -1;
  let lastEvent = 0;
  let intervalMS = 1000;

  // el builds an element: el('td', {class: 'num'}, 'text', child, ...).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k.startsWith('data-')) e.setAttribute(k, String(v));
      else e[k] = v;
    }
    for (const kid of kids.flat()) {
      if (kid === undefined || kid === null || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }

  const num = (n) => (n ?? 0).toLocaleString('en-US');
  const plural = (n, one, many) => `${num(n)} ${n === 1 ? one : many}`;

  function dur(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return '–';
    sec = Math.max(0, Math.round(sec));
    if (sec < 60) return `${sec}s`;
    if (sec < 3600) return `${Math.floor(sec / 60)}m ${String(sec % 60).padStart(2, '0')}s`;
    return `${Math.floor(sec / 3600)}h ${String(Math.floor(sec % 3600 / 60)).padStart(2, '0')}m`;
  }
  function ago(now, t) {
    if (!t) return 'never';
    return `${dur((now - Date.parse(t)) / 1000)} ago`;
  }
  function clock(t) {
    if (!t) return '–';
    return new Date(t).toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', second: '2-digit'});
  }
  function bytes(n) {
    if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} GiB`;
    if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
    if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
    return `${n} B`;
  }
  function rate(r) {
    if (!r) return '0';
    return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2);
  }

  // meter is a small bar: used of max.
  function meter(used, max, cls) {
    const pct = max > 0 ? Math.min(100, 100 * used / max) : 0;
    const fill = el('span', {class: 'fill ' + (cls || '')});
    fill.style.width = pct + '%';
    return el('span', {class: 'meter'}, fill);
  }

  function table(head, rows, attrs) {
    return el('table', attrs || {},
      el('thead', {}, el('tr', {}, head.map((h) => el('th', {class: h.startsWith('#') ? 'num' : ''}, h.replace(/^#/, ''))))),
      el('tbody', {}, rows));
  }

  // ---- actions (only with an admin token) ------------------------------

  function toast(msg, bad) {
    const t = $('toast');
    t.textContent = msg;
    t.className = 'toast' + (bad ? ' bad' : '');
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
  }

  // act posts a write action; done(reply) may describe its effect.
  async function act(path, body, what, done) {
    const token = ($('token') || {}).value || '';
    if (!token) {
      toast('Enter the admin token first (top right).', true);
      return;
    }
    try {
      const resp = await fetch(path, {
        method: 'POST',
        headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token},
        body: JSON.stringify(body),
        credentials: 'omit',
        cache: 'no-store',
      });
      const out = await resp.json().catch(() => ({}));
      if (!resp.ok) toast(`${what}: refused (${resp.status}): ${out.error || resp.statusText}`, true);
      else if (done) toast(`${what}: ${done(out)}.`);
      else toast(`${what}: done${out.replayed !== undefined ? ` (${plural(out.replayed, 'item', 'items')} back on the queue)` : ''}.`);
    } catch (e) {
      toast(`${what}: ${e}`, true);
    }
  }

  const actionButton = (label, onclick, cls) =>
    readOnly ? null : el('button', {type: 'button', class: 'action ' + (cls || ''), onclick}, label);

  // ---- sections ---------------------------------------------------------

  // Batch rows are kept per batch and their cells updated in place: a
  // button under the operator's pointer survives every update.
  const batchRows = new Map(); // id -> {tr, cells, actions, key}
  const batchHead = ['Batch', 'Kind', '#Prio', '#Weight', 'State', 'Progress (succeeded · failed · cancelled)',
    '#Failed', '#Cancelled', '#Items/s', '#ETA', 'Enqueued'];
  const batchTable = table(readOnly ? batchHead : batchHead.concat(['']), [], {class: 'batches'});
  const batchEmpty = el('p', {class: 'muted'}, 'No batches yet: `producer enqueue` records each batch\'s total here.');

  function batchRowFor(id) {
    let r = batchRows.get(id);
    if (!r) {
      const cells = batchHead.map(() => el('td'));
      const actions = el('td', {class: 'batch-actions'});
      r = {tr: el('tr', {'data-batch': id}, cells, readOnly ? null : actions), cells, actions, key: null};
      batchRows.set(id, r);
    }
    return r;
  }

  function setCell(td, cls, ...kids) {
    td.className = cls || '';
    td.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
  }

  // batchAction asks the server to pause, resume or cancel a batch.
  function batchAction(b, action) {
    if (action === 'cancel' && !confirm(`Cancel batch ${b.id}? Its ${num(Math.max(0, b.total - b.done))} items not started ` +
      'will never run (they are reported as cancelled), and it takes no new items. This cannot be undone.')) return;
    act(`/api/batches/${encodeURIComponent(b.id)}/${action}`, {}, `${action} ${b.id}`, (out) =>
      `now ${out.state}` + (out.drained !== undefined ? `, ${plural(out.drained, 'item', 'items')} not started recorded as cancelled` : '') +
      (out.warning ? ` (${out.warning})` : ''));
  }

  // lastChange says who last paused, resumed or cancelled a batch.
  function lastChange(b, now) {
    const c = b.last_change || (b.history || [])[(b.history || []).length - 1];
    if (!c) return null;
    const verb = {pause: 'paused', resume: 'resumed', cancel: 'cancelled'}[c.action] || c.action;
    return el('div', {class: 'muted small last-change', title: c.at}, `${verb} by ${c.by} · ${ago(now, c.at)}`);
  }

  // providerBatches says how a deadline batch's provider batches (Batch
  // API) stand: a line for the batch, one per provider batch (at most
  // five, the active ones first).
  function providerBatches(b, now) {
    const pbs = b.provider_batches || [];
    if (!b.deadline && pbs.length === 0) return null;
    const done = pbs.filter((p) => p.state === 'done').length;
    const back = pbs.reduce((n, p) => n + (p.real_time || 0), 0);
    const head = `Batch API: ${plural(pbs.length, 'provider batch', 'provider batches')}, ${num(done)} done` +
      (back ? `, ${plural(back, 'item', 'items')} to real time` : '') +
      (b.deadline ? ` · deadline in ${dur((Date.parse(b.deadline) - now) / 1000)}` : '');
    const shown = [...pbs].sort((x, y) => (x.state === 'done') - (y.state === 'done')).slice(0, 5);
    return el('div', {class: 'muted small provider-batches', title: b.deadline ? `deadline ${b.deadline}` : ''},
      el('div', {}, head),
      shown.map((p) => el('div', {class: 'provider-batch'},
        `${p.id || p.record} · ${p.status} · ${num(p.completed)}/${num(p.total)}` +
        (p.failed ? `, ${num(p.failed)} failed` : '') + ` · ${p.credential}`)),
      pbs.length > shown.length ? el('div', {}, `… and ${num(pbs.length - shown.length)} more`) : null);
  }

  // fallbackLine says how many of a batch's items ran on a fallback kind
  // of their kind, where and why.
  function fallbackLine(b) {
    const fs = b.fallbacks || [];
    if (fs.length === 0) return null;
    return el('div', {class: 'muted small fallbacks', title: 'items that ran on a fallback kind of their kind'},
      fs.map((f) => el('div', {class: 'fallback', 'data-to': f.to, 'data-why': f.why, 'data-items': f.items},
        `${num(f.items)} ran on ${f.to} (${f.why})`)));
  }

  // spendLine says a batch's tenant, what it spent and its budget, and
  // why it is paused when its budget paused it.
  function spendLine(b) {
    const parts = [];
    if (b.tenant) parts.push(`tenant ${b.tenant}`);
    if (b.budget !== null && b.budget !== undefined) parts.push(`spent ${b.spent} of ${b.budget}`);
    else if (b.spent) parts.push(`spent ${b.spent}`);
    if (b.paused_reason) parts.push(`paused: ${b.paused_reason}`);
    return parts.length ? el('div', {class: 'muted small spend'}, parts.join(' · ')) : null;
  }

  // Tenant rows are kept per tenant and their cells updated in place, as
  // batch rows are: the budget button under the pointer survives updates.
  const tenantRows = new Map(); // name -> {tr, cells, actions, t}
  const tenantHead = ['Tenant', '#Weight', 'Budget', '#Spent', '#Reserved', 'Period'];
  const tenantTable = table(readOnly ? tenantHead : tenantHead.concat(['']), [], {class: 'tenants'});
  const tenantEmpty = el('p', {class: 'muted'}, 'No tenants in the configuration.');

  // tenantBudget asks for a tenant's new budget and sets it live.
  function tenantBudget(t) {
    const now = t.budget !== null && t.budget !== undefined ? `${t.budget}/${t.period}` : '';
    const v = prompt(`Budget of tenant ${t.name} for the running fleet: AMOUNT/PERIOD (period d, w or mo), ` +
      `or none to go back to the configuration's (${t.config_budget}/${t.config_period}).`, now);
    if (v === null || v.trim() === '') return;
    act(`/api/tenants/${encodeURIComponent(t.name)}/budget`, {budget: v.trim()}, `budget of ${t.name}`, (out) =>
      `now ${out.budget}/${out.period} (${out.budget_source})` +
      ((out.resumed || []).length ? `, resumed ${out.resumed.join(', ')}` : ''));
  }

  // renderTenants lists the tenants with their budget in force (and where
  // it comes from) and their spend of the period.
  function renderTenants(s) {
    const ts = s.tenants || [];
    if (ts.length === 0) return tenantEmpty;
    const now = Date.parse(s.at);
    const rows = ts.map((t) => {
      let r = tenantRows.get(t.name);
      if (!r) {
        const cells = tenantHead.map(() => el('td'));
        const actions = el('td', {class: 'tenant-actions'});
        r = {tr: el('tr', {'data-tenant': t.name}, cells, readOnly ? null : actions), cells, actions, key: null};
        tenantRows.set(t.name, r);
      }
      r.t = t;
      const c = r.cells;
      const budget = t.budget !== null && t.budget !== undefined ? `${t.budget}/${t.period}` : 'none';
      r.tr.dataset.budget = budget;
      r.tr.dataset.source = t.budget_source;
      const from = t.budget_source === 'live'
        ? el('div', {class: 'muted small budget-source', title: t.set_at || ''},
          `live · config ${t.config_budget !== null && t.config_budget !== undefined ? `${t.config_budget}/${t.config_period}` : 'none'}` +
          (t.set_by ? ` · set by ${t.set_by}${t.set_at ? ` ${ago(now, t.set_at)}` : ''}` : ''))
        : el('div', {class: 'muted small budget-source'}, t.budget_source === 'config' ? 'from the configuration' : '');
      setCell(c[0], 'id', t.name);
      setCell(c[1], 'num', t.weight);
      setCell(c[2], 'budget-cell', el('span', {class: 'budget'}, budget), from);
      setCell(c[3], 'num', String(t.spent));
      setCell(c[4], 'num', String(t.reserved));
      setCell(c[5], 'muted', t.period_id);
      // Only a tenant with a configured budget can have a live one.
      const settable = t.config_budget !== null && t.config_budget !== undefined;
      if (!readOnly && r.key !== settable) {
        r.key = settable;
        r.actions.replaceChildren(settable ? actionButton('Budget…', () => tenantBudget(r.t), 'budget') : '');
      }
      return r.tr;
    });
    for (const name of tenantRows.keys()) {
      if (!ts.some((t) => t.name === name)) tenantRows.delete(name);
    }
    replaceIfChanged(tenantTable.tBodies[0], rows);
    return tenantTable;
  }

  function renderBatches(s) {
    const bs = s.batches || [];
    if (bs.length === 0) return batchEmpty;
    const now = Date.parse(s.at);
    const rows = bs.map((b) => {
      const r = batchRowFor(b.id);
      const c = r.cells;
      const total = b.total_known ? b.total : Math.max(b.done, 1);
      const fill = (cls, n) => {
        const f = el('span', {class: 'fill ' + cls});
        f.style.width = (100 * n / total) + '%';
        return f;
      };
      const pct = b.total_known && b.total > 0 ? Math.min(100, Math.floor(100 * b.done / b.total)) : null;
      const text = b.total_known ? `${num(b.done)} / ${num(b.total)}${pct !== null ? ` (${pct}%)` : ''}` : `${num(b.done)} / ?`;
      let eta = '–';
      if (b.complete) eta = 'done';
      else if (b.state === 'paused' || b.state === 'cancelled') eta = b.state;
      else if (b.eta_seconds !== null && b.eta_seconds !== undefined) eta = dur(b.eta_seconds);
      else if (b.total_known && s.dashboard.results_caught_up && b.last_result_at &&
        now - Date.parse(b.last_result_at) > 60000) eta = 'stalled';
      const tr = r.tr;
      r.b = b;
      tr.dataset.done = b.done;
      tr.dataset.total = b.total;
      tr.dataset.state = b.state;
      tr.dataset.cancelled = b.cancelled;
      tr.className = b.complete || b.state === 'cancelled' ? 'complete' : '';
      setCell(c[0], 'id', b.id);
      setCell(c[1], '', b.kind || '–', fallbackLine(b));
      setCell(c[2], 'num', b.priority);
      setCell(c[3], 'num', b.weight);
      setCell(c[4], 'state-cell', el('span', {class: 'badge bst ' + b.state}, b.state), lastChange(b, now), spendLine(b));
      setCell(c[5], 'progress-cell',
        el('span', {class: 'progress'}, fill('ok', b.succeeded), fill('bad', b.failed), fill('cancelled', b.cancelled)),
        el('span', {class: 'progress-text'}, text), providerBatches(b, now));
      setCell(c[6], 'num' + (b.failed ? ' bad-text' : ''), num(b.failed));
      setCell(c[7], 'num cancelled-count', num(b.cancelled));
      setCell(c[8], 'num', rate(b.rate));
      setCell(c[9], 'num', eta);
      setCell(c[10], 'muted', b.enqueued_at ? ago(now, b.enqueued_at) : '–');
      // The buttons are drawn again only when what they offer changes.
      const live = !b.complete && b.state !== 'cancelled';
      const key = `${b.state}/${live}`;
      if (!readOnly && r.key !== key) {
        r.key = key;
        r.actions.replaceChildren(...[
          b.state === 'running' && live ? actionButton('Pause', () => batchAction(r.b, 'pause'), 'pause') : null,
          b.state === 'paused' ? actionButton('Resume', () => batchAction(r.b, 'resume'), 'resume') : null,
          live ? actionButton('Cancel…', () => batchAction(r.b, 'cancel'), 'danger cancel') : null,
        ].filter(Boolean));
      }
      return tr;
    });
    for (const id of batchRows.keys()) {
      if (!bs.some((b) => b.id === id)) batchRows.delete(id);
    }
    replaceIfChanged(batchTable.tBodies[0], rows);
    return batchTable;
  }

  // limits lists what limits a credential: each with its use in its
  // window (for a smooth rate, the burst's cells in use; a scoped limit's
  // label ends in ",scope=S"), and its learnt pace when bare 429s set one.
  function limits(c) {
    const out = (c.limits || []).map((l) => ({
      label: l.limit,
      used: l.used,
      max: l.of,
      note: l.next_room ? `room at ${clock(l.next_room)}` : '',
    }));
    if (c.pace_ms) {
      out.push({label: 'learnt pace', used: null, max: null, note: `one start every ${c.pace_ms.toFixed(1)} ms (from bare 429s)`});
    }
    return out;
  }

  // rest says until when and why a credential rests, if it does.
  function rest(c, now) {
    if (!c.cooling_until) return null;
    const left = (Date.parse(c.cooling_until) - now) / 1000;
    return el('div', {class: 'rest'},
      el('b', {}, `resting until ${clock(c.cooling_until)}`), ` (in ${dur(left)})`,
      c.rest_cause ? el('span', {class: 'muted'}, ` · ${c.rest_cause}`) : null,
      c.cooling_reason ? el('div', {class: 'why'}, c.cooling_reason) : null);
  }

  // keyHistory shows what a key went through: the API's refusals in a
  // row (the evidence that may disable it), and the probe that enabled it
  // again.
  function keyHistory(c, now) {
    const out = [];
    const refusals = c.refusals || [];
    if (refusals.length) {
      out.push(el('div', {class: 'refusals'},
        el('b', {}, `refused ${plural(refusals.length, 'item', 'items')} in a row:`),
        el('ul', {}, refusals.map((r) => el('li', {}, r)))));
    }
    if (c.state !== 'disabled' && c.enabled_by === 'probe') {
      out.push(el('div', {class: 'enabled-reason'},
        el('b', {}, 'enabled by probe: '), c.enabled_reason,
        c.enabled_at ? el('span', {class: 'muted'}, ` · ${ago(now, c.enabled_at)}`) : null));
    }
    return out.length ? el('div', {class: 'history'}, out) : null;
  }

  // Cards are kept per credential and updated in place: a button under
  // the operator's pointer, and the chart, survive every update.
  const cards = new Map(); // id -> {card, body, img, actions, state}

  function cardFor(id) {
    let k = cards.get(id);
    if (!k) {
      k = {
        body: el('div'),
        img: el('img', {class: 'chart', alt: `${id}: starts/s, rate-limited replies/s and leases in flight over the last minutes`}),
        actions: el('div', {class: 'actions'}),
        state: null,
      };
      k.card = el('article', {class: 'card cred', 'data-id': id}, k.body, k.img, k.actions);
      cards.set(id, k);
    }
    return k;
  }

  function renderPool(s) {
    const p = s.pool;
    const now = Date.parse(p.at || s.at);
    $('pool-summary').replaceChildren(
      `${plural(p.total, 'key', 'keys')}: `,
      el('span', {class: 'st available'}, `${p.available} available`), ' · ',
      el('span', {class: 'st busy'}, `${p.leased} leased`), ' · ',
      el('span', {class: 'st cooling'}, `${p.cooling} resting`), ' · ',
      el('span', {class: 'st disabled'}, `${p.disabled} disabled`), ' · ',
      `${plural(p.in_flight, 'lease', 'leases')} in flight`);
    if (!p.credentials || p.credentials.length === 0) {
      return [el('p', {class: 'muted'}, 'No credentials yet: workers register the ones in their configuration when they start.')];
    }
    // Charts are fetched again every other reading.
    const sample = Math.floor((s.dashboard.sample || 0) / 2);
    const out = p.credentials.map((c) => {
      const k = cardFor(c.id);
      const lims = limits(c);
      const holders = (c.holders || []).slice(0, 3).map((h) =>
        el('li', {}, h.owner, el('span', {class: 'muted'}, ` · expires in ${dur((Date.parse(h.expires) - now) / 1000)}`)));
      const more = (c.holders || []).length - holders.length;
      k.card.dataset.state = c.state;
      k.body.replaceChildren(
        el('div', {class: 'card-head'},
          el('h3', {}, c.id),
          el('span', {class: 'badge st ' + c.state}, c.state),
          (c.groups || []).length ? el('span', {class: 'muted groups'}, `groups: ${c.groups.join(', ')}`) : null,
          c.account ? el('span', {class: 'muted account'}, `account: ${c.account}`) : null),
        el('div', {class: 'line'},
          el('span', {class: 'label'}, 'in flight'),
          meter(c.in_flight, c.max_concurrent, c.in_flight >= c.max_concurrent ? 'full' : ''),
          el('span', {class: 'val inflight'}, `${c.in_flight} / ${c.max_concurrent}`)),
        ...lims.map((l) => el('div', {class: 'line'},
          el('span', {class: 'label'}, l.label),
          l.max ? meter(l.used || 0, l.max, (l.used || 0) >= l.max ? 'full' : '') : el('span', {class: 'meter none'}),
          el('span', {class: 'val'}, l.used !== null ? `${l.used}${l.max ? ' / ' + l.max : ''}` : '–'),
          l.note ? el('span', {class: 'muted note'}, l.note) : null)),
        rest(c, now) || '',
        ...(c.scope_rests || []).map((r) => el('div', {class: 'rest scope-rest'},
          el('b', {}, `${r.scope} resting until ${clock(r.until)}`),
          ` (in ${dur((Date.parse(r.until) - now) / 1000)})`,
          r.reason ? el('div', {class: 'why'}, r.reason) : null)),
        c.state === 'disabled' ? el('div', {class: 'disabled-reason'},
          el('b', {}, 'disabled: '), c.disabled_reason || '(no reason given)',
          el('span', {class: 'muted'}, c.disabled_by === 'api' ? ' · by the API' : ' · by an operator'),
          c.disabled_at ? el('span', {class: 'muted'}, ` · ${ago(now, c.disabled_at)}`) : null) : '',
        keyHistory(c, now) || '',
        holders.length ? el('ul', {class: 'holders'}, holders, more > 0 ? el('li', {class: 'muted'}, `and ${more} more`) : null) : '',
        el('div', {class: 'muted small'}, `last used ${ago(now, c.last_used)}`));
      if (sample !== chartSample || !k.img.src) {
        k.img.src = `/api/chart?key=${encodeURIComponent(c.id)}&n=${sample}`;
      }
      const disabled = c.state === 'disabled';
      if (k.state !== disabled) {
        k.state = disabled;
        k.actions.replaceChildren(disabled
          ? actionButton('Enable', () => act('/api/creds/enable', {id: c.id}, `enable ${c.id}`)) || ''
          : actionButton('Disable…', () => {
            const reason = prompt(`Disable ${c.id}: why?`, 'disabled from the dashboard');
            if (reason !== null) act('/api/creds/disable', {id: c.id, reason}, `disable ${c.id}`);
          }, 'danger') || '');
      }
      return k.card;
    });
    chartSample = sample;
    for (const id of cards.keys()) {
      if (!p.credentials.some((c) => c.id === id)) cards.delete(id);
    }
    return out;
  }

  // renderAccounts lists the pool's accounts: what the APIs limit, whose
  // keys share their limits and rest together.
  function renderAccounts(s) {
    const as = (s.pool && s.pool.accounts) || [];
    $('accounts-section').hidden = as.length === 0;
    const now = Date.parse((s.pool && s.pool.at) || s.at);
    return table(['Account', 'State', 'Keys', 'Limits (used / of)', '#In flight', '#Starts', '#429s', 'Resting'], as.map((a) =>
      el('tr', {'data-account': a.id, 'data-state': a.state},
        el('td', {class: 'id'}, a.id, a.account ? el('span', {class: 'muted'}, ` in ${a.account}`) : null),
        el('td', {}, el('span', {class: 'badge st ' + a.state}, a.state)),
        el('td', {}, (a.keys || []).join(', ') || '–'),
        el('td', {}, limits(a).map((l) => el('div', {class: 'line'},
          el('span', {class: 'label'}, l.label),
          l.max ? meter(l.used || 0, l.max, (l.used || 0) >= l.max ? 'full' : '') : null,
          el('span', {class: 'val'}, l.used !== null ? `${l.used}${l.max ? ' / ' + l.max : ''}` : (l.note || '–'))))),
        el('td', {class: 'num'}, num(a.in_flight)),
        el('td', {class: 'num'}, num(a.starts)),
        el('td', {class: 'num'}, num(a.rate_limited)),
        el('td', {}, rest(a, now) || '–'))));
  }

  function renderWorkers(s) {
    const ws = s.workers || [];
    const now = Date.parse(s.at);
    const busy = ws.reduce((a, w) => a + w.busy, 0);
    const slots = ws.reduce((a, w) => a + w.concurrency, 0);
    // Interactive traffic (the gateway) beside the batches' slots.
    const gws = ws.filter((w) => w.gateway);
    const gwReq = gws.reduce((a, w) => a + w.gateway.requests, 0);
    const gwNow = gws.reduce((a, w) => a + w.gateway.in_flight, 0);
    $('workers-summary').textContent = `${plural(ws.length, 'worker', 'workers')} · ${busy} of ${slots} slots busy` +
      (gws.length ? ` · gateway: ${gwNow} in flight, ${num(gwReq)} answered` : '');
    if (ws.length === 0) {
      return el('p', {class: 'muted'}, `No worker heard from in the last ${dur(s.dashboard.heartbeat_ttl_seconds)}.`);
    }
    const gwCell = (w) => w.gateway
      ? el('td', {class: 'num gateway', title: `serving ${w.gateway.listen}`},
        `${num(w.gateway.in_flight)} now · ${num(w.gateway.requests)}`, w.gateway.errors ? el('span', {class: 'bad-text'}, ` · ${num(w.gateway.errors)} errors`) : null)
      : el('td', {class: 'muted'}, '–');
    return table(['Worker', 'State', 'Slots busy', '#Done', '#Failed', 'Gateway', 'Kinds', 'Last seen'], ws.map((w) =>
      el('tr', {'data-worker': w.id, 'data-busy': w.busy, 'data-done': w.done, 'data-gateway': w.gateway ? w.gateway.requests : ''},
        el('td', {class: 'id', title: `${w.host} · pid ${w.pid} · ${w.version}`}, w.id),
        el('td', {}, el('span', {class: 'badge st ' + (w.state === 'running' ? 'available' : 'cooling')}, w.state)),
        el('td', {class: 'slots'}, meter(w.busy, w.concurrency), ` ${w.busy} / ${w.concurrency}`),
        el('td', {class: 'num'}, num(w.done)),
        el('td', {class: 'num' + (w.failed ? ' bad-text' : '')}, num(w.failed)),
        gwCell(w),
        el('td', {}, (w.kinds || []).join(', ')),
        el('td', {class: 'muted'}, ago(now, w.last_seen)))));
  }

  // renderFallbacks lists the items of each kind that ran on one of its
  // fallback kinds, and why, as the workers running now counted them.
  function renderFallbacks(s) {
    const fs = s.fallbacks || [];
    $('fallbacks-section').hidden = fs.length === 0;
    return table(['Kind', 'Ran on', 'Why', '#Items'], fs.map((f) =>
      el('tr', {'data-kind': f.kind, 'data-to': f.to, 'data-why': f.why, 'data-items': f.items},
        el('td', {class: 'id'}, f.kind), el('td', {}, f.to),
        el('td', {}, el('span', {class: 'badge why ' + f.why, title: f.why === 'waited'
          ? 'no key of its kind could start it within its fallback\'s after' : 'its runs failed on two keys of its kind in a row'}, f.why)),
        el('td', {class: 'num'}, num(f.items)))));
  }

  function tile(label, value, note, cls) {
    return el('div', {class: 'tile ' + (cls || '')}, el('div', {class: 'tile-val'}, value), el('div', {class: 'tile-label'}, label),
      note ? el('div', {class: 'muted small'}, note) : null);
  }

  function renderQueue(s) {
    const c = s.consumer;
    const now = Date.parse(s.at);
    return [
      tile('backlog', num(c.pending + c.ack_pending), 'pending + ack pending', 'big'),
      tile('pending', num(c.pending), 'not yet delivered'),
      tile('ack pending', num(c.ack_pending), 'running or waiting for a key'),
      tile('redelivered', num(c.redelivered), 'of those, delivered again', c.redelivered ? 'warn' : ''),
      tile('waiting pulls', num(c.waiting_pulls), 'idle worker slots'),
      tile('stream', num(s.stream.messages), bytes(s.stream.bytes)),
      tile('results kept', num(s.results), ''),
      tile('last delivery', c.last_active ? ago(now, c.last_active) : 'never', ''),
    ];
  }

  function renderDeadLetters(s) {
    const list = s.dead_letter_list || [];
    $('dl-summary').textContent = `${num(s.dead_letters)} kept` + (s.dead_letters > list.length ? ` · newest ${list.length} shown` : '');
    if (list.length === 0) return [el('p', {class: 'muted'}, 'No dead letters.')];
    const all = actionButton(`Replay all ${num(s.dead_letters)}`, () => {
      if (confirm(`Put all ${s.dead_letters} dead letters back on the queue with fresh attempts?`)) act('/api/dlq/replay', {}, 'replay all');
    });
    const head = ['Item', 'Batch', 'Kind', 'Reason', '#Attempts', 'Last error', 'Failed at'];
    if (!readOnly) head.push('');
    return [all ? el('div', {class: 'toolbar'}, all) : null, table(head, list.map((d) =>
      el('tr', {'data-item': d.item},
        el('td', {class: 'id'}, d.item),
        el('td', {class: 'id'}, d.batch),
        el('td', {}, d.kind),
        el('td', {}, el('span', {class: 'badge reason'}, d.reason)),
        el('td', {class: 'num'}, d.attempts),
        el('td', {class: 'err', title: d.error}, d.error),
        el('td', {class: 'muted'}, clock(d.failed_at)),
        readOnly ? null : el('td', {}, actionButton('Replay', () =>
          act('/api/dlq/replay', {batch: d.batch, items: [d.item]}, `replay ${d.item}`))))), {class: 'dead'})];
  }

  // ---- find an item -----------------------------------------------------

  const itemStates = {
    waiting: 'waiting for a worker',
    running: 'a worker has it: running, or waiting there for a key or its next try',
    succeeded: 'done',
    failed: 'failed for good',
    'dead-lettered': 'failed for good: its dead letter can be replayed',
    cancelled: 'its batch was cancelled before it ran',
  };

  // findItem reads GET /api/batches/{id}/items/{item}, with the admin
  // token when one is entered (only then do errors and outputs come).
  async function findItem(e) {
    e.preventDefault();
    const batch = $('item-batch').value, id = $('item-id').value;
    const out = $('item-result');
    const token = ($('token') || {}).value || '';
    out.replaceChildren(el('p', {class: 'muted'}, 'looking…'));
    try {
      const resp = await fetch(`/api/batches/${encodeURIComponent(batch)}/items/${encodeURIComponent(id)}`, {
        headers: token ? {'Authorization': 'Bearer ' + token} : {}, cache: 'no-store', credentials: 'omit',
      });
      const it = await resp.json().catch(() => ({}));
      if (!resp.ok) {
        out.replaceChildren(el('p', {class: 'bad-text', 'data-item-error': resp.status}, it.error || resp.statusText));
        return;
      }
      out.replaceChildren(renderItem(it));
    } catch (err) {
      out.replaceChildren(el('p', {class: 'bad-text'}, String(err)));
    }
  }

  function renderItem(it) {
    const now = Date.now();
    const rows = [];
    const row = (k, ...v) => rows.push(el('dt', {}, k), el('dd', {}, ...v));
    row('state', el('span', {class: 'badge ist ' + it.state, 'data-state': it.state}, it.state), ' ',
      el('span', {class: 'muted'}, itemStates[it.state] || ''),
      it.batch_state === 'paused' && it.state === 'waiting' ? el('span', {class: 'muted'}, ' (its batch is paused)') : null);
    row('kind', it.kind || '–', it.scope ? el('span', {class: 'muted'}, ` · scope ${it.scope}`) : null);
    if (it.result && it.result.fallback_from) {
      row('ran on', `${it.result.kind} (its kind's fallback: ${it.result.fallback_reason})`);
    }
    if (it.message) row('enqueued', `${ago(now, it.message.enqueued_at)}${it.message.replay ? ' (replayed from the dead letters)' : ''}`);
    if (it.result || it.dead_letter) {
      row('attempts', String(it.attempts));
      row('key', it.credential_id || '–');
      if (it.reason) row('dead-lettered', el('span', {class: 'badge reason'}, it.reason));
      if (it.result) row('finished', `${it.result.outcome} · ${ago(now, it.result.finished_at)}`);
      if (it.text_hidden) {
        row('error, output', el('span', {class: 'muted'}, 'enter the admin token to see what the job wrote'));
      } else {
        if (it.error) row('last error', el('pre', {class: 'item-error'}, it.error));
        if (it.result) row('output', it.output ? el('pre', {class: 'item-output'}, it.output) : el('span', {class: 'muted'}, '(none)'));
      }
    }
    return el('div', {class: 'item-view', 'data-item': it.item},
      el('div', {}, el('b', {class: 'id'}, it.item), el('span', {class: 'muted'}, ` of batch ${it.batch}`)),
      el('dl', {}, rows));
  }

  $('item-form').addEventListener('submit', findItem);

  // The batch box offers the batches shown.
  function renderBatchIDs(s) {
    const ids = (s.batches || []).map((b) => b.id);
    const key = ids.join('\n');
    if (key === renderBatchIDs.key) return;
    renderBatchIDs.key = key;
    $('batch-ids').replaceChildren(...ids.map((id) => el('option', {value: id})));
  }

  function render(s) {
    intervalMS = s.dashboard.interval_ms || 1000;
    const err = $('error');
    if (s.dashboard.error) {
      err.textContent = `The last reading failed at ${clock(s.dashboard.error_at)}: ${s.dashboard.error}. Showing the last good one.`;
      err.hidden = false;
    } else {
      err.hidden = true;
    }
    $('updated').textContent = `updated ${clock(s.at)}`;
    replaceIfChanged($('batches'), [renderBatches(s)]);
    if ($('tenants')) replaceIfChanged($('tenants'), [renderTenants(s)]);
    renderBatchIDs(s);
    replaceIfChanged($('pool'), renderPool(s));
    $('accounts').replaceChildren(renderAccounts(s));
    $('workers').replaceChildren(renderWorkers(s));
    $('fallbacks').replaceChildren(renderFallbacks(s));
    $('queue').replaceChildren(...renderQueue(s));
    // The list is drawn again only when it changes (its buttons stay put).
    const dlKey = JSON.stringify([s.dead_letters, s.dead_letter_list]);
    if (dlKey !== render.dlKey) {
      render.dlKey = dlKey;
      $('deadletters').replaceChildren(...renderDeadLetters(s).filter(Boolean));
    }
    document.body.dataset.sample = s.dashboard.sample;
  }

  // replaceIfChanged sets parent's children unless they are already these
  // nodes in this order (moving a node would cancel a click on it).
  function replaceIfChanged(parent, nodes) {
    const cur = parent.children;
    if (cur.length === nodes.length && nodes.every((n, i) => cur[i] === n)) return;
    parent.replaceChildren(...nodes);
  }

  function setConn(live) {
    const c = $('conn');
    c.dataset.state = live ? 'live' : 'reconnecting';
    c.textContent = live ? 'live' : 'reconnecting…';
  }

  // withToken reads the snapshot again with the admin token, when one is
  // entered: only then do errors and reasons show the text jobs and APIs
  // wrote (the event stream, like /api/status without it, has their
  // class alone). It returns null without a token or when refused.
  async function withToken() {
    const token = ($('token') || {}).value || '';
    if (!token) return null;
    try {
      const r = await fetch('/api/status', {
        headers: {'Authorization': 'Bearer ' + token}, cache: 'no-store', credentials: 'omit',
      });
      return r.ok ? await r.json() : null;
    } catch (_) {
      return null;
    }
  }

  function connect() {
    const es = new EventSource('/api/events');
    es.addEventListener('status', async (e) => {
      lastEvent = Date.now();
      setConn(true);
      render((await withToken()) || JSON.parse(e.data));
    });
    es.onerror = () => setConn(false);
    setInterval(() => {
      if (Date.now() - lastEvent > 5 * intervalMS + 2000) setConn(false);
    }, 1000);
  }

  fetch('/api/status', {cache: 'no-store'}).then((r) => r.json()).then((s) => { if (!lastEvent) render(s); }).catch(() => {});
  connect();
})();
