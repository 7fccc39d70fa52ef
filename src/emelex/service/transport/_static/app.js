// The Host's web page: plain DOM, no framework, no build step.
//
// Everything the Host sends (model answers, tool arguments and results, titles, error
// messages) reaches the page as text nodes only: no module assigns innerHTML, outerHTML
// or insertAdjacentHTML, and none builds attributes from data except through DOM
// properties. Answers are Markdown built node by node (markdown.js: raw HTML stays text,
// only http(s) and mailto links become links). Requests follow docs/service/protocol.md.

import { $, el } from "./dom.js";
import { drafts } from "./drafts.js";
import { markdown } from "./markdown.js";
import { settled } from "./settled.js";
import { Workspace } from "./workspace.js";

const TOKEN_KEY = "emelex.token";
const HISTORY_PAGE = 200;
const HISTORY_PAGES_AT_ONCE = 50; // 10,000 rows; more come one page per click
const MUTATION_TRIES = 3;
const LABELS_KEY = "emelex.labels";
const LABEL_CHARS = 48;
let sessionsCache = []; // the last listSessions answer

// ---------------------------------------------------------------- small helpers

/** A fresh operation reference (getRandomValues works outside secure contexts too). */
function operationRef() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

const positionKey = (p) => (p ? `${p.sourceSequence}.${p.itemIndex}` : "start");
const after = (a, b) =>
  b === null || a.sourceSequence > b.sourceSequence ||
  (a.sourceSequence === b.sourceSequence && a.itemIndex > b.itemIndex);

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function setStatus(node, state, text) {
  node.dataset.state = state;
  node.textContent = text;
}

// ---------------------------------------------------------------- the Host's API

class HostError extends Error {
  constructor(status, type, message) {
    super(`${type}: ${message}`);
    this.status = status;
    this.type = type;
  }
}

const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

async function call(name, body) {
  const headers = { "Content-Type": "application/json" };
  const bearer = token.get();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const response = await fetch(`/v1/op/${encodeURIComponent(name)}`, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    cache: "no-store",
  });
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) {
    const error = (payload && payload.error) || {};
    const failure = new HostError(
      response.status,
      String(error.type || `HTTP ${response.status}`),
      String(error.message || response.statusText),
    );
    // Before any token was tried the panel itself says what is needed: no error yet.
    if (response.status === 401) askForToken(bearer ? failure.message : "");
    throw failure;
  }
  return payload;
}

/** A mutation: a lost answer is retried with the same operation reference, so the Host
 * applies it at most once; an answer from the Host (even an error) is final. */
async function mutate(name, body) {
  const request = { ...body, operation: operationRef() };
  for (let attempt = 1; ; attempt++) {
    try {
      return await call(name, request);
    } catch (error) {
      if (error instanceof HostError || attempt >= MUTATION_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250 * attempt));
    }
  }
}

/** A subscription over WebSocket: calls onUpdate for each update, onFinish once. */
function subscribe(name, request, { onUpdate, onFinish, onOpen }) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/v1/sub/${encodeURIComponent(name)}`);
  let finished = false;
  const finish = (how) => {
    if (finished) return;
    finished = true;
    onFinish(how);
  };
  socket.addEventListener("open", () => {
    const bearer = token.get();
    if (bearer) socket.send(JSON.stringify({ token: bearer }));
    socket.send(JSON.stringify(request));
    if (onOpen) onOpen();
  });
  socket.addEventListener("message", (event) => {
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      finish({ error: { type: "BadFrame", message: "the Host sent a frame that is not JSON" } });
      socket.close();
      return;
    }
    if ("update" in frame) onUpdate(frame.update);
    else if ("end" in frame) finish({ end: frame.end });
    else if ("error" in frame) finish({ error: frame.error });
  });
  socket.addEventListener("close", () => finish({ dropped: true }));
  return { close: () => { finished = true; socket.close(); } };
}

// ---------------------------------------------------------------- invocation labels

/** Words for an invocation instead of its id: the message this tab sent (kept for the
 * tab's life, reloads included), else its kind and the id's last characters. */
const labels = {
  key: (sessionId) => `${LABELS_KEY}.${sessionId}`,

  read(sessionId) {
    try {
      return JSON.parse(sessionStorage.getItem(this.key(sessionId)) || "{}");
    } catch {
      return {};
    }
  },

  remember(sessionId, invocationId, text) {
    if (!invocationId) return;
    const known = this.read(sessionId);
    const words = text.trim().split("\n")[0];
    known[invocationId] = words.length > LABEL_CHARS ? `${words.slice(0, LABEL_CHARS - 1)}…` : words;
    sessionStorage.setItem(this.key(sessionId), JSON.stringify(known));
  },

  of(sessionId, invocationId, work = "invocation") {
    const words = this.read(sessionId)[invocationId];
    return words ? `“${words}”` : `${work} …${String(invocationId).slice(-6)}`;
  },
};

// ---------------------------------------------------------------- token entry

function askForToken(message) {
  token.clear();
  view.close();
  view.sessionId = null; // reopened from the address once the token is in
  $("app").hidden = true;
  $("token-panel").hidden = false;
  $("forget-token").hidden = true;
  const problem = $("token-error");
  problem.textContent = message || "";
  problem.hidden = !message;
  setStatus($("host-status"), "locked", "token needed");
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token.set($("token-input").value.trim());
  $("token-input").value = "";
  start();
});

$("forget-token").addEventListener("click", () => {
  view.close();
  askForToken("");
});

// ---------------------------------------------------------------- sessions

async function loadSessions() {
  const result = await call("listSessions", {});
  const sessions = Array.isArray(result) ? result : result.sessions || [];
  sessionsCache = sessions;
  const list = $("session-list");
  list.replaceChildren(
    ...sessions.map((info) =>
      el(
        "li",
        { dataset: { sessionId: info.id, state: info.state } },
        el(
          "a",
          { href: `#session=${encodeURIComponent(info.id)}`, className: "session-link" },
          el("span", { className: "title" }, info.title || info.id),
          el("span", { className: "meta" }, `${info.agent} · ${info.state}`),
        ),
      ),
    ),
  );
  if (!sessions.length) list.append(el("li", { className: "meta" }, "No sessions yet."));
  markSelected();
  return sessions;
}

/** The sidebar follows the open session's queue (other sessions: on Refresh). */
function showSessionState(sessionId, state) {
  const info = sessionsCache.find((s) => s.id === sessionId);
  if (!info || info.state === state) return;
  info.state = state;
  for (const item of $("session-list").children) {
    if (item.dataset.sessionId !== sessionId) continue;
    item.dataset.state = state;
    item.querySelector(".meta").textContent = `${info.agent} · ${state}`;
  }
}

function selectedFromHash() {
  const match = /^#session=(.+)$/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

function markSelected() {
  for (const item of $("session-list").children) {
    item.classList.toggle("selected", item.dataset.sessionId === view.sessionId);
  }
}

$("refresh-sessions").addEventListener("click", () => loadSessions().catch(report));

$("create-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const created = await mutate("createSession", {
      agent: $("create-agent").value.trim(),
      workspace: $("create-workspace").value.trim(),
      title: $("create-title").value.trim() || null,
    });
    await loadSessions();
    location.hash = `session=${encodeURIComponent(created.session.id)}`;
  } catch (error) {
    report(error);
  }
});

// ---------------------------------------------------------------- one session's view

function renderRow(row) {
  const parts = [];
  if (row.role === "tool") {
    parts.push(
      el("div", { className: "label" }, `result of ${row.toolName || "tool"}`),
      el("pre", { className: "tool-result body" }, row.body),
    );
  } else {
    if (row.thinking) {
      parts.push(
        el(
          "details",
          { className: "reasoning" },
          el("summary", {}, "Reasoning"),
          el("pre", { className: "thinking" }, row.thinking),
        ),
      );
    }
    if (row.body && row.role === "assistant") parts.push(markdown(row.body, "body markdown"));
    else if (row.body) parts.push(el("div", { className: "body" }, row.body));
    for (const toolCall of row.toolCalls) {
      parts.push(
        el(
          "div",
          { className: "tool-call", dataset: { toolCallId: toolCall.id } },
          el("div", { className: "label" }, `calls ${toolCall.name}`),
          el("pre", { className: "arguments" }, pretty(toolCall.arguments)),
        ),
      );
    }
  }
  return el(
    "li",
    { className: `row ${row.role}`, dataset: { position: positionKey(row.position), role: row.role } },
    el("div", { className: "role" }, row.role),
    ...parts,
  );
}

// The Changes and Files panels of the open session (workspace.js).
const workspace = new Workspace({ call, subscribe, el, report });

const view = {
  sessionId: null,
  generation: 0,
  lastPosition: null,
  fence: null,
  nextAfter: null,
  pages: 0,
  queue: [],
  watch: null,
  diagnosticsWatch: null,
  retry: null,
  backoff: 0,

  close() {
    this.generation += 1;
    workspace.close();
    if (this.watch) this.watch.close();
    if (this.diagnosticsWatch) this.diagnosticsWatch.close();
    clearTimeout(this.retry);
    this.watch = this.diagnosticsWatch = this.retry = null;
    drafts.clear();
  },

  async open(sessionId, info) {
    this.close();
    const generation = this.generation;
    Object.assign(this, {
      sessionId, lastPosition: null, fence: null, nextAfter: null, pages: 0, queue: [], backoff: 0,
    });
    markSelected();
    $("session").hidden = false;
    $("session-title").textContent = info ? info.title || info.id : sessionId;
    $("session-meta").textContent = info
      ? `${info.id} · agent ${info.agent} · workspace ${info.workspace}`
      : sessionId;
    $("rows").replaceChildren();
    $("approvals").replaceChildren();
    $("approvals-panel").hidden = true;
    this.renderQueue([]);
    workspace.open(sessionId);
    $("diagnostics").replaceChildren();
    $("diagnostics-count").textContent = "";
    setStatus($("watch-status"), "loading", "loading history");
    try {
      await this.loadHistory(generation, HISTORY_PAGES_AT_ONCE);
    } catch (error) {
      if (generation === this.generation) report(error);
      return;
    }
    if (generation !== this.generation) return;
    this.watchDiagnostics(generation);
    if (this.nextAfter === null) this.startWatch(generation);
  },

  /** Follows history pages under one fence; live watching starts from the last row. */
  async loadHistory(generation, maxPages) {
    for (let page = 0; page < maxPages; page++) {
      const result = await call("history", {
        sessionId: this.sessionId,
        through: this.fence,
        after: this.nextAfter ?? this.lastPosition,
        limit: HISTORY_PAGE,
      });
      if (generation !== this.generation) return;
      this.fence = result.through;
      this.pages += 1;
      this.addRows(result.rows);
      this.nextAfter = result.nextAfter;
      if (this.nextAfter === null) break;
    }
    $("history-info").textContent =
      `history: ${this.pages} page${this.pages === 1 ? "" : "s"} through event ${this.fence}`;
    $("history-more").hidden = this.nextAfter === null;
  },

  addRows(rows) {
    const list = $("rows");
    for (const row of rows) {
      // A resumed watch never repeats a row; this guard keeps a reconnect race harmless.
      if (!after(row.position, this.lastPosition)) continue;
      this.lastPosition = row.position;
      if (row.internal) continue;
      settled.addRow(list, renderRow(row), row.position.sourceSequence);
    }
    list.lastElementChild?.scrollIntoView({ block: "end" });
  },

  startWatch(generation) {
    setStatus($("watch-status"), "connecting", "connecting");
    // A new live watch starts each running draft again from its beginning.
    drafts.clear();
    this.watch = subscribe(
      "watchLive",
      { sessionId: this.sessionId, after: this.lastPosition },
      {
        onOpen: () => {
          if (generation !== this.generation) return;
          this.backoff = 0;
          setStatus($("watch-status"), "live", "live");
        },
        onUpdate: (update) => {
          if (generation === this.generation) this.apply(update);
        },
        onFinish: (how) => {
          if (generation === this.generation) this.watchFinished(generation, how);
        },
      },
    );
  },

  watchFinished(generation, how) {
    this.watch = null;
    if (how.end && how.end.reason === "lagged") {
      // Fell behind the Host's buffer: resume from the cursor, no gap, no duplicate.
      if (how.end.resumeAfter) this.lastPosition = how.end.resumeAfter;
      this.startWatch(generation);
      return;
    }
    if (how.end && how.end.reason === "sessionDeleted") {
      setStatus($("watch-status"), "ended", "session deleted");
      return;
    }
    if (how.error) {
      if (how.error.type === "Unauthorized") {
        this.close();
        askForToken(how.error.message);
        return;
      }
      setStatus($("watch-status"), "ended", "watch refused");
      report(new HostError(0, how.error.type, how.error.message));
    } else {
      setStatus($("watch-status"), "reconnecting", "reconnecting");
    }
    // The Host closed or the connection dropped: watch again from the last cursor.
    this.backoff = Math.min(10000, this.backoff ? this.backoff * 2 : 500);
    this.retry = setTimeout(() => {
      if (generation === this.generation) this.startWatch(generation);
    }, this.backoff);
  },

  apply(update) {
    if (update.kind === "rows") {
      this.addRows(update.rows);
      this.fence = Math.max(this.fence ?? 0, update.through);
      $("history-info").textContent =
        `history: ${this.pages} page${this.pages === 1 ? "" : "s"}, live through event ${this.fence}`;
    } else if (update.kind === "queue") {
      this.renderQueue(update.queue.entries);
      settled.show($("rows"), update.queue.settled || []); // in place, so reloads show them
    } else if (update.kind === "interactions") {
      this.renderApprovals(update.pending);
    } else if (update.kind === "draft") {
      drafts.apply(update);
    } else if (update.kind === "draftCleared") {
      drafts.clear(update.invocationId, update.step);
    }
  },

  renderQueue(entries) {
    this.queue = entries;
    const running = entries.find((entry) => entry.state === "running");
    drafts.keepRunning(running ? running.invocationId : null);
    showSessionState(this.sessionId, running ? "running" : "idle");
    $("stop-button").disabled = !running;
    $("stop-button").dataset.invocationId = running ? running.invocationId : "";
    const list = $("queue");
    list.replaceChildren(
      ...entries.map((entry) =>
        el(
          "li",
          { dataset: { invocationId: entry.invocationId, state: entry.state } },
          el("span", { className: `badge ${entry.state}` }, entry.state),
          " ",
          el("span", { className: "what", title: `${entry.work} ${entry.invocationId}` },
            labels.of(this.sessionId, entry.invocationId, entry.work)),
          " ",
          el(
            "button",
            { type: "button", onclick: () => this.stop(entry.invocationId) },
            entry.state === "running" ? "Stop" : "Remove",
          ),
        ),
      ),
    );
    if (!entries.length) list.append(el("li", { className: "meta" }, "Nothing queued."));
  },

  renderApprovals(pending) {
    const list = $("approvals");
    const existing = new Map(Array.from(list.children, (item) => [item.dataset.interactionId, item]));
    const items = pending.map((interaction) =>
      existing.get(interaction.id) || this.approvalItem(interaction),
    );
    list.replaceChildren(...items);
    $("approvals-panel").hidden = !items.length;
  },

  approvalItem(interaction) {
    const reason = el("input", {
      className: "deny-reason",
      placeholder: "reason for denying (the model sees it)",
    });
    const buttons = [];
    const answer = async (response) => {
      for (const button of buttons) button.disabled = true;
      try {
        await mutate("respond", {
          sessionId: this.sessionId,
          interactionId: interaction.id,
          response,
        });
      } catch (error) {
        for (const button of buttons) button.disabled = false;
        report(error);
      }
    };
    buttons.push(
      el("button", { type: "button", className: "approve", onclick: () => answer({ kind: "approve" }) }, "Approve"),
      el(
        "button",
        {
          type: "button",
          className: "deny",
          onclick: () => answer({ kind: "deny", reason: reason.value.trim() || "denied in the web page" }),
        },
        "Deny",
      ),
    );
    return el(
      "li",
      { className: "approval", dataset: { interactionId: interaction.id } },
      el("div", { className: "label" }, `${interaction.toolCall.name}`),
      interaction.reason ? el("div", { className: "reason" }, interaction.reason) : null,
      el("pre", { className: "arguments" }, pretty(interaction.toolCall.arguments)),
      el("div", { className: "row" }, ...buttons, reason),
    );
  },

  async stop(invocationId) {
    try {
      const receipt = await mutate("stop", { sessionId: this.sessionId, invocationId });
      $("watch-status").title = `stop: ${receipt.outcome}`;
    } catch (error) {
      report(error);
    }
  },

  watchDiagnostics(generation) {
    this.diagnosticsWatch = subscribe(
      "watchDiagnostics",
      { sessionId: this.sessionId },
      {
        onUpdate: (revision) => {
          if (generation === this.generation) this.loadDiagnostics(generation, revision.revision);
        },
        onFinish: (how) => {
          // Dropped with the Host's connection: subscribe again, as the row watch does.
          if (generation !== this.generation || how.error) return;
          setTimeout(() => {
            if (generation === this.generation) this.watchDiagnostics(generation);
          }, 2000);
        },
      },
    );
  },

  async loadDiagnostics(generation, revision) {
    let page;
    try {
      page = await call("diagnostics", {
        sessionId: this.sessionId, through: revision, before: null, limit: 50,
      });
    } catch (error) {
      report(error);
      return;
    }
    if (generation !== this.generation) return;
    $("diagnostics-count").textContent = page.diagnostics.length ? `(${page.diagnostics.length})` : "";
    $("diagnostics").replaceChildren(
      ...page.diagnostics.map((d) =>
        el(
          "li",
          { dataset: { diagnosticId: d.id } },
          el("span", { className: "badge" }, `${d.kind} · ${d.cause.code}`),
          ` ${d.cause.message}`,
          el(
            "div",
            { className: "meta", title: d.invocationId ? `invocation ${d.invocationId}` : "" },
            `${d.invocationId ? labels.of(this.sessionId, d.invocationId) : "no invocation"} · ` +
              new Date(d.recordedAtMs).toLocaleString(),
          ),
        ),
      ),
    );
  },
};

$("history-more").addEventListener("click", async () => {
  const generation = view.generation;
  try {
    await view.loadHistory(generation, 1);
    if (generation === view.generation && view.nextAfter === null && !view.watch) {
      view.startWatch(generation);
    }
  } catch (error) {
    report(error);
  }
});

$("send-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const box = $("send-text");
  const text = box.value;
  if (!text.trim() || !view.sessionId) return;
  $("send-button").disabled = true;
  try {
    const receipt = await mutate("send", { sessionId: view.sessionId, text });
    labels.remember(view.sessionId, receipt.invocationId, text);
    view.renderQueue(view.queue); // the queue may have shown it before the receipt came
    box.value = "";
  } catch (error) {
    report(error);
  } finally {
    $("send-button").disabled = false;
  }
});

$("send-text").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    $("send-form").requestSubmit();
  }
});

$("stop-button").addEventListener("click", () => {
  const invocationId = $("stop-button").dataset.invocationId;
  if (invocationId) view.stop(invocationId);
});

// ---------------------------------------------------------------- start

function report(error) {
  if (error instanceof HostError && error.status === 401) return; // the token panel shows it
  showError(error instanceof Error ? error.message : String(error));
}

async function route() {
  const sessionId = selectedFromHash();
  showError("");
  if (sessionId === null) {
    view.close();
    view.sessionId = null;
    $("session").hidden = true;
    markSelected();
    return;
  }
  if (sessionId === view.sessionId) return;
  let info = sessionsCache.find((s) => s.id === sessionId);
  if (!info) {
    sessionsCache = await loadSessions().catch(() => sessionsCache);
    info = sessionsCache.find((s) => s.id === sessionId);
  }
  await view.open(sessionId, info);
}

async function start() {
  try {
    sessionsCache = await loadSessions();
  } catch (error) {
    if (!(error instanceof HostError && error.status === 401)) {
      setStatus($("host-status"), "down", "unreachable");
      report(error);
    }
    return;
  }
  $("token-panel").hidden = true;
  $("app").hidden = false;
  $("forget-token").hidden = !token.get();
  setStatus($("host-status"), "up", "connected");
  view.sessionId = null;
  await route().catch(report);
}

window.addEventListener("hashchange", () => route().catch(report));
start();
