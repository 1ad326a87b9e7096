// Warden console: the live timeline of a task page, read from the API's event stream
// (/v1/tasks/{id}/events, the session cookie authenticates it). Everything untrusted is
// inserted with textContent, never as HTML. The CSP allows this file and nothing inline.
'use strict';
// Installable: the worker caches the static shell only (see /sw.js). Browsers allow it on
// https and on localhost.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('/sw.js').catch(function () {});
}
(function () {
  const list = document.getElementById('timeline');
  if (!list) return;
  const task = list.dataset.task;
  const rendered = list.dataset.updated;
  const connection = document.getElementById('connection');
  const started = new Map();
  let finished = false;
  let recheck = null;

  const types = ['task_started', 'model_requested', 'model_responded', 'model_retrying',
    'model_fallback', 'agent_message', 'tool_started', 'tool_finished', 'policy_denied',
    'tool_call_rejected', 'submission_rejected', 'status_changed', 'task_finished',
    'redaction_failed', 'message_queued', 'message_delivered', 'context_compacted',
    'egress_connection', 'gate_decided', 'review_finished'];

  function setState(state, text) {
    if (!connection) return;
    connection.dataset.state = state;
    connection.textContent = text;
  }

  function time(at) {
    const date = new Date(at);
    return isNaN(date) ? '' : date.toLocaleTimeString();
  }

  function tokens(n) {
    return n >= 10000 ? (n / 1000).toFixed(0) + 'k' : n >= 1000 ? (n / 1000).toFixed(1) + 'k' : String(n);
  }

  function line(event, at) {
    switch (event.type) {
      case 'task_started':
        return 'started · model ' + event.model + ' · ' +
          event.manifest.map((m) => m.repo + '@' + m.commit.slice(0, 12)).join(', ');
      case 'model_requested': return 'turn ' + event.turn + ': asking ' + event.model;
      case 'model_responded':
        return 'turn ' + event.turn + ': ' + event.tool_calls + ' tool call' +
          (event.tool_calls === 1 ? '' : 's') + ' (' + tokens(event.input_tokens) + ' in, ' +
          tokens(event.output_tokens) + ' out)';
      case 'model_retrying':
        return event.model + ': ' + event.reason + '; retry ' + event.attempt + ' in ' +
          event.delay_ms + ' ms';
      case 'model_fallback': return event.from + ' failed (' + event.reason + '); using ' + event.to;
      case 'agent_message': return 'agent: ' + event.text;
      case 'tool_started':
        started.set(event.call_id, Date.parse(at));
        return '→ ' + event.summary;
      case 'tool_finished': {
        const from = started.get(event.call_id);
        const took = from ? ' (' + ((Date.parse(at) - from) / 1000).toFixed(1) + ' s)' : '';
        return (event.ok ? '✓ ' : '✗ ') + event.summary + took +
          (event.note ? ': ' + event.note : '');
      }
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
      default: return event.type;
    }
  }

  function bad(event) {
    return (event.type === 'tool_finished' && !event.ok) || event.type === 'policy_denied' ||
      event.type === 'tool_call_rejected' || event.type === 'submission_rejected';
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
    list.appendChild(item);
    if (event.type === 'status_changed' || event.type === 'task_finished') checkForNews();
    if (event.type === 'task_finished' && list.dataset.terminal === 'true') {
      finished = true;
    }
  }

  const source = new EventSource('/v1/tasks/' + encodeURIComponent(task) + '/events');
  setState('connecting', 'connecting…');
  source.onopen = function () { setState('live', 'live'); };
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
