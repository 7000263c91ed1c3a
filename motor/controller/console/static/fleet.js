/* The fleet view: one row per instance, one cell per original DP rank, coloured by its state.
   Rows arrive whole (`fleet` event) or one at a time (`row` events); an update touches only the
   cells whose letter changed, so a 64 x 256 fleet stays cheap to keep live. */
"use strict";

const RANK_STATES = [
  // letter (the server's motor/controller/console/cells.py STATE_LETTERS), name, what it means
  ["h", "healthy", "serving"],
  ["g", "diagnosing", "querying its all2all mask after a fault (transient)"],
  ["u", "unhealthy", "a survivor of a peer's fault, waiting for the recovery instruction"],
  ["d", "dead", "its executor died, or the round in flight removes it"],
  ["r", "retired", "committed dead: removed from the instance"],
  ["s", "restarting", "a reconfiguration restarts it, or it rebuilds its group"],
];
const STATE_NAME = Object.fromEntries(RANK_STATES.map(([l, n]) => [l, n]));
const DEGRADED_PHASES = new Set(["DECIDING", "WAITING_ENGINE_FAULT", "SCALING_DOWN", "POST_SCALE_CLEANUP",
  "SCALED_DOWN_RUNNING", "RECONFIGURING"]);

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (ch) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[ch]);
}

function stateCounts(cells) {
  const counts = {};
  for (let i = 0; i < cells.length; i++) counts[cells[i]] = (counts[cells[i]] || 0) + 1;
  return counts;
}

function countsText(counts) {
  return RANK_STATES.filter(([l]) => counts[l]).map(([l, n]) => `${counts[l]} ${n}`).join(", ") || "no ranks";
}

function isDegraded(row) {
  return !row.can_serve || DEGRADED_PHASES.has(row.phase) || /[gudrs]/.test(row.cells);
}

function renderLegend(list) {
  list.innerHTML = RANK_STATES.map(([l, n, what]) =>
    `<li><span class="c ${l}" aria-hidden="true"></span><span><b>${n}</b> <span class="hint">${escapeHtml(what)}</span></span></li>`,
  ).join("");
}

class Fleet {
  constructor(container, options = {}) {
    this.container = container;
    this.rows = new Map(); // instance_id -> {row, el, head, cellEls}
    this.onlyDegraded = false;
    this.onChange = options.onChange || (() => {});
    this.timings = {initialRenderMs: null, lastUpdateMs: null, updates: 0};
    container.addEventListener("keydown", (ev) => this._key(ev));
  }

  /* Every row at once: one innerHTML for the whole fleet, then the elements are indexed. */
  setAll(rows) {
    const t0 = performance.now();
    const sorted = rows.slice().sort((a, b) => a.instance_id - b.instance_id);
    this.container.innerHTML = sorted.map((row) => this._rowHtml(row)).join("");
    this.rows.clear();
    for (const el of this.container.children) {
      const id = Number(el.dataset.instance);
      this._index(id, sorted.find((r) => r.instance_id === id), el);
    }
    this._filter();
    this.timings.initialRenderMs = performance.now() - t0;
    this.onChange();
  }

  /* One row changed (or appeared). */
  update(row) {
    const t0 = performance.now();
    const entry = this.rows.get(row.instance_id);
    if (!entry) {
      const holder = document.createElement("div");
      holder.innerHTML = this._rowHtml(row);
      const el = holder.firstElementChild;
      const next = [...this.rows.keys()].filter((id) => id > row.instance_id).sort((a, b) => a - b)[0];
      this.container.insertBefore(el, next === undefined ? null : this.rows.get(next).el);
      this._index(row.instance_id, row, el);
    } else {
      if (entry.row.cells.length !== row.cells.length || entry.row.ranks.join() !== row.ranks.join()) {
        entry.el.querySelector(".cells").innerHTML = this._cellsHtml(row);
        entry.cellEls = entry.el.querySelectorAll(".cells .c");
      } else {
        const before = entry.row.cells;
        for (let i = 0; i < row.cells.length; i++) {
          const letter = row.cells[i];
          if (letter !== before[i]) {
            const cell = entry.cellEls[i];
            cell.className = "c " + letter;
            cell.title = `rank ${row.ranks[i]}: ${STATE_NAME[letter] || letter}`;
            cell.dataset.state = STATE_NAME[letter] || letter;
          }
        }
      }
      entry.head.innerHTML = this._headHtml(row);
      entry.el.className = this._rowClass(row);
      entry.el.setAttribute("aria-label", this._rowLabel(row));
      entry.row = row;
    }
    this._filter(row.instance_id);
    this.timings.lastUpdateMs = performance.now() - t0;
    this.timings.updates += 1;
    this.onChange();
  }

  remove(instanceId) {
    const entry = this.rows.get(instanceId);
    if (entry) {
      entry.el.remove();
      this.rows.delete(instanceId);
      this.onChange();
    }
  }

  setOnlyDegraded(on) {
    this.onlyDegraded = on;
    this._filter();
  }

  summary() {
    const counts = {};
    let degraded = 0, ranks = 0;
    for (const {row} of this.rows.values()) {
      for (const [l, n] of Object.entries(stateCounts(row.cells))) counts[l] = (counts[l] || 0) + n;
      ranks += row.cells.length;
      if (isDegraded(row)) degraded += 1;
    }
    return {instances: this.rows.size, degraded, ranks, counts};
  }

  _index(id, row, el) {
    this.rows.set(id, {row, el, head: el.querySelector(".row-head"), cellEls: el.querySelectorAll(".cells .c")});
  }

  _filter(onlyId) {
    const ids = onlyId === undefined ? [...this.rows.keys()] : [onlyId];
    for (const id of ids) {
      const entry = this.rows.get(id);
      if (entry) entry.el.classList.toggle("hide", this.onlyDegraded && !isDegraded(entry.row));
    }
  }

  _rowClass(row) {
    return "row" + (!row.can_serve ? " down" : isDegraded(row) ? " degraded" : "");
  }

  _rowLabel(row) {
    return `instance ${row.instance_id}, ${row.phase}, ${row.alive} of ${row.original} ranks alive, ` +
      `${row.can_serve ? "serving" : "not serving"}; ranks: ${countsText(stateCounts(row.cells))}`;
  }

  _headHtml(row) {
    const gate = row.gate_allowed ? "" : ` · gate: ${escapeHtml(row.gate_reasons.join(", ") || "refused")}`;
    const running = row.strategy ? ` · running ${escapeHtml(row.strategy)}` : "";
    const waiting = row.waiting.length ? ` · waiting: ${escapeHtml(row.waiting.join(", ").replace(/_/g, " "))}` : "";
    return `<span class="id">instance ${row.instance_id}</span> <span class="phase phase-${escapeHtml(row.phase)}">` +
      `${escapeHtml(row.phase)}</span>` +
      `<span class="meta"><span data-field="alive">${row.alive}/${row.original} alive</span> · ` +
      `<span class="${row.can_serve ? "" : "serve-no"}">${row.can_serve ? "can serve" : "cannot serve"}</span>` +
      `${running}${waiting}${gate}</span>` +
      // The cells in words, for a screen reader reading the link (the cells themselves are hidden to it).
      `<span class="sr">; ranks: ${escapeHtml(countsText(stateCounts(row.cells)))}</span>`;
  }

  _cellsHtml(row) {
    let html = "";
    for (let i = 0; i < row.cells.length; i++) {
      const letter = row.cells[i], name = STATE_NAME[letter] || letter;
      html += `<span class="c ${letter}" data-rank="${row.ranks[i]}" data-state="${name}" title="rank ${row.ranks[i]}: ${name}"></span>`;
    }
    return html;
  }

  _rowHtml(row) {
    return `<div class="${this._rowClass(row)}" role="listitem" data-instance="${row.instance_id}" ` +
      `aria-label="${escapeHtml(this._rowLabel(row))}">` +
      `<a class="row-head" href="#/instance/${row.instance_id}">${this._headHtml(row)}</a>` +
      `<div class="cells" aria-hidden="true">${this._cellsHtml(row)}</div></div>`;
  }

  /* Arrow keys, Home and End move between the visible instances' links. */
  _key(ev) {
    if (!["ArrowDown", "ArrowUp", "Home", "End"].includes(ev.key)) return;
    const heads = [...this.container.querySelectorAll(".row:not(.hide) .row-head")];
    if (!heads.length) return;
    const at = heads.indexOf(document.activeElement);
    let next = ev.key === "Home" ? 0 : ev.key === "End" ? heads.length - 1
      : ev.key === "ArrowDown" ? Math.min(heads.length - 1, at + 1) : Math.max(0, at - 1);
    if (at < 0 && ev.key === "ArrowUp") next = 0;
    heads[next].focus();
    ev.preventDefault();
  }
}

window.MotorFleet = {Fleet, RANK_STATES, STATE_NAME, escapeHtml, stateCounts, countsText, isDegraded, renderLegend};
