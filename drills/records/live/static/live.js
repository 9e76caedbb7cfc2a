// The live view of a firedrill run (drills/records/live). One EventSource on /events; every event is applied in
// order, so a reload (a replay of the log from its start) reaches the same page. Names from the cluster and the
// feature files are set as text, never parsed as markup; the chart cards arrive as markup the report's template
// rendered with every name escaped, and are parsed inert (DOMParser) before they are adopted.
"use strict";

(() => {
  const ICON = { PASS: "\u2713", FAIL: "\u2717", INCONCLUSIVE: "?", ERROR: "!" };
  const scenarios = new Map();
  let finished = false;

  const byId = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    }
    for (const child of children) {
      if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function badge(verdict) {
    const v = ICON[verdict] ? verdict : "ERROR";
    return el("span", { class: `badge v-${v.toLowerCase()}`, "data-verdict": verdict },
      el("span", { class: "ic", "aria-hidden": "true" }, ICON[v]), ` ${verdict}`);
  }

  function fmt(value, unit) {
    if (value === null || value === undefined) return "\u2014";
    if (unit === "s") {
      if (Math.abs(value) < 1) return `${Math.round(value * 1000)} ms`;
      return `${value.toFixed(2)} s`;
    }
    const text = Number.isInteger(value) ? String(value) : value.toFixed(3).replace(/\.?0+$/, "");
    return unit ? `${text} ${unit}` : text;
  }

  function wall(rfc3339) {
    return rfc3339 ? rfc3339.replace("T", " ").replace(/\.\d+Z$/, " UTC").replace(/Z$/, " UTC") : "\u2014";
  }

  const handlers = {
    run(d) {
      const run = byId("run");
      run.dataset.state = "running";
      byId("status").textContent = "Running";
      byId("run-id").textContent = d.run_id;
      byId("target").textContent = d.where;
      byId("started").textContent = wall(d.started);
      byId("archive").textContent = `${d.archive} (sealed when the run ends)`;
      document.title = `Running: Firedrill run ${d.run_id}`;
    },

    target(d) {
      byId("target").textContent = d.description;
    },

    scenario(d) {
      const steps = el("ol", { class: "steps", "data-testid": "steps" });
      const rows = [];
      for (const s of d.steps) {
        const li = el("li", { "data-testid": "step-row", "data-state": "pending" },
          el("span", { class: "kw" }, s.keyword), s.text);
        rows.push(li);
        steps.append(li);
      }
      const state = el("span", { class: "badge", "data-testid": "scenario-state" }, "running");
      const title = el("h2", {}, state, el("span", { class: "feature" }, `${d.feature} \u203a`),
        el("span", { class: "scenario-name" }, d.name),
        d.repeat > 1 ? el("span", { class: "tags" }, `run ${d.repeat}`) : null,
        d.tags.length ? el("span", { class: "tags" }, d.tags.map((t) => `@${t}`).join(" ")) : null);
      const act = el("p", { class: "act", "data-testid": "act", hidden: "" });
      const phaseRows = el("tbody");
      const phases = el("table", { class: "phases", "data-testid": "phase-table", hidden: "" },
        el("thead", {}, el("tr", {}, el("th", {}, "Measured"), el("th", { class: "num" }, "Harness"),
          el("th", { class: "num" }, "Platform"), el("th", { class: "num" }, "Threshold"), el("th", {}, "Verdict"))),
        phaseRows);
      const findings = el("ul", { class: "findings-live", "data-testid": "findings" });
      const charts = el("div", { class: "charts", "data-testid": "charts" });
      const card = el("section", { class: "scenario", "data-testid": "scenario-card", "data-scenario": d.scenario },
        title, steps, act, phases, findings, charts);
      byId("scenarios").append(card);
      scenarios.set(d.scenario, { d, card, state, steps: rows, act, phases, phaseRows, phaseByName: new Map(),
        findings, charts });
    },

    step(d) {
      const s = scenarios.get(d.scenario);
      const li = s && s.steps[d.index];
      if (!li) return;
      li.dataset.state = d.state;
      li.querySelector(".took")?.remove();
      if (d.seconds !== null && d.state !== "running") li.append(el("span", { class: "took" }, fmt(d.seconds, "s")));
    },

    act(d) {
      const s = scenarios.get(d.scenario);
      if (!s) return;
      s.act.replaceChildren("Act at ", el("b", {}, fmt(d.at_s, "s")), " from the scenario's start (",
        wall(d.wall), "): ", d.step);
      s.act.hidden = false;
    },

    phase(d) {
      const s = scenarios.get(d.scenario);
      if (!s) return;
      let tr = s.phaseByName.get(d.name);
      if (!tr) {
        tr = el("tr", { "data-testid": "phase-row", "data-phase": d.name });
        s.phaseByName.set(d.name, tr);
        s.phaseRows.append(tr);
      }
      tr.dataset.verdict = d.verdict;
      const name = el("td", {}, el("b", {}, d.name));
      if (d.message && d.verdict !== "PASS") name.append(el("span", { class: "why" }, d.message));
      tr.replaceChildren(name, el("td", { class: "num" }, fmt(d.measured, d.unit)),
        el("td", { class: "num" }, fmt(d.platform, d.unit)), el("td", { class: "num" }, d.threshold || "\u2014"),
        el("td", {}, d.verdict ? badge(d.verdict) : "no threshold"));
      s.phases.hidden = false;
    },

    finding(d) {
      const s = scenarios.get(d.scenario);
      if (s) s.findings.append(el("li", { class: "cell-finding", "data-testid": "finding" }, d.text));
    },

    chart(d) {
      const s = scenarios.get(d.scenario);
      if (!s) return;
      const parsed = new DOMParser().parseFromString(`<body>${d.html}</body>`, "text/html");
      parsed.querySelectorAll("script, [style]").forEach((n) => (n.tagName === "SCRIPT" ? n.remove()
        : n.removeAttribute("style")));
      s.charts.replaceChildren(...Array.from(parsed.body.childNodes, (n) => document.adoptNode(n)));
      s.charts.querySelectorAll("[data-swatch]").forEach((n) => { n.style.background = n.dataset.swatch; });
    },

    verdict(d) {
      const s = scenarios.get(d.scenario);
      if (s) {
        const state = badge(d.verdict);
        state.setAttribute("data-testid", "scenario-state");
        s.state.replaceWith(state);
        s.state = state;
      }
      const why = el("td", {});
      for (const line of d.why) why.append(el("span", { class: "why" }, line));
      const name = s ? `${s.d.feature} \u203a ${s.d.name}${s.d.repeat > 1 ? ` (run ${s.d.repeat})` : ""}` : d.scenario;
      byId("verdict-rows").append(el("tr", { "data-testid": "verdict-row", "data-scenario": d.scenario,
        "data-verdict": d.verdict }, el("td", { class: "scenario-name" }, name), el("td", {}, badge(d.verdict)),
        el("td", { class: "num" }, fmt(d.seconds, "s")), why));
      byId("no-verdicts").hidden = true;
    },

    finished(d) {
      finished = true;
      const run = byId("run");
      run.dataset.state = "finished";
      run.dataset.exitCode = String(d.exit_code);
      byId("status").textContent = `Finished (exit code ${d.exit_code})`;
      byId("summary").textContent = d.summary;
      byId("archive").textContent = d.archive || "nothing was sealed";
      byId("verify").textContent = d.verify || "\u2014";
      byId("report").textContent = d.report || "\u2014";
      byId("finished").hidden = false;
      document.title = `Finished: ${document.title.replace(/^Running: /, "")}`;
    },
  };

  function connect() {
    const conn = byId("conn");
    const source = new EventSource("events");
    source.onopen = () => { conn.dataset.state = "live"; conn.textContent = "live"; };
    source.onerror = () => {
      if (finished) return;
      conn.dataset.state = "lost";
      conn.textContent = source.readyState === EventSource.CLOSED ? "disconnected: the run has ended"
        : "reconnecting";
    };
    for (const [kind, apply] of Object.entries(handlers)) {
      source.addEventListener(kind, (event) => {
        apply(JSON.parse(event.data));
        if (kind === "finished") {
          source.close();
          conn.dataset.state = "done";
          conn.textContent = "run ended";
        }
      });
    }
  }

  connect();
})();
