// The cluster overview: counts, jobs with live progress, raylets, heads,
// and the submit form.
import { api, post } from './api.js';
import { bar, bytes, duration, el, ended, rate, time } from './format.js';

let previous = null; // the last cluster snapshot, for transfer rates

export function renderCluster(c) {
  document.getElementById('leader').textContent = c.leader ? `leader ${c.leader}, term ${c.term}` : 'no leader';
  const set = (id, v) => { document.getElementById(id).textContent = v; };
  set('count-running', c.jobs.running);
  set('count-submitted', c.jobs.submitted);
  set('count-succeeded', c.jobs.succeeded);
  set('count-failed', c.jobs.failed);
  let busy = 0, slots = 0;
  for (const r of c.raylets) {
    if (r.state === 'alive') { busy += r.busy; slots += r.slots; }
  }
  set('slots', `${busy} / ${slots}`);
  set('queued', c.queued);

  const prev = new Map();
  if (previous) for (const r of previous.raylets) prev.set(r.id, r);
  const tbody = document.querySelector('#raylets-table tbody');
  tbody.replaceChildren(...c.raylets.map((r) => {
    const p = prev.get(r.id);
    let rin = null, rout = null;
    if (p) {
      const dt = (new Date(r.time) - new Date(p.time)) / 1000;
      if (dt > 0) {
        rin = Math.max(0, (r.transfers.bytes_in - p.transfers.bytes_in) / dt);
        rout = Math.max(0, (r.transfers.bytes_out - p.transfers.bytes_out) / dt);
      }
    }
    const st = r.store || {};
    return el('tr', { dataset: { raylet: r.id } },
      el('td', {}, r.id),
      el('td', {}, r.state),
      el('td', {}, bar(r.slots ? r.busy / r.slots : 0, `${r.busy} / ${r.slots}`)),
      el('td', {}, r.queued),
      el('td', {}, bar(st.capacity ? st.used / st.capacity : 0, `${bytes(st.used)} / ${bytes(st.capacity)}`)),
      el('td', {}, bytes(st.spilled_bytes)),
      el('td', {}, rate(rin)),
      el('td', {}, rate(rout)));
  }));
  previous = c;

  document.querySelector('#heads-table tbody').replaceChildren(...c.heads.map((h) => el('tr', {},
    el('td', {}, h.id),
    el('td', {}, h.addr),
    el('td', {}, h.role),
    el('td', {}, h.term),
    el('td', {}, h.commit_index),
    el('td', {}, h.applied_index),
    el('td', { className: 'muted' }, h.error || ''))));
}

export function renderJobs(page) {
  const tbody = document.querySelector('#jobs-table tbody');
  const now = Date.now();
  tbody.replaceChildren(...page.jobs.map((j) => {
    const f = j.subtasks ? j.finished / j.subtasks : (j.state === 'SUCCEEDED' ? 1 : 0);
    const cls = j.state === 'FAILED' ? 'bad' : j.state === 'SUCCEEDED' ? 'ok' : '';
    const took = j.submitted ? (j.ended ? new Date(j.ended) : now) - new Date(j.submitted) : null;
    const link = el('a', { href: `#/jobs/${j.id}` }, `${j.id}`);
    const progress = bar(f, `${j.finished} / ${j.subtasks}`, cls);
    progress.dataset.fraction = f.toFixed(4);
    return el('tr', { dataset: { job: j.id, state: j.state } },
      el('td', {}, link),
      el('td', {}, j.name || ''),
      el('td', {}, j.owner || ''),
      el('td', {}, el('span', { className: `badge state ${j.state}` }, j.state),
        j.released ? el('span', { className: 'muted released', title: 'its results were released' }, ' released') : null),
      el('td', { className: 'progress' }, progress),
      el('td', {}, time(j.submitted)),
      el('td', {}, ended(j.state) || j.state === 'RUNNING' ? duration(took) : '–'));
  }));
  document.getElementById('jobs-empty').hidden = page.jobs.length > 0;
}

export function setupOverview(onFilter) {
  for (const b of document.querySelectorAll('#job-filters button')) {
    b.addEventListener('click', () => {
      for (const o of document.querySelectorAll('#job-filters button')) o.classList.toggle('on', o === b);
      onFilter(b.dataset.state);
    });
  }
  const file = document.getElementById('submit-file');
  file.addEventListener('change', async () => {
    if (file.files.length) document.getElementById('submit-graph').value = await file.files[0].text();
  });
  document.getElementById('submit-button').addEventListener('click', submit);
}

async function submit() {
  const out = document.getElementById('submit-result');
  const button = document.getElementById('submit-button');
  const graph = document.getElementById('submit-graph').value;
  const name = document.getElementById('submit-name').value.trim();
  out.hidden = false;
  out.classList.remove('error');
  out.textContent = 'submitting…';
  button.disabled = true;
  try {
    const q = name ? `?name=${encodeURIComponent(name)}` : '';
    const j = await post(`/api/v1/jobs${q}`, graph, { 'Content-Type': 'application/json' });
    out.replaceChildren('Submitted ', el('a', { href: `#/jobs/${j.id}`, id: 'submitted-job' }, `job ${j.id}`), '.');
  } catch (e) {
    out.classList.add('error');
    out.textContent = `${e.status} ${e.kind}: ${e.message}`;
  } finally {
    button.disabled = false;
  }
}

export async function loadWhoami() {
  try {
    const me = await api('/api/v1/whoami');
    document.getElementById('whoami').textContent = `${me.name} (${me.role})`;
  } catch (e) {
    document.getElementById('whoami').textContent = e.message;
  }
}
