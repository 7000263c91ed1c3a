/* The instance view: its phase and ranks, what it waits for and until when, the evidence held, the
   last error, and its last transactions as stage bars (the stages of `motorctl timeline`, computed
   by the Controller from the typed timeline). Refetched when the instance's row changes. */
"use strict";

const {escapeHtml: esc, STATE_NAME: NAMES, stateCounts: counts, countsText: countText} = window.MotorFleet;

function durationText(sec) {
  if (sec === null || sec === undefined) return "–";
  return sec < 1 ? `${(sec * 1000).toFixed(1)} ms` : `${sec.toFixed(2)} s`;
}

function clockText(unixSec) {
  return unixSec ? new Date(unixSec * 1000).toLocaleTimeString([], {hour12: false}) : "–";
}

function fact(name, value, field) {
  return `<div><dt>${esc(name)}</dt><dd${field ? ` data-field="${field}"` : ""}>${value}</dd></div>`;
}

function stageBars(txn) {
  const stages = txn.stages;
  if (!stages.length) return `<p class="hint">No stages to draw for ${esc(txn.strategy)}.</p>`;
  const t0 = stages[0].start_unix_sec, t1 = stages[stages.length - 1].end_unix_sec;
  const total = Math.max(t1 - t0, 1e-9);
  const longest = stages.reduce((a, b) => (b.duration_sec > a.duration_sec ? b : a));
  const rows = stages.map((s) => {
    const left = ((s.start_unix_sec - t0) / total) * 100, width = (s.duration_sec / total) * 100;
    const label = `${s.name}: ${durationText(s.duration_sec)}, from +${durationText(s.start_unix_sec - t0)}`;
    return `<span class="stage-name">${esc(s.name)}</span>` +
      `<span class="stage-track" role="img" aria-label="${esc(label)}" title="${esc(label)}">` +
      `<span class="stage-bar${s === longest ? " longest" : ""}" data-stage="${esc(s.name)}" ` +
      `data-left="${left.toFixed(2)}" data-width="${Math.max(width, 0.3).toFixed(2)}"></span></span>` +
      `<span class="stage-time">${durationText(s.duration_sec)}</span>`;
  }).join("");
  return `<div class="stages" data-request="${esc(txn.request_id)}">${rows}</div>` +
    `<p class="hint">longest: ${esc(longest.name)} (${Math.round((100 * longest.duration_sec) / total)}% of the time drawn)</p>`;
}

function outcomeClass(outcome) {
  return "outcome-" + (outcome.startsWith("failed") ? "failed" : outcome.split(":")[0]);
}

function transactionCard(txn) {
  const whole = txn.fault_to_published_sec;
  const took = txn.ended_at_unix_sec ? durationText(txn.ended_at_unix_sec - txn.started_at_unix_sec) : "running";
  const events = txn.events.map((e) =>
    `<tr><td class="num">+${durationText(e.at_unix_sec - txn.started_at_unix_sec)}</td><td>${esc(e.event_kind)}</td>` +
    `<td>${esc(e.name)}${e.target ? ` → ${esc(e.target)}` : ""}</td><td>${esc(e.outcome)}</td>` +
    `<td>${esc(e.detail)}</td></tr>`).join("");
  return `<article class="card txn" data-request="${esc(txn.request_id)}" data-strategy="${esc(txn.strategy)}">` +
    `<h3>${esc(txn.strategy)} ${esc(txn.request_id || "–")} · ` +
    `<span class="${outcomeClass(txn.outcome)}">${esc(txn.outcome)}</span> · started ${clockText(txn.started_at_unix_sec)} · ${took}` +
    `${whole !== null ? ` · ${durationText(whole)} from the first fault observation to publication` : ""}</h3>` +
    stageBars(txn) +
    `<details><summary>${txn.events.length} events${txn.events_cut ? ` (the first ${txn.events_cut} not shown)` : ""}</summary>` +
    `<table><thead><tr><th>at</th><th>kind</th><th>step</th><th>outcome</th><th>detail</th></tr></thead>` +
    `<tbody>${events}</tbody></table></details></article>`;
}

function renderInstance(body, doc) {
  const row = doc.row, rt = doc.runtime;
  const cells = [...row.cells].map((l, i) =>
    `<span class="c ${l}" data-rank="${row.ranks[i]}" data-state="${NAMES[l]}" title="rank ${row.ranks[i]}: ${NAMES[l]}">` +
    `${row.ranks.length <= 64 ? row.ranks[i] : ""}</span>`).join("");
  const now = doc.server_unix_sec;
  const waits = doc.waits.length
    ? `<ul>${doc.waits.map((w) => `<li><b>${esc(w.what.replace(/_/g, " "))}</b> until ${clockText(w.until_unix_sec)} ` +
        `(in ${durationText(Math.max(0, w.until_unix_sec - now))}): ${esc(w.detail)}</li>`).join("")}</ul>`
    : `<p class="hint">Nothing: no collection window, correlation window or backoff is open.</p>`;
  const evidence = doc.evidence.length
    ? `<table><thead><tr><th>rank</th><th>health</th><th>reported</th><th>observed</th><th>detail</th></tr></thead><tbody>` +
      doc.evidence.map((e) => `<tr><td class="num">${e.rank}</td><td>${esc(e.health)}</td><td>${esc(e.kind)}</td>` +
        `<td>${clockText(e.observed_at_unix_sec)}</td><td>${esc(e.detail)}</td></tr>`).join("") + `</tbody></table>`
    : `<p class="hint">No evidence held now (the evidence a round used is in its events below).</p>`;
  const decisions = doc.transactions.flatMap((t) => t.events.filter((e) => e.event_kind === "DECISION" || e.event_kind === "EVIDENCE")
    .map((e) => `<li>${clockText(e.at_unix_sec)} <b>${esc(e.name)}</b> ${esc(e.detail)}</li>`)).slice(-12);
  const restorations = doc.transactions.filter((t) => !["dp_scale_down", "instance_reconfiguration"].includes(t.strategy));
  const txns = doc.transactions.slice().reverse().map(transactionCard).join("") ||
    `<p class="hint">No recovery transaction yet.</p>`;
  body.innerHTML =
    `<dl class="facts">` +
    fact("phase", `<span class="phase phase-${esc(row.phase)}">${esc(row.phase)}</span>`, "phase") +
    fact("alive / original", `${row.alive} / ${row.original}`, "alive") +
    fact("can serve", row.can_serve ? "yes" : `<span class="serve-no">no</span>`, "can_serve") +
    fact("strategy running", esc(row.strategy || "none"), "strategy") +
    fact("fallback strategy", esc(row.fallback_strategy || "–")) +
    fact("gate", row.gate_allowed ? "allowed" : esc(row.gate_reasons.join(", ") || "refused"), "gate") +
    fact("request id", esc(row.request_id || "–")) +
    fact("dead committed", esc(JSON.stringify(rt.dead_committed)), "dead_committed") +
    fact("pending removal", esc(JSON.stringify(rt.pending_removed_ranks))) +
    fact("migrated requests", String(row.migrated_requests), "migrated") +
    fact("reconfiguration attempts", `${row.reconfiguration_attempts}${row.reconfiguration_gave_up ? " (gave up)" : ""}`) +
    fact("generation", String(rt.generation)) +
    `</dl>` +
    `<div class="cells big-cells" role="img" aria-label="ranks: ${esc(countText(counts(row.cells)))}">${cells}</div>` +
    (row.last_error ? `<div class="card"><h3>Last error</h3><p class="error" data-field="last_error">${esc(row.last_error)}</p></div>` : "") +
    `<div class="card"><h3>Waiting for</h3>${waits}</div>` +
    `<div class="card"><h3>Evidence held</h3>${evidence}` +
    (decisions.length ? `<h3>Evidence and decisions of the last rounds</h3><ul>${decisions.join("")}</ul>` : "") + `</div>` +
    `<div class="card"><h3>Restorations</h3>${restorations.length
      ? `<ul>${restorations.map((t) => `<li>${esc(t.strategy)} ${esc(t.request_id)}: ${esc(t.outcome)}</li>`).join("")}</ul>`
      : `<p class="hint">None recorded.</p>`}</div>` +
    `<h3>Transactions (newest first)</h3>${txns}`;
  // Placed through the CSSOM: the page's Content-Security-Policy refuses inline style attributes.
  for (const bar of body.querySelectorAll(".stage-bar")) {
    bar.style.left = `${bar.dataset.left}%`;
    bar.style.width = `${bar.dataset.width}%`;
  }
}

class InstanceView {
  constructor(title, body) {
    this.title = title;
    this.body = body;
    this.instanceId = null;
    this._inFlight = false;
    this._again = false;
    this.loads = 0;
  }

  show(instanceId) {
    this.instanceId = instanceId;
    this.title.textContent = `Instance ${instanceId}`;
    this.body.innerHTML = `<p class="hint">loading…</p>`;
    this.refresh();
  }

  hide() {
    this.instanceId = null;
  }

  /* One request at a time; a change during it asks for one more. */
  async refresh() {
    if (this.instanceId === null) return;
    if (this._inFlight) {
      this._again = true;
      return;
    }
    this._inFlight = true;
    const wanted = this.instanceId;
    try {
      const resp = await fetch(`/ui/api/instance?instance_id=${wanted}`, {cache: "no-store"});
      const doc = await resp.json();
      if (wanted !== this.instanceId) return;
      if (!resp.ok) {
        this.body.innerHTML = `<p class="error">${esc(doc.detail || resp.statusText)}</p>`;
      } else {
        renderInstance(this.body, doc);
        this.loads += 1;
        this.body.dataset.loads = String(this.loads);
      }
    } catch (err) {
      this.body.insertAdjacentHTML("afterbegin", `<p class="error">could not load: ${esc(err)}</p>`);
    } finally {
      this._inFlight = false;
      if (this._again) {
        this._again = false;
        this.refresh();
      }
    }
  }
}

window.MotorInstance = {InstanceView, renderInstance, durationText};
