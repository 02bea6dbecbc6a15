// The KV share explorer in the static book: the controls of toykv.widgets.ShareExplorer,
// and the share of a decode step's bytes that is cache, kv / (kv + weights read), computed
// in the page from the per-model constants toykv wrote into it (bf16, batch 1; the cache
// bytes as toykv.sizing.kv_cache_bytes sums them). tests/test_static_twins.py compares the
// page's share with toykv.sizing.kv_share for every zoo model at every context.
(function () {
  "use strict";
  const L = window.toykvLive;
  if (L.shareExplorer) return;

  // toykv.sizing.kv_share(model, S): bf16 (2 bytes per value and per parameter), batch 1
  function share(m, S) {
    const lay = m.layout;
    const stored = BigInt(lay.full) * S +
      BigInt(lay.sliding) * (lay.sliding ? L.min(S, BigInt(lay.window)) : 0n);
    const kv = 2n * (stored * BigInt(lay.values_per_layer) +
      BigInt(lay.linear) * BigInt(lay.state_values));
    const weights = BigInt(m.read_weight_bytes);           // toykv.sizing.weight_bytes_read
    return kv + weights === 0n ? 0 : L.ratio(kv, kv + weights);
  }

  function readingsHtml(data, chosen, S) {
    const rows = chosen.map((m) => {
      const sh = share(m, S), within = S <= BigInt(m.max_seq_len), extra = ` data-model="${m.key}"`;
      return `<tr><td style='padding:1px 10px 1px 0'>${L.esc(m.key)}</td>` +
        `<td style='padding:1px 10px'>${L.figure("kv_share", sh, L.fixed(100 * sh, 1) + "%",
          "b", extra)}</td><td style='padding:1px 10px'>${L.figure("relative_decode_speed",
          1 - sh, L.fixed(1 - sh, 3), "b", extra)}</td><td style='padding:1px 10px'>` +
        `${L.integer(m.max_seq_len)}${within ? "" : " (beyond it)"}</td></tr>`;
    }).join("");
    return `<div style='font-size:13px'><b>At ${L.integer(S)} tokens</b> (bf16 cache and ` +
      `weights, batch 1)<table style='border-collapse:collapse'><tr><th style='text-align:left'>` +
      `model</th><th>KV share</th><th>relative decode speed</th><th>maximum context</th></tr>` +
      `${rows}</table></div>`;
  }

  function plotsSvg(data, chosen, S) {
    const panels = [["kv_share", "KV share of a decode step", "KV share"],
      ["relative_decode_speed", "relative decode speed (1 - share)", "speed vs empty cache"]];
    return "<div>" + panels.map(([key, title, ylabel]) => {
      const series = [], markers = [];
      chosen.forEach((m, k) => {
        const [colour, shape] = data.styles[k];
        const value = (n) => { const sh = share(m, BigInt(n)); return key === "kv_share" ? sh : 1 - sh; };
        const inside = [], beyond = [];
        data.contexts.forEach((n, i) => (n <= m.max_seq_len ? inside : beyond).push(i));
        if (inside.length && beyond.length) beyond.unshift(inside[inside.length - 1]);
        let label = `${m.key} (${m.layout.attention.toUpperCase()})`;
        for (const [part, dash] of [[inside, ""], [beyond, data.beyond_dash]]) {
          if (!part.length) continue;
          series.push({ label, colour, dash, width: 2, xs: part.map((i) => data.contexts[i]),
            ys: part.map((i) => value(data.contexts[i])), shape });
          label = "";
        }
        markers.push({ label: "", x: Number(S), y: value(S), colour, shape });
      });
      series.push({ label: `${L.integer(S)} tokens`, colour: "#000000", dash: "4 2", width: 1,
        x: Number(S) });
      return L.plot({ series, markers, title, xlabel: "context (tokens)", ylabel, width: 600,
        height: 330, ylinear: [0, 1], yticks: data.percent_ticks });
    }).join("<br>") + "</div>";
  }

  // what the status line says after a move (L.announce)
  function said(chosen, S) {
    return `At ${L.integer(S)} tokens: ` + chosen.map((m) => {
      const sh = share(m, S);
      return `${m.key}, KV share ${L.fixed(100 * sh, 1)}%, decode speed ${L.fixed(1 - sh, 3)}` +
        (S <= BigInt(m.max_seq_len) ? "" : " (beyond its maximum context)");
    }).join("; ") + ".";
  }

  L.shareExplorer = function (root) {
    const data = L.data(root);
    const models = L.control(root, "models");
    const context = L.stepSlider(L.control(root, "context"), data.contexts,
      (n) => L.integer(n) + " tokens", () => update());

    function update(moved = true) {
      const keys = [...models.selectedOptions].map((o) => o.value);
      let problem = "";
      if (keys.length < 1 || keys.length > data.max_models) {
        problem = `choose 1 to ${data.max_models} models (the plot tells at most ` +
          `${data.max_models} apart), got ${keys.length}`;
      }
      if (problem) {
        L.part(root, "message").innerHTML = `<div class='toykv-problem'><b>Problem:</b> ` +
          `${L.esc(problem)}</div>`;
        root.dataset.state = "problem";
        return;                         // the last readings stay, as in the kernel widget
      }
      const chosen = keys.map((key) => data.models.find((m) => m.key === key));
      const S = BigInt(context());
      L.part(root, "message").innerHTML = "";
      L.part(root, "readings").innerHTML = readingsHtml(data, chosen, S);
      L.part(root, "plot").innerHTML = plotsSvg(data, chosen, S);
      root.dataset.state = "ok";
      if (moved) L.announce(root, said(chosen, S));
    }

    models.addEventListener("change", update);
    update(false);
  };
  L.kvShare = share;                      // for tests: the page's own arithmetic
})();
