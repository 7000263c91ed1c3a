/* The console's wiring: the live feed (Server-Sent Events from /ui/events, reconnecting on its own),
   the routes (#/ is the fleet, #/instance/N an instance), the standby banner and the summary. */
"use strict";

(function main() {
  const {Fleet, renderLegend, countsText} = window.MotorFleet;
  const {InstanceView} = window.MotorInstance;
  const $ = (id) => document.getElementById(id);
  const fleet = new Fleet($("fleet"), {onChange: () => summary()});
  const instance = new InstanceView($("instance-title"), $("instance-body"));
  const state = {connected: false, leadership: null, events: 0, log: []};
  renderLegend($("legend"));
  $("only-degraded").addEventListener("change", (ev) => fleet.setOnlyDegraded(ev.target.checked));

  function summary() {
    const s = fleet.summary();
    $("summary").textContent = `${s.instances} instances, ${s.degraded} degraded; ${s.ranks} ranks: ${countsText(s.counts)}`;
    $("fleet-empty").hidden = s.instances > 0;
  }

  function setConn(kind, text) {
    const el = $("conn");
    el.dataset.state = kind;
    el.textContent = text;
  }

  function leaderUrl(address) {
    // The leader's gRPC host with this listener's scheme and port: replicas share status_http.port.
    const match = /^\[?([^\]]+?)\]?:\d+$/.exec(address || "");
    if (!match) return null;
    const host = match[1].includes(":") ? `[${match[1]}]` : match[1];
    return `${location.protocol}//${host}${location.port ? ":" + location.port : ""}/ui/`;
  }

  function showLeadership(lead) {
    state.leadership = lead;
    const esc = window.MotorFleet.escapeHtml;
    const who = lead.replica_id ? `replica ${lead.replica_id}` : "this Controller";
    $("replica").textContent = !lead.election_enabled ? `${who} (acts alone)`
      : lead.is_leader ? `${who}: leader, term ${lead.term}` : `${who}: standby`;
    const banner = $("standby");
    if (lead.election_enabled && !lead.is_leader) {
      const url = leaderUrl(lead.leader_address);
      const leader = lead.leader_id
        ? (url ? `<a href="${esc(url)}" id="leader-link">${esc(lead.leader_id)} at ${esc(lead.leader_address)}</a>`
          : `${esc(lead.leader_id)} at ${esc(lead.leader_address)}`) + ` (term ${lead.term})`
        : "not known yet (an election is under way)";
      banner.innerHTML = `<b>This Controller replica is a standby.</b> It does not act; it shows what the leader ` +
        `persisted, every few seconds. The leader is ${leader}.`;
      banner.hidden = false;
    } else {
      banner.hidden = true;
    }
  }

  function note(kind, detail) {
    // Kept for the page's own record of what arrived (tests and people debugging read it).
    state.log.push({at: Date.now(), kind, ...detail});
    if (state.log.length > 2000) state.log.splice(0, state.log.length - 2000);
  }

  let source = null, retryMs = 1000, retryTimer = null;

  function connect() {
    if (source) source.close();
    source = new EventSource("/ui/events");
    source.addEventListener("hello", (ev) => {
      const doc = JSON.parse(ev.data);
      showLeadership(doc.leadership);
      retryMs = 1000;
      state.connected = true;
      setConn("live", "live");
    });
    source.addEventListener("fleet", (ev) => {
      const doc = JSON.parse(ev.data);
      state.events += 1;
      const t0 = performance.now();
      fleet.setAll(doc.rows);
      for (const row of doc.rows) note("row", {instance_id: row.instance_id, phase: row.phase, cells: row.cells});
      state.fleetRenderMs = performance.now() - t0;
      if (instance.instanceId !== null) instance.refresh();
    });
    source.addEventListener("row", (ev) => {
      const row = JSON.parse(ev.data);
      state.events += 1;
      fleet.update(row);
      note("row", {instance_id: row.instance_id, phase: row.phase, cells: row.cells});
      if (row.instance_id === instance.instanceId) instance.refresh();
    });
    source.addEventListener("gone", (ev) => fleet.remove(JSON.parse(ev.data).instance_id));
    source.addEventListener("leadership", (ev) => showLeadership(JSON.parse(ev.data)));
    source.onerror = () => {
      state.connected = false;
      if (source.readyState === EventSource.CLOSED) {
        // Refused (e.g. 403) or the server is gone: the browser gives up; try again, backing off.
        source.close();
        setConn("reconnecting", `reconnecting in ${Math.round(retryMs / 1000)} s…`);
        clearTimeout(retryTimer);
        retryTimer = setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, 15000);
      } else {
        setConn("reconnecting", "reconnecting…");
      }
    };
  }

  function route() {
    const match = /^#\/instance\/(\d+)$/.exec(location.hash);
    $("fleet-view").hidden = Boolean(match);
    $("instance-view").hidden = !match;
    if (match) {
      instance.show(Number(match[1]));
      document.querySelector("#instance-view .back").focus();
    } else {
      const previous = instance.instanceId;
      instance.hide();
      const head = previous !== null && document.querySelector(`.row[data-instance="${previous}"] .row-head`);
      if (head) head.focus();
    }
  }

  window.addEventListener("hashchange", route);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && instance.instanceId !== null) location.hash = "#/";
  });
  window.motorConsole = {fleet, instance, state, reconnect: connect};
  route();
  connect();
})();
