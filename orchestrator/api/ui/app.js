// The approvals page: sign in with an approver (or admin) token, decide pending approvals, watch
// executions change live, read an execution's evidence. Plain browser JavaScript, no dependencies.
// The profiles view (profiles.js, with the vendored uPlot) is the page's second view: this file owns the
// sign-in, the views and the evidence, and lends profiles.js its helpers (window.SandboxUI, at the end).
//
// Safety rules this file keeps:
//  * Everything shown comes from the API and may be attacker-controlled (a command string is whatever
//    an agent sent). The DOM is built with createElement + textContent / append(string) only: data is
//    never parsed as HTML. (The page's CSP also requires Trusted Types, so an innerHTML would throw.)
//  * The token lives in sessionStorage (this tab only) and goes out solely as an Authorization header
//    on same-origin fetches: never in a URL, never in a cookie, never through a redirect.
"use strict";

(() => {
  const TOKEN_KEY = "sandbox-orchestrator.token";
  const EXECUTIONS_LIMIT = 50;
  const STREAM_SILENCE_MS = 45000; // the service sends a keep-alive every 15 s
  const RETRY_FIRST_MS = 1000;
  const RETRY_MAX_MS = 30000;
  const DECISION_LABELS = { approve: "Approve", approve_for_session: "Approve for session", deny: "Deny" };

  const $ = (id) => document.getElementById(id);

  const state = {
    token: null,
    epoch: 0, // bumped at each sign-in and sign-out: late answers of an older epoch are dropped
    approvals: new Map(), // approval_id -> { item, node, deadline (performance.now() clock) }
    executions: new Map(), // execution_id -> ExecutionView
    rows: new Map(), // execution_id -> <tr>
    stream: null, // AbortController of the open /v1/events fetch
    evidenceFor: null, // the execution whose evidence is shown
    uid: 0,
  };

  // ---- DOM: the only way this script creates elements ------------------------------------------
  // el("p", { class: "x" }, "text", child) — strings become Text nodes, never markup.
  // Characters that would change how text reads without being seen — bidi overrides, zero-width and
  // control characters (the list of orchestrator/domain/text.py's UNSAFE_RANGES) — are shown as \u{…}
  // marks, so a command cannot hide part of itself from an approver. Tab and newline stay.
  const UNSAFE = /(?![\t\n])[\u{0}-\u{1f}\u{7f}-\u{9f}\u{ad}\u{600}-\u{605}\u{61c}\u{6dd}\u{70f}\u{890}-\u{891}\u{8e2}\u{180e}\u{200b}-\u{200f}\u{2028}-\u{202e}\u{2060}-\u{2064}\u{2066}-\u{206f}\u{d800}-\u{dfff}\u{feff}\u{fff9}-\u{fffb}\u{110bd}\u{110cd}\u{13430}-\u{1343f}\u{1bca0}-\u{1bca3}\u{1d173}-\u{1d17a}\u{e0001}\u{e0020}-\u{e007f}]/gu;
  function visible(text) {
    return String(text).replace(UNSAFE, (ch) => `\\u{${ch.codePointAt(0).toString(16).toUpperCase()}}`);
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(typeof child === "string" ? visible(child) : child);
    }
    return node;
  }

  function say(text, kind) {
    const status = $("status");
    status.textContent = text;
    status.dataset.kind = kind || "info";
  }

  // ---- the API -----------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, message, details) {
      super(message);
      this.status = status;
      this.code = code;
      this.details = details;
    }
    describe() {
      return this.status ? `${this.message} (${this.code}, HTTP ${this.status})` : this.message;
    }
  }

  function requestInit(method, extraHeaders) {
    return {
      method,
      headers: { Authorization: `Bearer ${state.token}`, ...extraHeaders },
      cache: "no-store",
      credentials: "omit", // no cookies either way
      redirect: "error", // the token is never replayed to wherever a redirect points
      referrerPolicy: "no-referrer",
    };
  }

  // Every error body is {"error": {"code", "message", ...}}: show the API's own words.
  async function errorOf(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      // not JSON (a proxy in between?): fall back to the status line
    }
    const error = body && typeof body === "object" ? body.error : null;
    if (error && typeof error.message === "string") {
      return new ApiError(response.status, String(error.code), error.message, error.details);
    }
    return new ApiError(response.status, `HTTP.${response.status}`, response.statusText || "request failed");
  }

  async function api(method, path, body) {
    const init = requestInit(method, { Accept: "application/json" });
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, "NETWORK", `the service did not answer (${err.message})`);
    }
    if (!response.ok) throw await errorOf(response);
    return response.json();
  }

  // A 401 once signed in: the token was withdrawn (or the service restarted without it).
  function handleError(err, what) {
    if (err instanceof ApiError && err.status === 401 && state.token !== null) {
      signOut(`Signed out: the service no longer accepts this token (${err.message}).`);
      return;
    }
    say(`${what}: ${err instanceof ApiError ? err.describe() : err}`, "error");
  }

  // ---- formatting --------------------------------------------------------------------------------
  // What a request asks, in one line: the command string, the argv, or the tool's target.
  function describeRequest(request) {
    if (!request || typeof request !== "object") return "(no request)";
    if (typeof request.command === "string") return request.command;
    if (Array.isArray(request.argv)) return JSON.stringify(request.argv);
    if (Array.isArray(request.command)) return JSON.stringify(request.command);
    if (request.path) return `${request.tool} ${request.path}`;
    if (request.skill) return `${request.tool} ${request.skill}`;
    if (request.target_session_id) return `${request.tool} → ${request.target_session_id}`;
    return String(request.tool || "(unknown tool)");
  }

  function permissionsOf(request) {
    const p = (request && request.sandbox_permissions) || {};
    const parts = [`network: ${p.network ? "yes" : "no"}`, `writable root: ${p.writable_root ? "yes" : "no"}`];
    const mounts = Array.isArray(p.extra_mounts) ? p.extra_mounts : [];
    parts.push(mounts.length ? `extra mounts: ${mounts.join(", ")}` : "extra mounts: none");
    if (request && request.tty) parts.push("tty: yes");
    if (request && request.timeout_ms) parts.push(`timeout: ${formatMs(request.timeout_ms)}`);
    return parts.join("; ");
  }

  function formatMs(ms) {
    if (typeof ms !== "number") return "—";
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  }

  function formatLeft(ms) {
    const total = Math.max(0, Math.ceil(ms / 1000));
    const h = Math.floor(total / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = String(total % 60).padStart(2, "0");
    return h ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
  }

  function timeElement(iso) {
    const when = new Date(iso);
    const text = Number.isNaN(when.getTime()) ? String(iso) : when.toLocaleTimeString();
    return el("time", { datetime: iso, title: iso }, text);
  }

  function facts(pairs) {
    const dl = el("dl", { class: "facts" });
    for (const [term, value] of pairs) {
      dl.append(el("dt", null, term), el("dd", null, value === undefined || value === null ? "—" : value));
    }
    return dl;
  }

  function code(text) {
    return el("code", null, String(text));
  }

  // The CI job an ask is a step of (item.ci: the request's context.ci with its job key), as fact rows.
  function ciFacts(ci) {
    if (!ci || typeof ci !== "object") return [];
    const run = `${ci.provider} ${ci.repository} run ${ci.run_id}` + (ci.attempt ? ` attempt ${ci.attempt}` : "");
    const job = (ci.workflow ? `${ci.workflow} / ${ci.job}` : ci.job) + (ci.job_id ? ` (${ci.job_id})` : "");
    const step = [ci.stage && `stage ${ci.stage}`, ci.step, ci.action && `uses ${ci.action}`].filter(Boolean);
    const origin = [ci.ref, ci.event && `on ${ci.event}`, ci.actor && `by ${ci.actor}`].filter(Boolean);
    return [
      ["CI run", run],
      ["CI job", el("span", null, job, el("span", { class: "label" }, " key "), code(String(ci.job_key).slice(0, 16)))],
      ["CI step", step.length ? step.join(", ") : null],
      ["Ref", origin.length ? origin.join(" ") : null],
    ];
  }

  function scriptFact(request) {
    const s = request && request.script;
    if (!s || typeof s !== "object") return [];
    const keyed = typeof s.hmac_sha256 === "string";
    const digest = code(String(keyed ? s.hmac_sha256 : s.sha256).slice(0, 16));
    const kind = keyed ? "hmac-sha256" : "sha256";
    return [["Script", el("span", null, code(s.path), ` (${s.bytes} bytes, ${kind} `, digest, "…)")]];
  }

  // ---- pending approvals -------------------------------------------------------------------------
  function approvalCard(item) {
    const request = item.request || {};
    const uid = ++state.uid;
    const countdown = el("span", { class: "countdown" }, "…");
    const reason = el("input", { id: `reason-${uid}`, type: "text", maxlength: 1000, autocomplete: "off" });
    const outcome = el("p", { class: "outcome", role: "status" });
    const buttons = Object.entries(DECISION_LABELS).map(([decision, label]) =>
      el("button", { type: "button", class: `decide-${decision}`, "data-decision": decision }, label),
    );
    const node = el(
      "li",
      { class: "approval", "data-approval-id": item.approval_id, "aria-labelledby": `approval-${uid}` },
      el("h3", { id: `approval-${uid}` }, el("span", { class: "label" }, "Asks to run "), code(describeRequest(request))),
      facts([
        ["Risk", el("span", { class: `risk risk-${item.risk_level || "unknown"}` }, item.risk_level || "unknown")],
        ["Risk reasons", item.risk_reasons],
        ["Policy", item.policy_reason],
        ["Matched rule", item.matched_rule],
        ["Profile", item.profile || request.profile || "(none asked: the default profile)"],
        ["Tenant", item.tenant],
        ["Subject", item.subject],
        ...ciFacts(item.ci),
        ["Session", (request.context && request.context.session_id) || "none"],
        ["Tool", request.tool],
        ...scriptFact(request),
        ["Working directory", request.cwd || "(the workspace root)"],
        ["Environment keys", (request.env_keys || []).length ? request.env_keys.join(", ") : "none"],
        ["Permissions asked", permissionsOf(request)],
        ["Time left", el("span", null, countdown, " (until ", timeElement(item.deadline), ")")],
        ["Execution", code(item.execution_id)],
      ]),
      el("details", null, el("summary", null, "Full sanitized request"), el("pre", null, JSON.stringify(request, null, 2))),
      el(
        "div",
        { class: "decide" },
        el("label", { for: `reason-${uid}` }, "Reason (recorded in the evidence)"),
        reason,
        el("div", { class: "buttons" }, ...buttons),
      ),
      outcome,
    );
    const entry = { item, node, countdown, deadline: 0 };
    for (const button of buttons) {
      button.addEventListener("click", () => decide(entry, button.dataset.decision, reason, buttons, outcome));
    }
    return entry;
  }

  async function decide(entry, decision, reasonInput, buttons, outcome) {
    const what = `“${describeRequest(entry.item.request)}”`;
    const epoch = state.epoch;
    for (const b of buttons) b.disabled = true;
    outcome.className = "outcome";
    outcome.textContent = `${DECISION_LABELS[decision]}: sending…`;
    try {
      const answer = await api("POST", `/v1/approvals/${encodeURIComponent(entry.item.approval_id)}`, {
        decision,
        reason: reasonInput.value,
      });
      if (epoch !== state.epoch) return;
      const text = `${what}: ${answer.outcome} by ${answer.approver}.`;
      outcome.textContent = visible(text);
      say(text, "ok");
    } catch (err) {
      if (epoch !== state.epoch) return;
      const text = `${DECISION_LABELS[decision]} ${what} failed: ${err instanceof ApiError ? err.describe() : err}`;
      outcome.className = "outcome error";
      outcome.textContent = visible(text);
      handleError(err, `${DECISION_LABELS[decision]} ${what} failed`);
      // 409 (someone or the timeout answered first) and 404: the card is stale, the refresh drops it.
      // Anything else (403 self-approval, 429, network): the ask still waits; let the approver retry.
      if (!(err instanceof ApiError) || (err.status !== 409 && err.status !== 404)) {
        for (const b of buttons) b.disabled = false;
      }
    }
    refreshApprovals();
  }

  // Keyed update: cards already shown stay (with whatever reason is being typed); new ones are
  // added; answered ones go.
  async function loadApprovals() {
    const epoch = state.epoch;
    const data = await api("GET", "/v1/approvals");
    if (epoch !== state.epoch) return;
    const list = $("approvals");
    const seen = new Set();
    for (const item of data.items) {
      seen.add(item.approval_id);
      let entry = state.approvals.get(item.approval_id);
      if (!entry) {
        entry = approvalCard(item);
        state.approvals.set(item.approval_id, entry);
        list.append(entry.node);
      }
      entry.item = item;
      // seconds_left is measured on the service's clock: a skewed local clock cannot shift it
      entry.deadline = performance.now() + item.seconds_left * 1000;
    }
    for (const [id, entry] of state.approvals) {
      if (!seen.has(id)) {
        entry.node.remove();
        state.approvals.delete(id);
      }
    }
    $("approvals-count").textContent = `(${state.approvals.size})`;
    $("approvals-empty").hidden = state.approvals.size > 0;
    tick();
  }

  // One refresh at a time; calls made meanwhile fold into one more run.
  let approvalsRun = null;
  let approvalsAgain = false;
  function refreshApprovals() {
    if (approvalsRun) {
      approvalsAgain = true;
      return approvalsRun;
    }
    approvalsRun = (async () => {
      try {
        do {
          approvalsAgain = false;
          await loadApprovals();
        } while (approvalsAgain);
      } catch (err) {
        handleError(err, "Loading the pending approvals failed");
      } finally {
        approvalsRun = null;
      }
    })();
    return approvalsRun;
  }

  function tick() {
    const now = performance.now();
    for (const entry of state.approvals.values()) {
      const left = entry.deadline - now;
      entry.countdown.textContent =
        left > 0 ? `${formatLeft(left)} left` : "expired: the service records the timeout";
      entry.node.classList.toggle("expired", left <= 0);
    }
  }

  // ---- recent executions -------------------------------------------------------------------------
  async function loadExecutions() {
    const epoch = state.epoch;
    try {
      const page = await api("GET", `/v1/executions?limit=${EXECUTIONS_LIMIT}`);
      if (epoch !== state.epoch) return;
      state.executions = new Map(page.items.map((view) => [view.execution_id, view]));
      renderExecutions();
    } catch (err) {
      if (epoch === state.epoch) handleError(err, "Loading the executions failed");
    }
  }

  function upsertExecution(view) {
    const known = state.executions.get(view.execution_id);
    if (known && Date.parse(known.updated_at) > Date.parse(view.updated_at)) return; // older news
    state.executions.set(view.execution_id, view);
    renderExecutions();
  }

  function renderExecutions() {
    const sorted = [...state.executions.values()].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
    for (const view of sorted.slice(EXECUTIONS_LIMIT)) state.executions.delete(view.execution_id);
    const shown = sorted.slice(0, EXECUTIONS_LIMIT);
    const body = $("executions-body");
    for (const [id, row] of state.rows) {
      if (!state.executions.has(id)) {
        row.remove();
        state.rows.delete(id);
      }
    }
    shown.forEach((view, index) => {
      let row = state.rows.get(view.execution_id);
      if (!row) {
        row = executionRow(view.execution_id);
        state.rows.set(view.execution_id, row);
      }
      fillRow(row, view);
      if (body.children[index] !== row) body.insertBefore(row, body.children[index] || null);
    });
    $("executions-empty").hidden = shown.length > 0;
  }

  function executionRow(id) {
    const row = el("tr", { "data-execution-id": id });
    for (let i = 0; i < 8; i += 1) row.append(el("td"));
    const button = el("button", { type: "button", class: "evidence-button", "aria-label": `Evidence of ${id}` }, "Evidence");
    row.append(el("td", null, button));
    // the whole row is a click target; the button makes it reachable by keyboard
    row.addEventListener("click", () => showEvidence(id));
    return row;
  }

  function fillRow(row, view) {
    const result = view.result || null;
    const error = view.error || (result && result.error) || null;
    let decision = view.decision || "—";
    if (view.approval && view.approval.outcome) {
      decision += ` → ${view.approval.outcome}${view.approval.approver ? ` (${view.approval.approver})` : ""}`;
    }
    const final = ["succeeded", "failed", "refused", "cancelled"].includes(view.state);
    const cells = [
      timeElement(view.created_at),
      code(describeRequest(view.request)),
      `${view.tenant} / ${view.subject}`,
      el("span", { class: `state state-${view.state}` }, view.state),
      result && result.exit_code !== null && result.exit_code !== undefined ? String(result.exit_code) : "—",
      result ? formatMs(result.duration_ms) : final ? "—" : "…",
      decision,
      error ? code(error.code) : "—",
    ];
    cells.forEach((content, i) => {
      row.cells[i].replaceChildren(content);
      row.cells[i].className = `col-${i}`;
    });
    if (error) row.cells[7].title = error.message;
    else row.cells[7].removeAttribute("title");
  }

  // ---- evidence ----------------------------------------------------------------------------------
  async function showEvidence(id) {
    const epoch = state.epoch;
    const first = state.evidenceFor !== id;
    state.evidenceFor = id;
    const section = $("evidence");
    const list = $("evidence-records");
    section.hidden = false;
    $("evidence-id").textContent = visible(id);
    if (first) list.replaceChildren(el("li", null, "Loading…"));
    try {
      const page = await api("GET", `/v1/evidence?execution_id=${encodeURIComponent(id)}`);
      if (epoch !== state.epoch || state.evidenceFor !== id) return;
      list.replaceChildren(...page.records.map(evidenceItem));
      if (!page.records.length) list.append(el("li", null, "No records (yet)."));
    } catch (err) {
      if (epoch !== state.epoch || state.evidenceFor !== id) return;
      list.replaceChildren(el("li", { class: "error" }, err instanceof ApiError ? err.describe() : String(err)));
      handleError(err, "Loading the evidence failed");
    }
    if (first) $("evidence-title").focus();
  }

  function evidenceItem(record) {
    const pairs = [["When", timeElement(record.ts)]];
    for (const key of ["decision", "approver", "reason", "status", "error_code"]) {
      if (record[key] !== null && record[key] !== undefined) pairs.push([key.replace("_", " "), String(record[key])]);
    }
    return el(
      "li",
      { "data-event": record.event },
      el("h3", null, `#${record.seq} `, code(record.event)),
      facts(pairs),
      el("details", null, el("summary", null, "Record as written"), el("pre", null, JSON.stringify(record, null, 2))),
    );
  }

  // ---- live updates: GET /v1/events ----------------------------------------------------------------
  // EventSource cannot send an Authorization header, so the stream is read with fetch() and parsed
  // here (the text/event-stream format: "field: value" lines, an empty line ends an event, lines
  // starting with ":" are comments such as the service's keep-alives).
  function sseParser(onEvent) {
    let pending = "";
    let skipLineFeed = false; // the last chunk ended in "\r": a "\n" starting this one is the same break
    let type = "";
    let data = [];
    return (chunk) => {
      if (skipLineFeed && chunk.startsWith("\n")) chunk = chunk.slice(1);
      skipLineFeed = chunk.endsWith("\r");
      pending += chunk;
      const lines = pending.split(/\r\n|\n|\r/);
      pending = lines.pop(); // an unfinished line waits for the next chunk
      for (const line of lines) {
        if (line === "") {
          if (data.length) onEvent(type || "message", data.join("\n"));
          type = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") type = value;
        else if (field === "data") data.push(value);
      }
    };
  }

  function onEvent(type, data) {
    if (type === "reload") {
      // the service dropped events for this listener (it fell behind): start over from the lists
      refreshApprovals();
      loadExecutions();
      return;
    }
    if (type !== "execution") return;
    let view;
    try {
      view = JSON.parse(data);
    } catch {
      return;
    }
    if (!view || typeof view.execution_id !== "string") return;
    upsertExecution(view);
    if (view.state === "pending_approval" || state.approvals.has(view.execution_id)) refreshApprovals();
    if (state.evidenceFor === view.execution_id) showEvidence(view.execution_id);
  }

  function setLive(kind, text) {
    const live = $("live");
    live.dataset.state = kind;
    live.textContent = `Live updates: ${text}`;
  }

  async function readStream(controller, connection) {
    const response = await fetch("/v1/events", {
      ...requestInit("GET", { Accept: "text/event-stream" }),
      signal: controller.signal,
    });
    if (!response.ok) throw await errorOf(response);
    connection.opened = true;
    setLive("on", "on");
    // (re)connected: changes made while no stream was open were not seen; fetch the lists again
    refreshApprovals();
    loadExecutions();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const feed = sseParser(onEvent);
    // a connection that went quiet past the keep-alive interval is dead: drop it, reconnect
    let watchdog = setTimeout(() => controller.abort(), STREAM_SILENCE_MS);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        clearTimeout(watchdog);
        watchdog = setTimeout(() => controller.abort(), STREAM_SILENCE_MS);
        feed(value);
      }
    } finally {
      clearTimeout(watchdog);
    }
  }

  // Reconnects with exponential backoff (1 s doubling to 30 s, with jitter), reset by a connection
  // that opened; stops on sign-out (the epoch changed) or when the token is refused.
  async function runStream(epoch) {
    let delay = RETRY_FIRST_MS;
    let everOpened = false;
    while (epoch === state.epoch) {
      const controller = new AbortController();
      const connection = { opened: false };
      state.stream = controller;
      try {
        setLive("connecting", "connecting…");
        await readStream(controller, connection);
      } catch (err) {
        if (epoch !== state.epoch) return;
        if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
          setLive("off", `off (${err.message})`);
          handleError(err, "Live updates");
          return;
        }
      }
      if (epoch !== state.epoch) return;
      if (connection.opened) delay = RETRY_FIRST_MS;
      // the lists are fetched when a stream opens; if none ever did, show them anyway
      if (!everOpened && !connection.opened && delay === RETRY_FIRST_MS) loadExecutions();
      everOpened = everOpened || connection.opened;
      const wait = delay + Math.floor(Math.random() * 250);
      setLive("retry", `lost; reconnecting in ${Math.ceil(wait / 1000)} s`);
      await new Promise((resolve) => setTimeout(resolve, wait));
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  }

  // ---- views: approvals (this file) and profiles (profiles.js), one shown at a time ---------------
  // The URL's fragment names the view (#profiles), so a reload keeps it; nothing else goes in the URL.
  const VIEWS = { approvals: "Approvals", profiles: "Profiles" };
  function currentView() {
    const name = location.hash.slice(1);
    return Object.hasOwn(VIEWS, name) ? name : "approvals";
  }

  function applyView() {
    const shown = currentView();
    for (const name of Object.keys(VIEWS)) {
      $(`view-${name}`).hidden = name !== shown;
      if (name === shown) $(`nav-${name}`).setAttribute("aria-current", "page");
      else $(`nav-${name}`).removeAttribute("aria-current");
    }
    document.title = `${VIEWS[shown]} · sandbox orchestrator`;
    if (state.token !== null) document.dispatchEvent(new CustomEvent("sandbox:view", { detail: { view: shown } }));
  }
  window.addEventListener("hashchange", applyView);

  // ---- sign-in / sign-out ------------------------------------------------------------------------
  function showSignedIn(signedIn) {
    $("sign-in").hidden = signedIn;
    $("signed-in").hidden = !signedIn;
    $("session").hidden = !signedIn;
    if (signedIn) applyView();
  }

  async function signIn(token) {
    const error = $("sign-in-error");
    error.textContent = "";
    // fetch() refuses header values outside Latin-1 with a confusing message; tokens are plain ASCII
    if (!/^[\x21-\x7e]+$/.test(token)) {
      error.textContent = "A token is printable ASCII without spaces.";
      return;
    }
    state.epoch += 1;
    const epoch = state.epoch;
    state.token = token;
    try {
      await loadApprovals(); // also proves the token is an approver's or an admin's
    } catch (err) {
      if (epoch !== state.epoch) return;
      state.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      error.textContent = visible(`Sign-in failed: ${err instanceof ApiError ? err.describe() : err}`);
      $("token").focus();
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    showSignedIn(true);
    say("Signed in.", "ok");
    runStream(epoch);
  }

  function signOut(message) {
    state.epoch += 1;
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    if (state.stream) state.stream.abort();
    state.stream = null;
    state.approvals.clear();
    state.executions.clear();
    state.rows.clear();
    state.evidenceFor = null;
    $("approvals").replaceChildren();
    $("executions-body").replaceChildren();
    $("evidence-records").replaceChildren();
    $("evidence").hidden = true;
    setLive("off", "off");
    document.dispatchEvent(new CustomEvent("sandbox:signout"));
    showSignedIn(false);
    say(message || "Signed out.", message ? "error" : "info");
    $("token").focus();
  }

  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault(); // the form is never sent: the token goes only into a header
    signIn($("token").value.trim());
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("evidence-close").addEventListener("click", () => {
    state.evidenceFor = null;
    $("evidence").hidden = true;
    $("evidence-records").replaceChildren();
  });
  $("evidence-title").tabIndex = -1;
  setInterval(tick, 1000);

  // What profiles.js borrows: the DOM and API helpers, the evidence view, the sign-in epoch (an answer
  // that arrives after a sign-out or a new sign-in is dropped). Frozen: nothing can swap one out.
  window.SandboxUI = Object.freeze({
    el,
    code,
    facts,
    timeElement,
    visible,
    say,
    api,
    ApiError,
    handleError,
    showEvidence,
    currentView,
    epoch: () => state.epoch,
    signedIn: () => state.token !== null,
  });

  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved);
  else $("token").focus();
})();
