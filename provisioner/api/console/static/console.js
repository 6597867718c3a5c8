// Renders the console's charts from JSON embedded in the page (no inline scripts: the page's
// Content-Security-Policy forbids them) and reads the What-if JSON file in the browser.
"use strict";
(function () {
  const COLORS = ["#2456d6", "#38a169", "#dd6b20", "#805ad5", "#d69e2e", "#e53e3e", "#319795",
    "#b83280", "#4a5568", "#2b6cb0", "#9c4221", "#276749"];
  const color = (i) => COLORS[i % COLORS.length];
  // A team's colour is the same on every page (the server assigns it); other series by order.
  let TEAMS = null;
  const colorOf = (label, i) => {
    if (TEAMS === null) TEAMS = data("team-colours") || {};
    return TEAMS[label] || color(i);
  };
  const usd = (v) => "$" + Number(v).toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});

  function data(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function stackedBar(canvas, d) {
    return new Chart(canvas, {
      type: "bar",
      data: {labels: d.labels, datasets: d.datasets.map((s, i) => ({...s, backgroundColor: colorOf(s.label, i)}))},
      options: {animation: false, maintainAspectRatio: false,
        scales: {x: {stacked: true}, y: {stacked: true, ticks: {callback: (v) => usd(v)}}},
        plugins: {tooltip: {callbacks: {label: (c) => c.dataset.label + ": " + usd(c.parsed.y)}}}},
    });
  }

  function trajectory(canvas, d) {
    const sets = d.datasets.map((s, i) => ({label: s.label, data: s.data, borderColor: colorOf(s.label, i),
      backgroundColor: colorOf(s.label, i), pointRadius: 2, spanGaps: false}));
    d.datasets.forEach((s, i) => {
      if (s.forecast && s.forecast.some((v) => v !== null)) {
        sets.push({label: s.label + " forecast", data: s.forecast, borderColor: colorOf(s.label, i),
          borderDash: [2, 3], pointRadius: 0, borderWidth: 1.5});
      }
    });
    Object.entries(d.budgets || {}).forEach(([team, cap]) => {
      const i = d.datasets.findIndex((s) => s.label === team);
      if (i < 0) return;
      sets.push({label: team + " budget", data: d.labels.map(() => cap), borderColor: colorOf(team, i),
        borderDash: [8, 4], pointRadius: 0, borderWidth: 1});
    });
    return new Chart(canvas, {type: "line", data: {labels: d.labels, datasets: sets},
      options: {animation: false, maintainAspectRatio: false, scales: {y: {ticks: {callback: (v) => usd(v)}}}}});
  }

  function drawCharts(root) {
    if (typeof Chart === "undefined") return;
    root.querySelectorAll("canvas[data-chart]").forEach((canvas) => {
      const d = data(canvas.dataset.source);
      if (!d || canvas.dataset.drawn) return;
      canvas.dataset.drawn = "1";
      if (canvas.dataset.chart === "stacked-bar") stackedBar(canvas, d);
      else if (canvas.dataset.chart === "trajectory") trajectory(canvas, d);
    });
  }

  function hours(s) { return (Number(s) / 3600).toFixed(2) + " h"; }

  function showWhatIf(results) {
    if (!Array.isArray(results) || !results.length || results.some((r) => typeof r.policy !== "string")) {
      throw new Error("not the JSON of `provisioner simulate --json`: expected a list of results with a policy each");
    }
    const body = document.querySelector("#whatif-table tbody");
    body.replaceChildren();
    results.forEach((r) => {
      const tr = document.createElement("tr");
      tr.dataset.policy = r.policy;
      const cells = [r.policy, r.jobs, usd(r.cloud_cost_usd), Number(r.cloud_gpu_hours).toFixed(1),
        hours(r.avg_jct_s), hours(r.avg_wait_s), hours(r.p95_wait_s),
        (100 * r.burst_fraction).toFixed(1) + "%", (100 * r.onprem_gpu_utilization).toFixed(1) + "%"];
      cells.forEach((v, i) => {
        const td = document.createElement("td");
        td.textContent = String(v);
        if (i > 0) td.className = "num";
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    document.getElementById("whatif-results").hidden = false;
    [window._whatifScatter, window._whatifGpus].forEach((c) => c && c.destroy());
    window._whatifScatter = new Chart(document.getElementById("whatif-scatter"), {
      type: "scatter",
      data: {datasets: results.map((r, i) => ({label: r.policy, data: [{x: r.avg_jct_s / 3600, y: r.cloud_cost_usd}],
        backgroundColor: color(i), pointRadius: 7}))},
      options: {animation: false, maintainAspectRatio: false,
        scales: {x: {type: "logarithmic", title: {display: true, text: "average JCT (h, log scale)"}}, y: {title: {display: true, text: "cloud cost ($)"}}}},
    });
    const series = results.filter((r) => Array.isArray(r.cloud_gpus_over_time) && r.cloud_gpus_over_time.length);
    const gpus = document.getElementById("whatif-gpus");
    if (series.length) {
      document.getElementById("whatif-gpus-title").textContent = "Cloud GPUs over time";
      window._whatifGpus = new Chart(gpus, {
        type: "line",
        data: {datasets: series.map((r, i) => ({label: r.policy, stepped: true, pointRadius: 0, borderColor: color(i),
          data: r.cloud_gpus_over_time.map(([t, n]) => ({x: t / 3600, y: n}))}))},
        options: {animation: false, maintainAspectRatio: false, parsing: false,
          scales: {x: {type: "linear", title: {display: true, text: "hours into the trace"}}, y: {title: {display: true, text: "cloud GPUs"}}}},
      });
    } else {
      document.getElementById("whatif-gpus-title").textContent = "Cloud GPU-hours per policy";
      window._whatifGpus = new Chart(gpus, {
        type: "bar",
        data: {labels: results.map((r) => r.policy), datasets: [{label: "cloud GPU-h", data: results.map((r) => r.cloud_gpu_hours), backgroundColor: color(0)}]},
        options: {animation: false, maintainAspectRatio: false},
      });
    }
  }

  function wireWhatIf() {
    const input = document.getElementById("whatif-file");
    if (!input) return;
    const err = document.getElementById("whatif-error");
    const example = document.getElementById("whatif-example");
    example.addEventListener("click", () => {
      fetch(example.dataset.src).then((r) => {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      }).then((results) => {
        err.hidden = true;
        showWhatIf(results);
        document.body.dataset.whatif = "example";
      }).catch((e) => {
        err.textContent = "the example: " + e.message;
        err.hidden = false;
      });
    });
    input.addEventListener("change", () => {
      const file = input.files && input.files[0];
      if (!file) return;
      file.text().then((text) => {
        err.hidden = true;
        showWhatIf(JSON.parse(text));
        document.body.dataset.whatif = "loaded";
      }).catch((e) => {
        err.textContent = file.name + ": " + e.message;
        err.hidden = false;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    drawCharts(document);
    wireWhatIf();
    document.body.dataset.ready = "1";
  });
  document.addEventListener("htmx:afterSwap", (e) => drawCharts(e.target));
})();
