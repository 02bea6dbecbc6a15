// The cache fill in the static book: Step, Reset and the prompt length replay the states
// toykv's model went through (static_twin.cache_fill_data: one run per recorded prompt
// length, every state from the prefill to the last position, recorded by a FillStepper).
// Nothing is computed here but which cell shows which state, as FillStepper.cells does;
// tests/test_static_twins.py compares the grid and the figures with the stepper's. With the
// attention view (attention_view.js), the same Step and Reset move it too.
(function () {
  "use strict";
  const L = window.toykvLive;
  if (L.cacheFill) return;

  // FillStepper.cells for frame i of a run
  function cells(data, run, i) {
    const frame = run.frames[i], P = frame.positions, rows = [];
    for (const held of frame.held) {
      const firstHeld = P - held, row = [];
      for (let p = 0; p < data.limit; p++) {
        let state;
        if (p >= P) state = "empty";
        else if (p < firstHeld) state = "evicted";
        else if (i > 0 && p === P - 1) state = "this";
        else state = p < run.prompt_len ? "prefill" : "decode";
        row.push(state);
      }
      for (let k = 0; k < data.arrays_per_layer; k++) rows.push(row);
    }
    return rows;
  }

  function swatch(data, state, size) {
    const [background, border] = data.cell_css[state];
    return `width:${size}px;height:${size}px;box-sizing:border-box;background:${background};` +
      `border:${border}`;
  }

  function gridHtml(data, rows) {
    const label = "font-weight:normal;text-align:right;padding-right:6px;white-space:nowrap";
    const cell = "width:14px;height:14px;padding:0;box-sizing:border-box";
    let head = "";
    for (let p = 0; p < data.limit; p++) head += `<th style='font-weight:normal;text-align:center'>${p}</th>`;
    const body = rows.map((row, r) => {
      const name = L.esc(data.row_labels[r]);
      return `<tr><th style='${label}'>${name}</th>` + row.map((state, p) =>
        `<td data-state="${state}" title='${name}, position ${p}: ${data.legend[state]}' ` +
        `style='${cell};${swatch(data, state, 14)}'></td>`).join("") + "</tr>";
    }).join("");
    const legend = data.states.filter((s) => s !== "evicted" || data.show_evicted).map((s) =>
      `<span style='display:inline-block;margin-right:12px;white-space:nowrap'><span ` +
      `style='display:inline-block;vertical-align:middle;${swatch(data, s, 12)}'></span> ` +
      `${data.legend[s]}</span>`).join("");
    return `<div style='font-size:12px'><b>KV cache</b>: one row per layer and ` +
      `${L.esc(data.what_rows)}, one column per position<table aria-label='KV cache cells' ` +
      `style='border-collapse:separate;border-spacing:2px;font-size:10px;font-family:monospace;` +
      `line-height:1;margin:4px 0'><tr><th style='${label}'>pos</th>${head}</tr>${body}</table>` +
      `<div style='line-height:1.6;max-width:560px'>${legend}</div></div>`;
  }

  function statsHtml(data, run, i) {
    const frame = run.frames[i], n = frame.positions, f = L.figure;
    let what, cachedLabel;
    if (i === 0) {
      what = `prefill of the ${n}-token prompt`;
      cachedLabel = "FLOPs, prefill (empty cache)";
    } else {
      what = `decode step ${n - run.prompt_len}: token ${run.tokens[n - 1]} at position ${n - 1}`;
      cachedLabel = "FLOPs, this step with the cache";
    }
    const match = frame.flops_cached === frame.flops_cached_formula &&
      frame.flops_uncached === frame.flops_uncached_formula;
    const check = match ? "equal the toykv.flops formulas"
      : `<b>differ from toykv.flops</b> (${L.integer(frame.flops_cached_formula)} and ` +
        `${L.integer(frame.flops_uncached_formula)})`;
    const ratio = frame.flops_uncached / frame.flops_cached;
    const diff = frame.max_abs_diff === 0 ? "0 (identical bits)" : L.exp(frame.max_abs_diff, 2);
    const rows = [
      ["cached positions", f("cached_positions", n, String(n)) + ` of ${data.limit}`],
      ["this step", L.esc(what)],
      [cachedLabel, f("flops_cached", frame.flops_cached, L.integer(frame.flops_cached))],
      [`FLOPs, full pass over all ${n} tokens`, f("flops_uncached", frame.flops_uncached,
        L.integer(frame.flops_uncached)) + ` (${L.fixed(ratio, 1)}x)`],
      ["FLOP counts", check],
      ["max |logit difference|", f("max_abs_logit_diff", frame.max_abs_diff, diff)],
    ];
    const table = rows.map(([label, value]) => `<tr><td style='padding:1px 10px 1px 0;` +
      `color:#333'>${L.esc(label)}</td><td style='padding:1px 0'>${value}</td></tr>`).join("");
    return `<div style='font-size:13px;line-height:1.35'><table style='border-collapse:collapse'>` +
      `${table}</table><div style='font-size:11px;color:#444;margin-top:4px;max-width:360px'>` +
      "FLOPs: matrix-product FLOPs counted by the model as it ran (2 per multiply-add). The " +
      "logit difference compares this step's cached logits with those of a full recomputation " +
      "of the whole sequence without a cache.</div></div>";
  }

  // what the status line says after a move (L.announce)
  function said(data, run, i) {
    const frame = run.frames[i], n = frame.positions;
    const what = i === 0 ? `Prefill of the ${n}-token prompt` : `Decode step ` +
      `${n - run.prompt_len}: token ${run.tokens[n - 1]} written at position ${n - 1}`;
    return `${what}; ${n} of ${data.limit} positions cached; ` +
      `${L.integer(frame.flops_cached)} FLOPs with the cache, ` +
      `${L.integer(frame.flops_uncached)} for a full pass over all ${n} tokens.` +
      (i === run.frames.length - 1 ? " The cache is full: Step is off, Reset starts again." : "");
  }

  L.cacheFill = function (root) {
    const data = L.data(root);
    const step = L.control(root, "step"), reset = L.control(root, "reset");
    const promptLength = L.control(root, "prompt_length");
    let run = data.runs.find((r) => r.prompt_len === data.state.prompt_len), i = data.state.step;
    const attention = data.attention ? L.attentionView(root, data) : null;

    function show(moved = true) {
      const frame = run.frames[i], last = i === run.frames.length - 1;
      if (moved) L.announce(root, said(data, run, i));
      if (last && document.activeElement === step) reset.focus();   // keyboard stays on
      L.part(root, "grid").innerHTML = gridHtml(data, cells(data, run, i));
      L.part(root, "stats").innerHTML = statsHtml(data, run, i);
      step.disabled = last;
      L.part(root, "note").innerHTML = last ? `<i>The sequence fills all ${data.limit} ` +
        `positions (${L.esc(data.limited_by)}): Step is off. Reset to start again.</i>` : "";
      root.dataset.positions = String(frame.positions);
      if (attention) attention(run, i);
    }

    step.addEventListener("click", () => {
      if (i < run.frames.length - 1) i += 1;
      show();
    });
    reset.addEventListener("click", () => { i = 0; show(); });
    promptLength.addEventListener("change", () => {
      run = data.runs.find((r) => r.prompt_len === Number(promptLength.value));
      i = 0;
      show();
    });
    promptLength.value = String(run.prompt_len);
    show(false);
  };
  L.cacheFillCells = cells;               // for tests: the page's own cell states
})();
