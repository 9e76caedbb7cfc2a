// The Firedrill dashboard: polls the platform's JSON every 2 s and renders it with DOM APIs only.
// Every name comes from the cluster and is untrusted: it is only ever set as textContent or an
// attribute value, never parsed as markup (no HTML-string APIs anywhere in this file).
"use strict";

(function () {
  const POLL_MS = 2000;
  const VIEW = "/apis/firedrill.dev/v1alpha1/dashboard";
  const LEAK = "/apis/firedrill.dev/v1alpha1/leakreport";
  const HOLE_WORDS = {
    dataPipeline: "data pipeline", communication: "communication",
    fragmentation: "fragmentation", faultTolerance: "fault tolerance",
  };
  const HOLE_MEANING = {
    dataPipeline: "GPUs allocated but idle, waiting for input data",
    communication: "GPUs busy but stalled on collectives not overlapped with compute",
    fragmentation: "free GPUs that pending work could not use because no node had room",
    faultTolerance: "jobs down between a fault and their resume, plus work recomputed since the last checkpoint",
  };
  const LAYERS = [
    ["allocated", "Allocated", "GPUs bound to running pods"],
    ["active", "Active", "a kernel is running (DCGM GR_ENGINE_ACTIVE)"],
    ["effective", "Effective", "achieved over peak FLOPs: MFU (DCGM PIPE_TENSOR_ACTIVE)"],
  ];
  const STATES = {
    free: ["free", "healthy and schedulable, nothing on it"],
    allocated: ["allocated", "a pod holds the GPU (its name is shown)"],
    shared: ["shared", "pods hold a share of the GPU"],
    spare: ["spare", "kept free in the spare pool until a node is lost"],
    cordoned: ["cordoned", "node unschedulable; running pods stay"],
    unhealthy: ["node unhealthy", "the node is not Ready (heartbeat lost or agent not ready)"],
    quarantined: ["quarantined", "the healer took the node out of service"],
  };

  // The cluster-admin token: from the address's fragment (#token=..., never sent to a server), or pasted into
  // the page's token form.  Kept in this page's memory only; the fragment is dropped from the address bar and
  // history at once, so the token is not left in either.
  let token = new URLSearchParams(location.hash.replace(/^#/, "")).get("token") || "";
  if (token) history.replaceState(null, "", location.pathname + location.search);
  let serverNow = null;   // the platform's clock from the last view (windows are relative to it)
  let timer = null;

  function $(id) { return document.getElementById(id); }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function rfc3339(d) { return d.toISOString().replace(/\.\d+Z$/, "Z"); }
  function hhmmss(d) { return d.toISOString().slice(11, 19); }

  function gpuHours(v) {
    if (typeof v !== "number" || !isFinite(v)) return "-";
    if (v === 0) return "0";
    if (v >= 10) return v.toFixed(1);
    if (v >= 0.01) return v.toPrecision(3);
    return v.toPrecision(2) + " (" + (v * 60).toPrecision(2) + " GPU-min)";
  }
  function gpuHoursUnit(v) {
    const text = gpuHours(v);
    const cut = text.indexOf(" (");
    return cut < 0 ? text + " GPU-hours" : text.slice(0, cut) + " GPU-hours" + text.slice(cut);
  }
  function percent(share) {
    if (typeof share !== "number" || !isFinite(share)) return "-";
    return (share * 100).toFixed(share < 0.1 ? 2 : 1) + " %";
  }
  function secs(v) { return typeof v === "number" && isFinite(v) ? v.toFixed(2) : "\u2014"; }

  function problem(text) {
    const p = $("problem");
    p.hidden = !text;
    p.textContent = text || "";
  }

  async function getJson(path) {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), 5000);
    try {
      const r = await fetch(path, { headers: { Authorization: "Bearer " + token, Accept: "application/json" },
        signal: ctl.signal, cache: "no-store", credentials: "omit" });
      let body = null;
      try { body = await r.json(); } catch (e) { body = null; }
      return { status: r.status, body: body };
    } finally {
      clearTimeout(t);
    }
  }

  // ---------------------------------------------------------------- window
  function windowRange(now) {
    const choice = $("window").value;
    if (choice === "15m") return { start: new Date(now - 15 * 60e3), end: now, label: "the last 15 minutes" };
    if (choice === "1h") return { start: new Date(now - 3600e3), end: now, label: "the last hour" };
    if (choice === "custom") {
      const s = $("start").value, e = $("end").value;
      if (!s || !e) return { error: "Pick a start and an end (UTC) for the custom window, then press Show." };
      const start = new Date(s + "Z"), end = new Date(e + "Z");
      if (!(end > start)) return { error: "The custom window's end must be after its start." };
      return { start: start, end: end, label: "the chosen window" };
    }
    return todayRange(now);
  }
  function todayRange(now) {
    const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
    return { start: start, end: now, label: "today", today: true };
  }
  function leakUrl(range) {
    return LEAK + "?start=" + encodeURIComponent(rfc3339(range.start)) + "&end=" + encodeURIComponent(rfc3339(range.end));
  }

  // ---------------------------------------------------------------- leak report
  function renderNoReport(text) {
    $("top-hole").replaceChildren(el("span", { class: "muted", text: text }));
    $("layers").replaceChildren(el("p", { class: "empty", text: text }));
    $("smi").replaceChildren();
    $("holes").tBodies[0].replaceChildren(emptyRow(5, text));
    $("tenants").tBodies[0].replaceChildren(emptyRow(7, text));
  }

  function emptyRow(cols, text) {
    return el("tr", { class: "empty" }, el("td", { colspan: cols, text: text }));
  }

  function renderReport(rep, range) {
    const holes = Array.isArray(rep.holes) ? rep.holes : [];
    const top = $("top-hole");
    if (rep.largest && holes.length) {
      const first = holes[0];
      top.replaceChildren(
        el("span", { class: "label", text: "Largest leak " + range.label + ": " }),
        el("strong", { "data-testid": "top-hole-words", text: first.words || HOLE_WORDS[first.name] || first.name }),
        el("span", { class: "summary", text: " \u2014 " + (rep.summary || "") }));
    } else {
      top.replaceChildren(el("strong", { "data-testid": "top-hole-words", text: "No leak" }),
        el("span", { class: "summary", text: " \u2014 " + (rep.summary || "every hole is zero.") }));
    }
    const w = rep.window || {};
    $("window-text").textContent = "Window " + (w.start || "?") + " to " + (w.end || "?") + ": healthy capacity " +
      gpuHoursUnit(rep.capacityGpuHours) + ".";

    const layers = rep.layers || {};
    $("layers").replaceChildren(...LAYERS.map(([key, name, meaning]) => {
      const l = layers[key] || {};
      const fill = el("div", { class: "fill fill-" + key });
      fill.style.width = Math.max(0, Math.min(1, Number(l.share) || 0)) * 100 + "%";
      return el("div", { class: "layer", "data-testid": "layer-" + key },
        el("div", { class: "layer-name", text: name }),
        el("div", { class: "layer-value", text: percent(l.share) }),
        el("div", { class: "track" }, fill),
        el("div", { class: "layer-hours", text: gpuHoursUnit(l.gpuHours) }),
        el("div", { class: "muted", text: meaning }));
    }));
    const smi = rep.nvidiaSmiUtilization;
    $("smi").replaceChildren(
      el("strong", { text: "nvidia-smi utilization: " }),
      el("span", { text: smi ? percent(smi.share) + ", " + gpuHoursUnit(smi.gpuHours) : "not reported" }),
      el("span", { class: "muted", text: " \u2014 not a layer: it counts any time a kernel runs, even one stalled on " +
        "input or communication, so it reads high while GPUs waste time. Compare it with Active and Effective." }));

    const tbody = $("holes").tBodies[0];
    tbody.replaceChildren(...holes.map((h) => el("tr", { "data-testid": "hole-row", "data-hole": h.name },
      el("td", { text: h.rank }), el("td", { text: h.words || HOLE_WORDS[h.name] || h.name }),
      el("td", { class: "num", text: gpuHours(h.gpuHours) }), el("td", { class: "num", text: percent(h.share) }),
      el("td", { class: "muted", text: HOLE_MEANING[h.name] || "" }))));
    if (!holes.length) tbody.replaceChildren(emptyRow(5, "The leak report lists no holes."));

    const tenants = Array.isArray(rep.tenants) ? rep.tenants : [];
    const order = ["dataPipeline", "communication", "fragmentation", "faultTolerance"];
    $("tenants").tBodies[0].replaceChildren(...tenants.map((t) => el("tr", { "data-testid": "tenant-row" },
      el("td", { text: t.namespace }), el("td", { text: t.queue }),
      el("td", { class: "num", text: gpuHours(t.allocatedGpuHours) }),
      ...order.map((n) => el("td", { class: "num", text: gpuHours(((t.holes || {})[n] || {}).gpuHours) })))));
    if (!tenants.length) {
      $("tenants").tBodies[0].replaceChildren(emptyRow(7, "No tenant used GPUs in this window. Submit work " +
        "(for example `firedrill run`) and it is charged here."));
    }
  }

  function renderToday(rep) {
    const p = $("today-text");
    if (!rep) { p.hidden = true; return; }
    p.hidden = false;
    p.textContent = "Today so far: " + (rep.summary || "");
  }

  // ---------------------------------------------------------------- grid
  function renderLegend() {
    $("legend").replaceChildren(...Object.entries(STATES).map(([key, [name, meaning]]) =>
      el("li", {}, el("span", { class: "swatch cell-" + key }), el("strong", { text: name }),
        el("span", { class: "muted", text: ": " + meaning }))));
  }

  function renderGrid(view) {
    const nodes = Array.isArray(view.nodes) ? view.nodes : [];
    if (!nodes.length) {
      $("grid").replaceChildren(el("p", { class: "empty", text: "No nodes have registered. Start a cluster with " +
        "`firedrill up` (it starts one agent per node); nodes appear here within seconds." }));
      return;
    }
    const counts = (view.gpuStates || []).filter((s) => s.count > 0)
      .map((s) => (STATES[s.state] || [s.state])[0] + " " + s.count).join(", ");
    const rows = nodes.map((n) => {
      const cells = (n.cells || []).map((c) => {
        const pods = (c.pods || []).map((p) => p.namespace + "/" + p.name);
        const title = n.name + " GPU " + c.index + ": " + ((STATES[c.state] || [c.state])[0]) +
          (pods.length ? " \u2014 " + pods.join(", ") : "");
        return el("div", { class: "cell cell-" + c.state, title: title, "data-testid": "gpu-cell",
          "data-node": n.name, "data-gpu": c.index, "data-state": c.state },
          el("span", { class: "gpu-index", text: "GPU " + c.index }),
          el("span", { class: "gpu-what", text: pods.length ? (c.pods || []).map((p) => p.name).join(", ")
            : (STATES[c.state] || [c.state])[0] }));
      });
      const extra = (n.unindexedPods || []).length ? el("div", { class: "muted", text: "also on this node (GPU " +
        "index unknown): " + n.unindexedPods.map((p) => p.namespace + "/" + p.name).join(", ") }) : null;
      return el("div", { class: "node-row", "data-testid": "node-row", "data-node": n.name, "data-state": n.state },
        el("div", { class: "node-name" }, el("strong", { text: n.name }),
          el("span", { class: "muted", text: n.reason ? " " + n.reason : " Ready" })),
        el("div", { class: "cells" }, ...(cells.length ? cells : [el("span", { class: "muted", text: "no GPUs" })])),
        extra);
    });
    $("grid").replaceChildren(el("p", { class: "muted", text: "GPUs by state: " + counts }), ...rows);
  }

  function renderPending(view) {
    const pods = Array.isArray(view.pending) ? view.pending : [];
    const tbody = $("pending").tBodies[0];
    if (!pods.length) {
      tbody.replaceChildren(emptyRow(6, "Nothing pending: every pod has a node."));
      return;
    }
    tbody.replaceChildren(...pods.map((p) => el("tr", { "data-testid": "pending-row" },
      el("td", { text: p.namespace }), el("td", { "data-testid": "pending-name", text: p.name }),
      el("td", { class: "num", text: p.gpus }), el("td", { class: "nowrap", text: p.reason }),
      el("td", { class: "muted", text: p.message }), el("td", { text: p.since || "" }))));
  }

  function renderIncidents(view) {
    const rows = Array.isArray(view.incidents) ? view.incidents : [];
    const tbody = $("incidents").tBodies[0];
    if (!rows.length) {
      tbody.replaceChildren(emptyRow(8, "No node has been lost. Pull one (for example the node-pull drill of " +
        "`firedrill run`) and its detect, evict, replace and resume times appear here."));
      return;
    }
    tbody.replaceChildren(...rows.map((i) => {
      const s = i.seconds || {};
      return el("tr", { "data-testid": "incident-row" },
        el("td", { text: ((i.instants || {}).detect || "").replace("T", " ") }), el("td", { text: i.node }),
        el("td", { text: i.job ? i.namespace + "/" + i.job : "(no job affected)" }),
        el("td", { class: "num", text: secs(s.detect) }), el("td", { class: "num", text: secs(s.evict) }),
        el("td", { class: "num", text: secs(s.replace) }), el("td", { class: "num", text: secs(s.resume) }),
        el("td", { class: "num", text: secs(s.total) }));
    }));
  }

  // ---------------------------------------------------------------- loop
  const WHERE_TOKEN = "`firedrill up` says which file holds it (<data-dir>/admin-token): paste its contents " +
    "below, or open this page's address with #token=<the token> appended (the part after # never leaves your " +
    "browser).";

  function explain(status, what) {
    if (status === 401) return "The platform refused the token (401). " + WHERE_TOKEN;
    if (status === 403) return "This token may not read " + what + " (403): use the cluster-admin token. " +
      WHERE_TOKEN;
    return "Could not read " + what + " (HTTP " + status + ").";
  }

  function askToken(text) {
    $("token-form").hidden = false;
    problem(text);
  }

  async function tick() {
    try {
      if (!token) {
        askToken("This page needs the cluster-admin token. " + WHERE_TOKEN);
        return;
      }
      const view = await getJson(VIEW);
      if (view.status === 401) {
        token = "";
        askToken(explain(401, "the cluster view"));
        return;
      }
      if (view.status !== 200 || !view.body) {
        problem(explain(view.status, "the cluster view"));
        return;
      }
      $("token-form").hidden = true;
      serverNow = new Date(view.body.now || Date.now());
      renderGrid(view.body);
      renderPending(view.body);
      renderIncidents(view.body);
      const range = windowRange(serverNow);
      let note = "";
      if (range.error) {
        note = range.error;
      } else {
        const rep = await getJson(leakUrl(range));
        if (rep.status === 404) {
          renderNoReport("Leak report not available: this platform does not serve " + LEAK + " (404).");
        } else if (rep.status !== 200 || !rep.body) {
          renderNoReport("Leak report not available: " + ((rep.body && rep.body.message) || explain(rep.status,
            "the leak report")));
        } else {
          renderReport(rep.body, range);
        }
        if (!range.today && rep.status === 200) {
          const today = await getJson(leakUrl(todayRange(serverNow)));
          renderToday(today.status === 200 ? today.body : null);
        } else {
          renderToday(null);
        }
      }
      problem(note);
      $("updated").textContent = "updated " + hhmmss(serverNow) + " UTC";
    } catch (e) {
      problem("Lost contact with the platform (" + (e && e.name === "AbortError" ? "timed out" : String(e)) +
        "); retrying every 2 seconds. Is `firedrill up` still running?");
    }
  }

  let generation = 0;  // a restart (new window) abandons the loop in flight

  async function loop(gen) {
    await tick();
    if (gen === generation) timer = setTimeout(() => loop(gen), POLL_MS);
  }

  function restart() {
    generation += 1;
    if (timer !== null) clearTimeout(timer);
    timer = null;
    loop(generation);
  }

  document.addEventListener("DOMContentLoaded", () => {
    renderLegend();
    $("window").addEventListener("change", () => {
      const custom = $("window").value === "custom";
      $("custom").hidden = !custom;
      if (custom && !$("start").value && serverNow) {
        $("start").value = rfc3339(todayRange(serverNow).start).slice(0, 19);
        $("end").value = rfc3339(serverNow).slice(0, 19);
      }
      restart();
    });
    $("window-form").addEventListener("submit", (ev) => { ev.preventDefault(); restart(); });
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const given = $("token-input").value.trim();
      $("token-input").value = "";
      if (!given) return;
      token = given;
      problem("");
      restart();
    });
    restart();
  });
})();
