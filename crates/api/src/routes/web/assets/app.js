// Warden console: the live timeline of a task page, read from the API's event stream
// (/v1/tasks/{id}/events, the session cookie authenticates it); times in the reader's zone;
// copy buttons; the new-task form's fields for the chosen kind. Everything untrusted is
// inserted with textContent, never as HTML. The CSP allows this file and nothing inline.
'use strict';
// Installable: the worker caches the static shell only (see /sw.js). Browsers allow it on
// https and on localhost.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('/sw.js').catch(function () {});
}

// One format for times everywhere: `2026-12-01 14:19 CET` (the server writes the same shape
// in UTC), relative ones as `5 min ago`.
const Times = (function () {
  const pad = (n) => String(n).padStart(2, '0');
  function zone(date) {
    try {
      const part = new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' })
        .formatToParts(date).find((p) => p.type === 'timeZoneName');
      return part ? part.value : '';
    } catch (e) { return ''; }
  }
  function absolute(date) {
    return date.getFullYear() + '-' + pad(date.getMonth() + 1) + '-' + pad(date.getDate()) + ' ' +
      pad(date.getHours()) + ':' + pad(date.getMinutes()) + ' ' + zone(date);
  }
  function clock(date) {
    return pad(date.getHours()) + ':' + pad(date.getMinutes()) + ':' + pad(date.getSeconds());
  }
  function relative(date, now) {
    const delta = now - date;
    const seconds = Math.round(Math.abs(delta) / 1000);
    let amount;
    if (seconds < 45) return 'just now';
    if (seconds < 3600) amount = Math.round(seconds / 60) + ' min';
    else if (seconds < 86400) amount = Math.round(seconds / 3600) + ' h';
    else if (seconds < 2592000) {
      const days = Math.round(seconds / 86400);
      amount = days + (days === 1 ? ' day' : ' days');
    } else return absolute(date).slice(0, 10);
    return delta >= 0 ? amount + ' ago' : 'in ' + amount;
  }
  function duration(ms) {
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + ' min ' + pad(Math.floor(ms / 1000) % 60) + ' s';
    return Math.floor(ms / 3600000) + ' h ' + pad(Math.floor(ms / 60000) % 60) + ' min';
  }
  function refresh() {
    const now = Date.now();
    document.querySelectorAll('time[data-at]').forEach(function (element) {
      const date = new Date(element.getAttribute('datetime'));
      if (isNaN(date)) return;
      if (element.dataset.at === 'relative') {
        element.textContent = relative(date, now);
        element.title = absolute(date);
      } else {
        element.textContent = absolute(date);
      }
    });
  }
  refresh();
  setInterval(refresh, 30000);
  return { absolute: absolute, clock: clock, duration: duration };
})();

// Copy buttons: hidden in the page as served (they need this script), shown here.
(function () {
  // What happened, said beside the button (whose name stays "Copy …") and to screen readers.
  function copied(button, text) {
    let note = button.nextElementSibling;
    if (!note || !note.classList.contains('copy-note')) {
      note = document.createElement('span');
      note.className = 'copy-note';
      note.setAttribute('role', 'status');
      button.after(note);
    }
    note.textContent = text;
    clearTimeout(note.timer);
    note.timer = setTimeout(function () { note.textContent = ''; }, 3000);
  }
  // Without the clipboard API (plain HTTP to another machine): select the text to copy.
  function select(button) {
    const target = button.previousElementSibling;
    if (!target) return;
    const range = document.createRange();
    range.selectNodeContents(target);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    copied(button, 'Selected: press Ctrl+C');
  }
  document.querySelectorAll('button.copy[data-copy]').forEach(function (button) {
    button.hidden = false;
    button.addEventListener('click', function () {
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(button.dataset.copy)
          .then(function () { copied(button, 'Copied'); }, function () { select(button); });
      } else {
        select(button);
      }
    });
  });
})();

// The new-task form: only the fields of the chosen kind are shown (and sent).
(function () {
  const form = document.getElementById('new-task');
  if (!form) return;
  function show() {
    const checked = form.querySelector('input[name=kind]:checked');
    const kind = checked ? checked.value : 'question';
    form.querySelectorAll('[data-kinds]').forEach(function (element) {
      const shown = element.dataset.kinds.split(' ').includes(kind);
      element.hidden = !shown;
      element.querySelectorAll('input, textarea, select').forEach(function (field) {
        field.disabled = !shown;
      });
    });
  }
  form.querySelectorAll('input[name=kind]').forEach(function (radio) {
    radio.addEventListener('change', show);
  });
  show();
})();

(function () {
  const list = document.getElementById('timeline');
  if (!list) return;
  const task = list.dataset.task;
  const rendered = list.dataset.updated;
  const connection = document.getElementById('connection');
  const status = list.dataset.status;
  const started = new Map();
  const asked = new Map();
  let finished = false;
  let recheck = null;

  const types = ['task_started', 'model_requested', 'model_responded', 'model_retrying',
    'model_fallback', 'agent_message', 'tool_started', 'tool_finished', 'policy_denied',
    'tool_call_rejected', 'submission_rejected', 'status_changed', 'task_finished',
    'redaction_failed', 'message_queued', 'message_delivered', 'context_compacted',
    'egress_connection', 'gate_decided', 'review_finished', 'check_started', 'check_finished',
    'publication_step'];

  function setState(state, text) {
    if (!connection) return;
    connection.dataset.state = state;
    connection.textContent = text;
  }

  function time(at) {
    const date = new Date(at);
    return isNaN(date) ? '' : Times.clock(date);
  }

  // How long since `from` (a Date.parse), as the page writes durations.
  function took(from, at) {
    return from ? ' (' + Times.duration(Date.parse(at) - from) + ')' : '';
  }

  function tokens(n) {
    return n >= 10000 ? (n / 1000).toFixed(0) + 'k' : n >= 1000 ? (n / 1000).toFixed(1) + 'k' : String(n);
  }

  function line(event, at) {
    switch (event.type) {
      case 'task_started':
        return 'started · model ' + event.model + ' · ' +
          event.manifest.map((m) => m.repo + '@' + m.commit.slice(0, 12)).join(', ');
      case 'model_requested':
        asked.set(event.turn, Date.parse(at));
        return 'turn ' + event.turn + ': asking ' + event.model;
      case 'model_responded':
        return 'turn ' + event.turn + ': ' + event.tool_calls + ' tool call' +
          (event.tool_calls === 1 ? '' : 's') + ' (' + tokens(event.input_tokens) + ' in, ' +
          tokens(event.output_tokens) + ' out)' + took(asked.get(event.turn), at);
      case 'model_retrying':
        return event.model + ': ' + event.reason + '; retry ' + event.attempt + ' in ' +
          event.delay_ms + ' ms';
      case 'model_fallback': return event.from + ' failed (' + event.reason + '); using ' + event.to;
      case 'agent_message': return 'agent: ' + event.text;
      case 'tool_started':
        started.set(event.call_id, Date.parse(at));
        return '→ ' + event.summary;
      case 'tool_finished':
        return (event.ok ? '✓ ' : '✗ ') + event.summary + took(started.get(event.call_id), at) +
          (event.note ? ': ' + event.note : '');
      case 'policy_denied': return '✗ ' + event.tool + ' denied: ' + event.reason;
      case 'tool_call_rejected':
        return '✗ ' + event.tool + ' call rejected (' + event.consecutive + ' in a row): ' +
          event.reason;
      case 'submission_rejected':
        return '✗ submission ' + event.attempt + ' rejected:\n- ' + event.errors.join('\n- ');
      case 'status_changed': return 'status: ' + event.status;
      case 'task_finished': return 'finished: ' + event.status + ' (' + event.outcome + ')';
      case 'redaction_failed': return '! an event was withheld: redacting secrets from it failed';
      case 'message_queued':
        return '✉ ' + event.author + ' (message ' + event.seq + ', read at the next turn): ' + event.text;
      case 'message_delivered':
        return '✉ message ' + event.seq + ' reached the agent (turn ' + event.turn + ')';
      case 'context_compacted':
        return '◆ context compacted (' + event.attempt + '): about ' + tokens(event.tokens_before) +
          ' → ' + tokens(event.tokens_after) + ' tokens' + (event.shrunk ? '' : ', still above the trigger');
      case 'check_started': return '▸ check started: ' + event.command;
      case 'check_finished': {
        const how = event.reused ? ' (an earlier run on the same tree)'
          : ' (' + Times.duration(event.duration_ms) + ')';
        if (event.exit_code === 0) return '✓ check passed: ' + event.command + how;
        return '✗ check ' + (event.exit_code === null || event.exit_code === undefined
          ? 'killed or not run' : 'failed, exit ' + event.exit_code) + ': ' + event.command + how;
      }
      case 'publication_step': {
        const step = event.step === 'pull_request' ? 'pull request' : event.step;
        const mark = event.state === 'done' ? '✓ ' : event.state === 'failed' ? '✗ ' : '⇪ ';
        return mark + 'publication: ' + step + ' ' + event.state +
          (event.detail ? ' · ' + event.detail : '');
      }
      case 'gate_decided': return '◆ risk gate (' + event.stage + '): ' + event.level + ' → ' + event.action;
      case 'review_finished':
        return '◆ review ' + event.round + ': ' + event.verdict + ' (' + event.findings +
          ' findings, ' + event.blocking + ' blocking)';
      default: return event.type;
    }
  }

  function bad(event) {
    return (event.type === 'tool_finished' && !event.ok) || event.type === 'policy_denied' ||
      event.type === 'tool_call_rejected' || event.type === 'submission_rejected' ||
      (event.type === 'check_finished' && event.exit_code !== 0) ||
      (event.type === 'publication_step' && event.state === 'failed');
  }

  // The page shows the task as it was when rendered; when the stream says its status moved,
  // ask the API whether it differs from that, and reload to show the new state if so.
  function checkForNews() {
    clearTimeout(recheck);
    recheck = setTimeout(function () {
      fetch('/v1/tasks/' + encodeURIComponent(task), { credentials: 'same-origin' })
        .then((response) => response.ok ? response.json() : null)
        .then((body) => { if (body && body.updated_at !== rendered) location.reload(); })
        .catch(() => {});
    }, 250);
  }

  function append(message) {
    let record;
    try { record = JSON.parse(message.data); } catch (e) { return; }
    const event = record.event;
    const item = document.createElement('li');
    item.dataset.seq = record.task_seq;
    if (bad(event)) item.className = 'bad';
    const stamp = document.createElement('span');
    stamp.className = 'at';
    stamp.textContent = time(record.at);
    item.appendChild(stamp);
    item.appendChild(document.createTextNode(line(event, record.at)));
    // A finished check's last lines, folded (open when it failed).
    if (event.type === 'check_finished' && event.output_tail) {
      const details = document.createElement('details');
      details.open = event.exit_code !== 0;
      const summary = document.createElement('summary');
      summary.textContent = 'output (the last lines)';
      const pre = document.createElement('pre');
      pre.textContent = event.output_tail;
      details.appendChild(summary);
      details.appendChild(pre);
      item.appendChild(details);
    }
    list.appendChild(item);
    if (event.type === 'status_changed' || event.type === 'task_finished') checkForNews();
    if (event.type === 'task_finished' && list.dataset.terminal === 'true') {
      finished = true;
    }
  }

  const source = new EventSource('/v1/tasks/' + encodeURIComponent(task) + '/events');
  setState('connecting', 'connecting…');
  // Connected: live while the task runs; a task that waits for a person says so.
  source.onopen = function () {
    if (status === 'waiting_approval') setState('waiting', 'waiting for approval');
    else if (status === 'waiting_input') setState('waiting', 'waiting for your answer');
    else setState('live', 'live');
  };
  source.onerror = function () {
    if (finished || list.dataset.terminal === 'true') {
      // A finished task's stream ends after its last event: nothing more will come.
      source.close();
      setState('closed', 'finished');
      return;
    }
    setState(source.readyState === EventSource.CLOSED ? 'offline' : 'reconnecting',
      source.readyState === EventSource.CLOSED ? 'disconnected: reload the page' : 'reconnecting…');
  };
  types.forEach(function (type) { source.addEventListener(type, append); });
})();
