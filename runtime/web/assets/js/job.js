// One job's page: state and progress, its error, the graph of op groups
// coloured by state, the task stream, per-raylet counts, results and logs.
import { api, post } from './api.js';
import { bar, bytes, duration, el, ended, time } from './format.js';
import { renderGraph, renderLegend } from './graph.js';
import { TaskStream } from './stream.js';

export class JobPage {
  constructor(id) {
    this.id = id;
    this.job = null;
    this.stream = new TaskStream(document.getElementById('task-stream'), document.getElementById('stream-info'), id);
    this.logs = null;
    this.graphKey = '';
    renderLegend(document.getElementById('legend'));
    document.getElementById('job-title').textContent = `Job ${id}`;
    document.getElementById('job-state').textContent = '';
    document.getElementById('job-logs').textContent = '';
    document.getElementById('job-graph').textContent = '';
    document.getElementById('job-results').textContent = 'Results are listed when the job succeeds.';
    this.onCancel = () => this.act('cancel');
    this.onRelease = () => this.act('release');
    this.onLogs = () => this.followLogs();
    document.getElementById('job-cancel').addEventListener('click', this.onCancel);
    document.getElementById('job-release').addEventListener('click', this.onRelease);
    document.getElementById('log-apply').addEventListener('click', this.onLogs);
    this.followLogs();
  }

  close() {
    document.getElementById('job-cancel').removeEventListener('click', this.onCancel);
    document.getElementById('job-release').removeEventListener('click', this.onRelease);
    document.getElementById('log-apply').removeEventListener('click', this.onLogs);
    if (this.logs) this.logs.close();
  }

  async act(what) {
    const box = document.getElementById('job-error');
    try {
      await post(`/api/v1/jobs/${this.id}/${what}`, '');
      if (what === 'release') {
        box.hidden = false;
        box.classList.remove('error');
        box.textContent = 'Results released.';
      }
    } catch (e) {
      box.hidden = false;
      box.classList.add('error');
      box.textContent = `${what}: ${e.message}`;
    }
  }

  render(j) {
    this.job = j;
    const state = document.getElementById('job-state');
    state.textContent = j.state;
    state.className = `badge ${j.state}`;
    document.getElementById('job-title').textContent = j.name ? `Job ${j.id}: ${j.name}` : `Job ${j.id}`;
    const p = document.getElementById('job-progress');
    p.value = j.subtasks ? j.finished / j.subtasks : (j.state === 'SUCCEEDED' ? 1 : 0);
    document.getElementById('job-progress-text').textContent = `${j.finished} of ${j.subtasks} subtasks finished`;
    document.getElementById('job-cancel').disabled = ended(j.state);
    document.getElementById('job-release').disabled = j.state !== 'SUCCEEDED' || !!j.released;

    const took = j.submitted ? (j.ended ? new Date(j.ended) : Date.now()) - new Date(j.submitted) : null;
    const facts = [['Owner', j.owner || '–'], ['Submitted', time(j.submitted)], ['Ended', j.ended ? time(j.ended) : '–'],
      ['Took', duration(took)], ['Stages', (j.stages || []).length],
      ['Results', j.released ? (ended(j.state) ? 'released' : 'released when it ends') : (j.state === 'SUCCEEDED' ? 'kept' : '–')]];
    document.getElementById('job-facts').replaceChildren(...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));

    const box = document.getElementById('job-error');
    if (j.error) {
      const e = j.error;
      box.hidden = false;
      box.classList.add('error');
      box.replaceChildren(el('strong', {}, `${e.kind}${e.cause ? ` (${e.cause})` : ''}: `), e.message,
        e.subtask ? el('div', { className: 'muted' }, `subtask ${e.subtask} (${e.ops || '?'}) on raylet ${e.raylet || '?'} after ${e.attempts} attempt${e.attempts === 1 ? '' : 's'}`) : '');
    } else if (box.classList.contains('error')) {
      box.hidden = true;
    }

    renderGraph(document.getElementById('job-graph'), j.groups);

    document.querySelector('#job-raylets tbody').replaceChildren(...(j.raylets || []).map((r) => el('tr', {},
      el('td', {}, r.raylet), el('td', {}, r.queued), el('td', {}, r.running), el('td', {}, r.finished), el('td', {}, r.failed))));

    if (j.state === 'SUCCEEDED' && j.results) {
      const base = `/api/v1/jobs/${j.id}/results`;
      document.getElementById('job-results').replaceChildren(el('table', { className: 'grid' },
        el('thead', {}, el('tr', {}, el('th', {}, '#'), el('th', {}, 'Name'), el('th', {}, 'Type'), el('th', {}, 'Size'), el('th', {}, 'Download'))),
        el('tbody', {}, ...j.results.map((r) => el('tr', {},
          el('td', {}, r.index), el('td', {}, r.name || ''), el('td', {}, `${r.dtype}[${r.shape.join(', ')}]`), el('td', {}, bytes(r.bytes)),
          el('td', {}, el('a', { href: `${base}/${r.index}?format=json` }, 'json'), ' ',
            el('a', { href: `${base}/${r.index}?format=npy` }, '.npy'), ' ',
            el('a', { href: `${base}/${r.index}?format=raw` }, 'raw')))))));
    }
    this.stream.poll(ended(j.state));
  }

  followLogs() {
    if (this.logs) this.logs.close();
    const out = document.getElementById('job-logs');
    const status = document.getElementById('log-status');
    out.textContent = '';
    const sub = document.getElementById('log-subtask').value.trim();
    const q = sub ? `&subtask=${encodeURIComponent(sub)}` : '';
    const es = new EventSource(`/api/v1/jobs/${this.id}/logs?follow=1${q}`);
    this.logs = es;
    status.textContent = 'following…';
    let lines = 0;
    es.addEventListener('line', (ev) => {
      const l = JSON.parse(ev.data);
      const stick = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      out.append(`${new Date(l.time).toLocaleTimeString()} ${l.level} ${l.subtask}#${l.attempt} ${l.text}\n`);
      if (++lines > 2000) out.removeChild(out.firstChild);
      if (stick) out.scrollTop = out.scrollHeight;
    });
    es.addEventListener('missed', (ev) => {
      out.append(`… ${JSON.parse(ev.data).dropped} lines rotated out of the raylets' stores …\n`);
    });
    es.addEventListener('end', () => {
      status.textContent = 'the job has ended';
      es.close();
    });
    es.addEventListener('error', (ev) => {
      if (ev.data) {
        status.textContent = JSON.parse(ev.data).error.message;
        es.close();
      } else if (es.readyState === EventSource.CONNECTING) {
        status.textContent = 'reconnecting…';
      }
    });
  }
}
