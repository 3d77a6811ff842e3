// The profiles view: per profile, how its runs spread against its limits (memory peak, CPU as cores and as
// CPU seconds, wall time: histograms from GET /v1/profiles/{name}/distribution, drawn with the vendored uPlot,
// the profile's limit and the recommended value as lines), the runs that ended at a limit (each opens its
// evidence), and a what-if form (POST /v1/profiles/{name}/whatif).
//
// The same rules as app.js, whose helpers this borrows (window.SandboxUI): every string from the API — a
// profile's name, an execution id, a tenant — goes into the page through textContent only; uPlot draws on a
// canvas and sets styles through the CSSOM, which the page's CSP allows. Each chart also says what it shows
// in text (its caption, a table of its buckets) and as data attributes, for keyboards, screen readers and tests.
"use strict";

(() => {
  const ui = window.SandboxUI;
  const { el, code, facts, timeElement, api, ApiError, handleError, showEvidence } = ui;
  const $ = (id) => document.getElementById(id);

  const KIB = 1024;
  const SIZE_FACTORS = { "": 1, k: KIB, m: KIB ** 2, g: KIB ** 3, t: KIB ** 4 };
  const BYTES = new Set(["memory_peak_bytes", "stdout_bytes", "stderr_bytes", "workspace_bytes_written"]);
  const SECONDS = new Set(["wall_seconds", "cpu_seconds"]);
  const TITLES = {
    memory_peak_bytes: "Memory peak",
    cores: "CPU: cores used (CPU seconds ÷ wall seconds)",
    cpu_seconds: "CPU: CPU seconds",
    wall_seconds: "Wall time",
  };
  const CAUSES = {
    oom: "out of memory (OOM kill)",
    wall_timeout: "wall timeout",
    pids_limit: "pids limit",
    write_budget: "workspace write budget",
    output_cap: "output cap",
  };

  const view = {
    profiles: null, // name -> ProfileLimits, once listed
    loaded: null, // the ProfileDistribution shown
    charts: [], // uPlot instances, destroyed before the next ones
    request: 0, // bumped per load: an older answer is dropped
  };

  // ---- formatting --------------------------------------------------------------------------------
  function trim(number, digits) {
    return String(Number(number.toFixed(digits)));
  }

  function formatBytes(bytes) {
    const units = [
      ["TiB", KIB ** 4],
      ["GiB", KIB ** 3],
      ["MiB", KIB ** 2],
      ["KiB", KIB],
    ];
    for (const [unit, size] of units) {
      if (Math.abs(bytes) >= size) return `${trim(bytes / size, 1)} ${unit}`;
    }
    return `${bytes} B`;
  }

  function formatSeconds(s) {
    if (s < 60) return `${trim(s, 2)} s`;
    if (s < 3600) return `${trim(s / 60, 1)} min`;
    return `${trim(s / 3600, 2)} h`;
  }

  // a measure's value in its unit: bytes, seconds, cores, or a count
  function format(measure, value) {
    if (value === null || value === undefined) return "unknown";
    if (BYTES.has(measure)) return formatBytes(value);
    if (SECONDS.has(measure)) return formatSeconds(value);
    if (measure === "cores") return `${trim(value, 2)} ${value === 1 ? "core" : "cores"}`;
    return String(value);
  }

  function percent(fraction) {
    return `${trim(fraction * 100, 1)} %`;
  }

  function color(variable) {
    return getComputedStyle(document.documentElement).getPropertyValue(variable).trim() || "#888";
  }

  // ---- the profiles and their distribution -----------------------------------------------------------
  async function listProfiles() {
    const data = await api("GET", "/v1/profiles");
    view.profiles = new Map(data.profiles.map((p) => [p.name, p]));
    const select = $("profile-name");
    const chosen = select.value;
    select.replaceChildren(
      ...data.profiles.map((p) =>
        el(
          "option",
          { value: p.name },
          p.default ? `${p.name} (default)` : p.error ? `${p.name} (${p.error})` : p.name,
        ),
      ),
    );
    const fallback = data.profiles.find((p) => p.default) || data.profiles[0];
    if (view.profiles.has(chosen)) select.value = chosen;
    else if (fallback) select.value = fallback.name;
  }

  async function load() {
    const name = $("profile-name").value;
    if (!name) return;
    const since = $("profile-since").value;
    const minRuns = $("profile-min-runs");
    if (!minRuns.checkValidity()) {
      minRuns.reportValidity();
      return;
    }
    const epoch = ui.epoch();
    const request = ++view.request;
    $("profile-summary").textContent = "Loading…";
    try {
      const query = new URLSearchParams({ since, min_runs: minRuns.value });
      const path = `/v1/profiles/${encodeURIComponent(name)}/distribution?${query}`;
      const answer = await api("GET", path);
      if (epoch !== ui.epoch() || request !== view.request) return;
      view.loaded = answer;
      render(answer);
    } catch (err) {
      if (epoch !== ui.epoch() || request !== view.request) return;
      $("profile-summary").textContent = "";
      handleError(err, `Loading the runs of ${name} failed`);
    }
  }

  function render(answer) {
    const ended = answer.ended_at_limit;
    $("profile-summary").textContent = ui.visible(
      `${answer.runs} runs of ${answer.profile} ended in the window; ${ended.total} of them at a limit. ` +
        `Lines: the profile's limit now, and the recommended value (from at least ${answer.min_runs} runs).`,
    );
    for (const chart of view.charts) chart.destroy();
    view.charts = [];
    $("charts").replaceChildren(...answer.histograms.map(chartFigure));
    for (const figure of $("charts").children) draw(figure, answer.histograms[Number(figure.dataset.index)]);
    renderAtLimit(ended);
  }

  // ---- one histogram: a figure with a caption, the chart and its buckets as a table ------------------
  function chartFigure(h, index) {
    const uid = `chart-${h.measure}`;
    const lines = [
      ["limit now", h.limit === null ? "none (the profile is gone)" : format(h.measure, h.limit)],
      ["recommended", h.recommended === null ? "none (too few runs)" : format(h.measure, h.recommended)],
      ["largest", format(h.measure, h.max)],
      ["runs", `${h.known} known, ${h.unknown} unknown (not counted as 0)`],
    ];
    const summary = lines.map(([term, value]) => `${term}: ${value}`).join("; ");
    const buckets = el(
      "table",
      { class: "buckets" },
      el("caption", null, "Runs per bucket"),
      el(
        "thead",
        null,
        el(
          "tr",
          null,
          el("th", { scope: "col" }, "From"),
          el("th", { scope: "col" }, "To"),
          el("th", { scope: "col" }, "Runs"),
        ),
      ),
      el(
        "tbody",
        null,
        ...h.counts.map((n, i) =>
          el(
            "tr",
            null,
            el("td", null, format(h.measure, h.edges[i])),
            el("td", null, format(h.measure, h.edges[i + 1])),
            el("td", null, String(n)),
          ),
        ),
      ),
    );
    return el(
      "figure",
      {
        class: "chart",
        id: uid,
        "data-index": index,
        "data-measure": h.measure,
        "data-limit": h.limit ?? "",
        "data-recommended": h.recommended ?? "",
        "data-known": h.known,
        "data-unknown": h.unknown,
        "aria-labelledby": `${uid}-title`,
      },
      el("h3", { id: `${uid}-title` }, TITLES[h.measure] || h.measure),
      el("div", { class: "plot", role: "img", "aria-label": `${TITLES[h.measure] || h.measure}: ${summary}` }),
      el(
        "figcaption",
        null,
        el("span", { class: "key key-limit" }, "limit now "),
        el("strong", { class: "limit-value" }, lines[0][1]),
        " · ",
        el("span", { class: "key key-recommended" }, "recommended "),
        el("strong", { class: "recommended-value" }, lines[1][1]),
        h.recommended_rule ? el("span", { class: "label" }, " (", code(h.recommended_rule), ")") : null,
        ` · largest ${lines[2][1]} · ${lines[3][1]}`,
      ),
      el("details", null, el("summary", null, "Buckets as a table"), buckets),
    );
  }

  function draw(figure, h) {
    const plot = figure.querySelector(".plot");
    const width = Math.max(320, Math.floor(plot.getBoundingClientRect().width) || 560);
    const step = h.edges.length > 1 ? h.edges[1] - h.edges[0] : 1;
    const centers = h.counts.map((_, i) => h.edges[i] + step / 2);
    const top = h.edges[h.edges.length - 1];
    const ink = color("--muted");
    const grid = color("--line");
    const bucketOf = (x) => {
      const i = Math.min(h.counts.length - 1, Math.max(0, Math.floor(x / step)));
      return `${format(h.measure, h.edges[i])} – ${format(h.measure, h.edges[i + 1])}`;
    };
    const lines = [
      { key: "limit", value: h.limit, label: "limit", color: color("--bad"), dash: [] },
      { key: "recommended", value: h.recommended, label: "recommended", color: color("--accent"), dash: [6, 4] },
    ];
    const chart = new window.uPlot(
      {
        width,
        height: 220,
        scales: {
          x: { time: false, range: () => [0, top] },
          y: { range: (u, min, max) => [0, Math.max(1, max) * 1.15] },
        },
        axes: [
          {
            stroke: ink,
            grid: { stroke: grid, width: 1 },
            ticks: { stroke: grid },
            // sizes tick at bucket edges, a power of two apart (uPlot's own steps are decimal: 4.8 MiB)
            incrs: BYTES.has(h.measure) ? Array.from({ length: 12 }, (_, i) => step * 2 ** i) : undefined,
            values: (u, splits) => splits.map((v) => format(h.measure, v)),
          },
          {
            stroke: ink,
            grid: { stroke: grid, width: 1 },
            ticks: { stroke: grid },
            values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : "")),
          },
        ],
        series: [
          { label: "Bucket", value: (u, x) => (x === null || x === undefined ? "—" : bucketOf(x)) },
          {
            label: "Runs",
            stroke: color("--accent"),
            fill: color("--bar"),
            width: 1,
            paths: window.uPlot.paths.bars({ size: [0.9, Infinity] }),
            points: { show: false },
          },
        ],
        legend: { show: true },
        hooks: { draw: [(u) => drawLines(u, lines)] },
      },
      [centers, h.counts],
      plot,
    );
    view.charts.push(chart);
    figure.dataset.drawn = "true";
  }

  // The limit and recommended lines, drawn on the chart's canvas after its bars (a canvas is no DOM: the
  // caption says the same in text, and the figure where each line is: data-limit-x, in canvas pixels).
  function drawLines(u, lines) {
    const figure = u.root.closest("figure");
    const ctx = u.ctx;
    const ratio = window.devicePixelRatio || 1;
    const { left, top, width, height } = u.bbox;
    lines.forEach((line, i) => {
      if (line.value === null || line.value === undefined) return;
      const x = Math.round(u.valToPos(line.value, "x", true));
      ctx.save();
      ctx.strokeStyle = line.color;
      ctx.fillStyle = line.color;
      ctx.lineWidth = 2 * ratio;
      ctx.setLineDash(line.dash.map((d) => d * ratio));
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.font = `${12 * ratio}px system-ui, sans-serif`;
      const right = x > left + width * 0.75;
      ctx.textAlign = right ? "right" : "left";
      ctx.fillText(line.label, x + (right ? -4 : 4) * ratio, top + (14 + 14 * i) * ratio);
      ctx.restore();
      figure.dataset[`${line.key}X`] = x;
      figure.dataset.lineY = Math.round(top + height / 2);
    });
  }

  // ---- the runs that ended at a limit ------------------------------------------------------------
  function renderAtLimit(ended) {
    $("at-limit-count").textContent =
      ended.total > ended.runs.length ? `(${ended.total}; the newest ${ended.runs.length})` : `(${ended.total})`;
    $("at-limit-empty").hidden = ended.total > 0;
    $("at-limit-body").replaceChildren(...ended.runs.map(atLimitRow));
  }

  function atLimitRow(run) {
    const button = el(
      "button",
      { type: "button", class: "evidence-button", "aria-label": `Evidence of ${run.execution_id}` },
      "Evidence",
    );
    const row = el(
      "tr",
      { "data-execution-id": run.execution_id, "data-cause": run.cause },
      el("td", null, timeElement(new Date(run.ended_at * 1000).toISOString())),
      el("td", null, CAUSES[run.cause] || run.cause),
      el("td", null, format(run.measure, run.value)),
      el("td", null, format(run.measure, run.limit)),
      el("td", null, run.tenant),
      el("td", null, code(run.execution_id)),
      el("td", null, button),
    );
    row.addEventListener("click", () => showEvidence(run.execution_id));
    return row;
  }

  // ---- what if -----------------------------------------------------------------------------------
  class FieldError extends Error {
    constructor(input, message) {
      super(message);
      this.input = input;
    }
  }

  // "512m", "2g", "1.5G", "536870912": bytes, as a profile file reads sizes (powers of 1024)
  function parseSize(input) {
    const text = input.value.trim().toLowerCase();
    const match = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/.exec(text);
    if (!match) throw new FieldError(input, `${labelOf(input)}: a size such as 512m, 2g or a number of bytes`);
    return Math.round(Number(match[1]) * SIZE_FACTORS[match[2]]);
  }

  function parseNumber(input) {
    const value = Number(input.value.trim());
    if (!/^\d+(\.\d+)?$/.test(input.value.trim()) || !(value > 0)) {
      throw new FieldError(input, `${labelOf(input)}: a number above 0`);
    }
    return value;
  }

  function labelOf(input) {
    return document.querySelector(`label[for="${input.id}"]`).textContent;
  }

  function given(id) {
    const input = $(id);
    return input.value.trim() === "" ? null : input;
  }

  function proposal() {
    const set = {};
    const memory = given("whatif-memory");
    const cpus = given("whatif-cpus");
    const wall = given("whatif-wall");
    if (memory) set.memory = parseSize(memory);
    if (cpus) set.cpus = parseNumber(cpus);
    if (wall) set.wall_timeout_s = parseNumber(wall);
    if (!Object.keys(set).length)
      throw new FieldError($("whatif-memory"), "Type at least one limit: memory, CPUs or wall timeout.");
    const body = { set, since: $("profile-since").value };
    const nodeCpus = given("whatif-node-cpus");
    const nodeMemory = given("whatif-node-memory");
    if (nodeCpus || nodeMemory) {
      if (!nodeCpus || !nodeMemory)
        throw new FieldError(
          nodeCpus ? $("whatif-node-memory") : $("whatif-node-cpus"),
          "A node size is its CPUs and its memory: both.",
        );
      body.node = { cpus: parseNumber(nodeCpus), memory_bytes: parseSize(nodeMemory) };
    }
    return body;
  }

  async function whatIf() {
    const error = $("whatif-error");
    error.textContent = "";
    const name = $("profile-name").value;
    let body;
    try {
      body = proposal();
    } catch (err) {
      if (!(err instanceof FieldError)) throw err;
      error.textContent = err.message;
      err.input.focus();
      return;
    }
    const epoch = ui.epoch();
    const answerBox = $("whatif-answer");
    answerBox.replaceChildren(el("p", null, "Replaying…"));
    try {
      const answer = await api("POST", `/v1/profiles/${encodeURIComponent(name)}/whatif`, body);
      if (epoch !== ui.epoch()) return;
      answerBox.replaceChildren(...whatIfAnswer(answer));
      answerBox.dataset.runs = answer.runs;
    } catch (err) {
      if (epoch !== ui.epoch()) return;
      answerBox.replaceChildren();
      error.textContent = ui.visible(`The what-if failed: ${err instanceof ApiError ? err.describe() : err}`);
      handleError(err, "The what-if failed");
    }
  }

  // a RunList: how many, and the first of them named, each a button to its evidence
  function runList(list) {
    if (!list.total) return "none";
    const named = list.execution_ids.map((id) =>
      el(
        "li",
        null,
        el("button", { type: "button", class: "link", "data-execution-id": id, "aria-label": `Evidence of ${id}` }, id),
      ),
    );
    for (const item of named) {
      const button = item.firstChild;
      button.addEventListener("click", () => showEvidence(button.dataset.executionId));
    }
    const more = list.total > named.length ? ` (the first ${named.length} named)` : "";
    return el(
      "div",
      null,
      `${list.total} run${list.total === 1 ? "" : "s"}${more}`,
      el("ul", { class: "runs" }, ...named),
    );
  }

  function headroom(used) {
    if (!used) return "—";
    const shares = `used p50 ${percent(used.p50)}, p95 ${percent(used.p95)}, max ${percent(used.max)} of it`;
    return `${shares} (headroom at p95: ${percent(1 - used.p95)})`;
  }

  const LIMIT_MEASURE = { memory: "memory_peak_bytes", wall_timeout_s: "wall_seconds", pids: "pids_peak" };

  function whatIfAnswer(answer) {
    const parts = [el("p", { class: "help" }, `${answer.runs} runs of ${answer.profile} replayed.`)];
    for (const replay of answer.limits) {
      const measure = LIMIT_MEASURE[replay.key] || replay.key;
      parts.push(
        el(
          "article",
          {
            class: "replay",
            "data-key": replay.key,
            "data-would-meet": replay.would_meet.total,
            "data-within": replay.within,
          },
          el("h3", null, `${replay.key}: ${format(measure, replay.current)} → ${format(measure, replay.proposed)}`),
          facts([
            [`Would meet it (${replay.kills ? "ended as" : "cut as"} ${replay.ends_as})`, runList(replay.would_meet)],
            ["Of those, ended there already", String(replay.already)],
            ["Cannot be known", runList(replay.unknown)],
            ["Known to stay within", String(replay.within)],
            ["Headroom of those", headroom(replay.used_of_limit)],
          ]),
        ),
      );
    }
    if (answer.cpu) {
      const cpu = answer.cpu;
      parts.push(
        el(
          "article",
          { class: "replay", "data-key": "cpus", "data-slower": cpu.slower.total },
          el("h3", null, `cpus: ${cpu.current} → ${cpu.proposed}`),
          facts([
            ["Slower (used more cores: throttled)", runList(cpu.slower)],
            ["Of those, would time out (an estimate)", runList(cpu.would_time_out_estimated)],
            ["Cannot be known", runList(cpu.unknown)],
            ["Headroom", headroom(cpu.used_of_limit)],
          ]),
        ),
      );
    }
    if (answer.node) {
      const node = answer.node;
      const gain = node.gain > 0 ? `+${node.gain}` : String(node.gain);
      parts.push(
        el(
          "p",
          { class: "node", "data-current": node.current, "data-proposed": node.proposed },
          `A node of ${trim(node.node.cpus, 2)} CPUs and ${formatBytes(node.node.memory_bytes)} holds ` +
            `${node.current} runs at once now, ${node.proposed} with this change (${gain}).`,
        ),
      );
    }
    if (answer.notes.length)
      parts.push(el("ul", { class: "notes" }, ...answer.notes.map((note) => el("li", null, note))));
    return parts;
  }

  // ---- wiring ------------------------------------------------------------------------------------
  async function open() {
    try {
      if (view.profiles === null) await listProfiles();
      if (!view.loaded) await load();
    } catch (err) {
      handleError(err, "Loading the profiles failed");
    }
  }

  function reset() {
    view.request += 1;
    view.profiles = null;
    view.loaded = null;
    for (const chart of view.charts) chart.destroy();
    view.charts = [];
    $("profile-name").replaceChildren();
    $("charts").replaceChildren();
    $("at-limit-body").replaceChildren();
    $("whatif-answer").replaceChildren();
    $("profile-summary").textContent = "";
    $("whatif-error").textContent = "";
  }

  $("profile-form").addEventListener("submit", (event) => {
    event.preventDefault(); // the forms are never sent: the data calls carry the token in a header
    load();
  });
  $("profile-name").addEventListener("change", load);
  $("profile-since").addEventListener("change", load);
  $("whatif-form").addEventListener("submit", (event) => {
    event.preventDefault();
    whatIf();
  });
  document.addEventListener("sandbox:view", (event) => {
    if (event.detail.view === "profiles") open();
  });
  document.addEventListener("sandbox:signout", reset);
  if (ui.signedIn() && ui.currentView() === "profiles") open();
})();
