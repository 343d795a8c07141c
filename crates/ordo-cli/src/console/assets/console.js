// The Ordo console's page: polls the JSON API every two seconds and draws
// what it answers. Everything from Redis (keys, errors, payloads) is put on
// the page as text, never as markup.
"use strict";

const POLL_MS = 2000;
const CHART_POINTS = 150; // five minutes at one point per poll

const state = {
  status: null,
  actions: false,
  statusAt: 0, // local time the status was read
  previousHandled: null, // { at, byGroup: Map }
  rates: new Map(), // "category\u0000group" -> handled per second
  history: [], // handled per second over every group, one per poll
  halted: { page: 0, q: "" },
  partitions: { page: 0, q: "", category: "" },
  dlqCategory: "",
  dlq: { page: 0, q: "" },
  key: null, // { category, key, group }
  inspected: null,
};

const $ = (id) => document.getElementById(id);

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function link(text, href) {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  return a;
}

const count = (n) => Number(n || 0).toLocaleString("en-US");

// The Redis server's clock now, from the last status read.
function serverNow() {
  if (!state.status) return Date.now();
  return state.status.server_time_ms + (Date.now() - state.statusAt);
}

function ago(ms) {
  const seconds = Math.max(0, Math.round((serverNow() - ms) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

function keyHref(category, key, group) {
  const query = new URLSearchParams({ category, key, group: group || "" });
  return `#key?${query}`;
}

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function notice(text, kind) {
  const box = $("notice");
  box.textContent = text;
  box.className = kind || "";
  box.hidden = !text;
}

// ------------------------------------------------------------ routing

function currentRoute() {
  const hash = location.hash.slice(1) || "overview";
  const [view, query] = hash.split("?");
  return { view, params: new URLSearchParams(query || "") };
}

function route() {
  const { view, params } = currentRoute();
  const known = ["overview", "halted", "partitions", "dlq", "key"];
  const shown = known.includes(view) ? view : "overview";
  for (const name of known) $(`view-${name}`).hidden = name !== shown;
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.view === shown);
  }
  if (shown === "key") {
    state.key = { category: params.get("category") || "", key: params.get("key") || "", group: params.get("group") || "" };
    state.inspected = null;
    $("key-title").textContent = `${state.key.category}:${state.key.key}`;
  }
  refreshView();
}

// ------------------------------------------------------------ status

async function refreshStatus() {
  try {
    const data = await api("/api/status");
    state.status = data.status;
    state.statusAt = Date.now();
    state.actions = data.actions;
    $("redis").textContent = data.redis;
    $("mode").textContent = data.actions ? "actions allowed" : "read-only";
    $("token-bar").hidden = !data.actions;
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    rates(data.status);
    renderOverview(data.status);
    if ($("notice").className === "error" && $("notice").dataset.source === "status") notice("");
  } catch (error) {
    notice(`Cannot read the status: ${error.message}`, "error");
    $("notice").dataset.source = "status";
  }
}

// Handled per second per group, from the growth of each group's handled
// count between two reads (a reaped partition takes its count with it:
// a drop counts as nothing handled).
function rates(status) {
  const now = Date.now();
  const byGroup = new Map();
  for (const category of status.categories) {
    for (const group of category.groups) {
      byGroup.set(`${category.category}\u0000${group.group}`, group.handled || 0);
    }
  }
  let total = 0;
  const previous = state.previousHandled;
  if (previous) {
    const seconds = (now - previous.at) / 1000;
    for (const [name, handled] of byGroup) {
      const before = previous.byGroup.get(name);
      const rate = before === undefined || seconds <= 0 ? 0 : Math.max(0, handled - before) / seconds;
      state.rates.set(name, rate);
      total += rate;
    }
    state.history.push(total);
    if (state.history.length > CHART_POINTS) state.history.shift();
  }
  state.previousHandled = { at: now, byGroup };
  $("tile-rate").textContent = previous ? total.toFixed(1) : "–";
  drawChart();
}

function drawChart() {
  const canvas = $("chart");
  const g = canvas.getContext("2d");
  const { width, height } = canvas;
  g.clearRect(0, 0, width, height);
  const points = state.history;
  const top = Math.max(1, ...points);
  g.strokeStyle = "#dde2e8";
  g.fillStyle = "#5d6773";
  g.font = "11px system-ui, sans-serif";
  for (const fraction of [0, 0.5, 1]) {
    const y = height - 16 - fraction * (height - 28);
    g.beginPath();
    g.moveTo(40, y);
    g.lineTo(width, y);
    g.stroke();
    g.fillText((top * fraction).toFixed(top * fraction < 10 ? 1 : 0), 4, y + 4);
  }
  if (points.length < 2) return;
  const step = (width - 44) / (CHART_POINTS - 1);
  const x0 = width - step * (points.length - 1);
  g.strokeStyle = "#2456a6";
  g.lineWidth = 2;
  g.beginPath();
  points.forEach((value, i) => {
    const x = x0 + i * step;
    const y = height - 16 - (value / top) * (height - 28);
    if (i === 0) g.moveTo(x, y);
    else g.lineTo(x, y);
  });
  g.stroke();
  g.lineWidth = 1;
}

function renderOverview(status) {
  const categories = status.categories;
  const partitions = categories.reduce((n, c) => n + c.partitions, 0);
  const lag = categories.reduce((n, c) => n + c.lag, 0);
  $("tile-categories").textContent = count(categories.length);
  $("tile-partitions").textContent = count(partitions);
  $("tile-lag").textContent = count(lag);
  $("tile-halted").textContent = count(status.halted.length);
  $("tile-halted").classList.toggle("bad", status.halted.length > 0);
  const badge = $("halted-count");
  badge.textContent = String(status.halted.length);
  badge.className = status.halted.length > 0 ? "badge bad" : "badge ok";

  const groups = $("groups").tBodies[0];
  groups.replaceChildren();
  for (const category of categories) {
    const rows = category.groups.length ? category.groups : [null];
    for (const group of rows) {
      const row = groups.insertRow();
      row.dataset.category = category.category;
      if (group && group.halted > 0) row.className = "halted";
      cell(row, category.category);
      cell(row, count(category.partitions), "n");
      cell(row, group ? group.group : "—");
      cell(row, group ? count(group.instances.filter((i) => i.live).length) : "", "n");
      cell(row, group ? count(group.owned) : "", "n");
      cell(row, group ? count(group.lag) : "", "n");
      cell(row, group ? count(group.pending) : "", "n");
      cell(row, group ? count(group.halted) : "", "n");
      const rate = group ? state.rates.get(`${category.category}\u0000${group.group}`) : undefined;
      cell(row, rate === undefined ? "" : rate.toFixed(1), "n");
    }
  }

  const instances = $("instances").tBodies[0];
  instances.replaceChildren();
  for (const category of categories) {
    for (const group of category.groups) {
      for (const instance of group.instances) {
        const row = instances.insertRow();
        cell(row, instance.instance, "mono");
        cell(row, group.group);
        cell(row, category.category);
        cell(row, count(instance.owns), "n");
        cell(row, instance.live ? "yes" : "NO (stalled or gone)");
      }
    }
  }

  const warnings = $("warnings");
  warnings.replaceChildren();
  for (const warning of status.warnings) {
    const item = document.createElement("li");
    item.textContent = warning;
    warnings.appendChild(item);
  }
  fillCategories($("partitions-category"), "partitions");
  fillCategories($("dlq-category"), "dlq");
}

function fillCategories(select, which) {
  const names = state.status.categories.map((c) => c.category);
  const current = [...select.options].map((o) => o.value);
  if (names.join("\u0000") === current.join("\u0000")) return;
  const chosen = select.value;
  select.replaceChildren(...names.map((name) => new Option(name, name)));
  if (names.includes(chosen)) select.value = chosen;
  if (which === "partitions") state.partitions.category = select.value;
  else state.dlqCategory = select.value;
}

// ------------------------------------------------------------ views

async function refreshView() {
  const { view } = currentRoute();
  try {
    if (view === "halted") await renderHalted();
    else if (view === "partitions") await renderPartitions();
    else if (view === "dlq") await renderDeadLetters();
    else if (view === "key") await renderKey();
  } catch (error) {
    notice(error.message, "error");
  }
}

async function renderHalted() {
  const query = new URLSearchParams({ q: state.halted.q, page: state.halted.page, per_page: 50 });
  const page = await api(`/api/halted?${query}`);
  const body = $("halted").tBodies[0];
  body.replaceChildren();
  for (const halt of page.items) {
    const row = body.insertRow();
    row.className = "halted";
    cell(row, halt.category);
    cell(row, halt.parked ? `${halt.key} (parked)` : halt.key, "mono");
    cell(row, halt.group);
    cell(row, halt.head, "mono");
    cell(row, halt.attempts, "n");
    cell(row, ago(halt.halted_at_ms));
    cell(row, halt.error, "error");
    cell(row, "").appendChild(link("Inspect", keyHref(halt.category, halt.key, halt.group)));
  }
  $("halted-empty").hidden = page.total > 0;
  pager("halted", page);
}

async function renderPartitions() {
  const category = $("partitions-category").value;
  if (!category) return;
  const query = new URLSearchParams({ category, q: state.partitions.q, page: state.partitions.page, per_page: 50 });
  const page = await api(`/api/partitions?${query}`);
  const body = $("partitions").tBodies[0];
  body.replaceChildren();
  for (const partition of page.items) {
    for (const position of partition.groups) {
      const row = body.insertRow();
      if (position.halted) row.className = "halted";
      cell(row, "").appendChild(link(partition.key, keyHref(category, partition.key, position.group)));
      cell(row, position.group);
      cell(row, position.owner || "none", "mono");
      cell(row, position.generation ?? "", "n");
      cell(row, count(position.lag), "n");
      cell(row, count(position.pending), "n");
      cell(row, position.halted ? "HALTED" : position.lag + position.pending > 0 ? "working" : "drained");
      cell(row, partition.idle_ms === null ? "" : ago(serverNow() - partition.idle_ms));
    }
  }
  pager("partitions", page);
}

async function renderDeadLetters() {
  const category = $("dlq-category").value;
  if (!category) return;
  const query = new URLSearchParams({ category, q: state.dlq.q, page: state.dlq.page, per_page: 50 });
  const page = await api(`/api/dlq?${query}`);
  const body = $("dlq").tBodies[0];
  body.replaceChildren();
  for (const letter of page.items) {
    const row = body.insertRow();
    cell(row, letter.key ?? "(plain)", "mono");
    cell(row, letter.group);
    cell(row, letter.message.type);
    cell(row, letter.attempts, "n");
    cell(row, letter.error, "error");
    cell(row, JSON.stringify(letter.message.envelope && letter.message.envelope.payload), "mono");
    const actions = cell(row, "");
    if (state.actions && letter.key !== null) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "Replay this key's letters";
      button.addEventListener("click", () =>
        act("replay", { category, key: letter.key, group: letter.group }));
      actions.appendChild(button);
    }
  }
  $("dlq-empty").hidden = page.total > 0;
  pager("dlq", page);
}

async function renderKey() {
  const { category, key, group } = state.key;
  const inspected = await api(`/api/inspect?${new URLSearchParams({ category, key, group })}`);
  state.inspected = inspected;
  const fields = [
    ["Partition", `${inspected.category}:${inspected.key}`],
    ["Handler", inspected.group],
    ["State", inspected.halted
      ? `HALTED ${ago(inspected.halt.halted_at_ms)} by ${inspected.halt.owner} after ${inspected.halt.attempts} attempts${inspected.halt.parked ? " (parked)" : ""}`
      : inspected.lag + inspected.pending > 0 ? "working" : "drained"],
    ["Owner", inspected.owner ? `${inspected.owner} (generation ${inspected.generation})` : "none"],
    ["Lag", count(inspected.lag)],
    ["Pending", count(inspected.pending)],
    // Pending holds the head and what the owner read ahead of it.
    ["Waiting behind the head", inspected.halted ? count(inspected.lag + Math.max(0, inspected.pending - 1)) : "—"],
    ["Lanes", inspected.lanes.join(", ") || "none"],
  ];
  if (inspected.halted) {
    fields.push(["Error", inspected.halt.error]);
    fields.push(["Head", inspected.halt.head]);
  }
  if (inspected.head) fields.push(["Type", inspected.head.type || "unknown"]);
  const list = $("key-fields");
  list.replaceChildren();
  for (const [name, value] of fields) {
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    dd.textContent = value;
    dd.id = `key-${name.toLowerCase().replaceAll(" ", "-")}`;
    list.append(dt, dd);
  }
  $("key-payload-title").textContent = inspected.halted ? "Halted head" : "Next message";
  $("key-payload").textContent = inspected.head
    ? JSON.stringify(inspected.head.envelope, null, 2)
    : "(none: caught up)";
  $("key-actions").hidden = !(state.actions && inspected.halted);
}

function pager(name, page) {
  const pages = Math.max(1, Math.ceil(page.total / page.per_page));
  $(`${name}-total`).textContent = `${count(page.total)} found`;
  $(`${name}-page`).textContent = ` page ${page.page + 1} of ${pages} `;
  $(`${name}-prev`).disabled = page.page === 0;
  $(`${name}-next`).disabled = page.page + 1 >= pages;
}

// ------------------------------------------------------------ actions

async function act(action, body) {
  const token = $("token").value.trim();
  if (!token) {
    notice("Enter the console token first (ORDO_CONSOLE_TOKEN).", "error");
    $("token").focus();
    return;
  }
  const what = action === "replay" ? `Replay the dead letters of ${body.category}:${body.key}?`
    : `${action[0].toUpperCase()}${action.slice(1)} head ${body.head} of ${body.category}:${body.key} (${body.group})?`;
  if (!window.confirm(what)) return;
  try {
    const done = await api(`/api/${action}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
    const text = action === "replay"
      ? `Replayed ${done.replayed.length} dead letters to ${body.category}:${body.key}.`
      : `${action === "dead-letter" ? "Dead-lettered" : action === "skip" ? "Skipped" : "Retried"} ${done.head} of ${done.category}:${done.key}.`;
    notice(text, "");
    await refreshStatus();
    await refreshView();
  } catch (error) {
    notice(`${action} refused: ${error.message}`, "error");
    await refreshView();
  }
}

// ------------------------------------------------------------ wiring

function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

function wire() {
  const token = sessionStorage.getItem("ordo-console-token");
  if (token) $("token").value = token;
  $("token").addEventListener("input", () => sessionStorage.setItem("ordo-console-token", $("token").value));
  $("halted-search").addEventListener("input", debounce((event) => {
    state.halted = { page: 0, q: event.target.value };
    refreshView();
  }, 250));
  $("partitions-search").addEventListener("input", debounce((event) => {
    state.partitions.q = event.target.value;
    state.partitions.page = 0;
    refreshView();
  }, 250));
  $("partitions-category").addEventListener("change", () => {
    state.partitions.page = 0;
    refreshView();
  });
  $("dlq-search").addEventListener("input", debounce((event) => {
    state.dlq = { page: 0, q: event.target.value };
    refreshView();
  }, 250));
  $("dlq-category").addEventListener("change", () => {
    state.dlq.page = 0;
    refreshView();
  });
  for (const name of ["halted", "partitions", "dlq"]) {
    $(`${name}-prev`).addEventListener("click", () => { state[name].page -= 1; refreshView(); });
    $(`${name}-next`).addEventListener("click", () => { state[name].page += 1; refreshView(); });
  }
  for (const button of document.querySelectorAll("#key-actions button")) {
    button.addEventListener("click", () => {
      const inspected = state.inspected;
      if (!inspected || !inspected.halted) return;
      act(button.dataset.action, {
        category: inspected.category,
        key: inspected.key,
        group: inspected.group,
        head: inspected.halt.head,
      });
    });
  }
  window.addEventListener("hashchange", route);
}

async function tick() {
  await refreshStatus();
  await refreshView();
}

wire();
refreshStatus().then(route);
setInterval(tick, POLL_MS);
