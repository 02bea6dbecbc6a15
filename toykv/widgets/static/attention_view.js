// The attention view in the static book, inside the cache fill: the layer and head menus
// replay the attention weights toykv's model computed at every recorded step
// (FillStepper.attention_rows: each row as the step that computed it left it; the frames'
// attention_figures: counts and differences from a recomputation). Nothing is computed here
// but where each recorded weight goes; the drawing and the words are those of
// toykv/widgets/attention_view.py and attention_rows.caption, and
// tests/test_static_twins.py compares every figure and weight with toykv's.
(function () {
  "use strict";
  const L = window.toykvLive;
  if (L.attentionView) return;

  // little-endian float32 in base64 -> the weights as Numbers (exactly the float32 values)
  function decode(text) {
    const bytes = atob(text), view = new DataView(new ArrayBuffer(bytes.length));
    for (let k = 0; k < bytes.length; k++) view.setUint8(k, bytes.charCodeAt(k));
    const out = new Float64Array(bytes.length / 4);
    for (let k = 0; k < out.length; k++) out[k] = view.getFloat32(4 * k, true);
    return out;
  }

  // where row i of layer l, head h starts in a run's weights (decoded once per run); rows
  // before `shared` are those of the run `from` (static_twin.share_prompt_rows)
  function rowsOf(run, heads) {
    if (run.decoded) return run.decoded;
    const layers = [], shared = run.rows.shared;
    let base = 0;
    for (const first of run.rows.row_first) {
      const offsets = [];
      let total = 0;
      first.forEach((lo, i) => { offsets.push(total); if (i >= shared) total += i - lo + 1; });
      layers.push({ base, offsets, total, first });
      base += heads * total;
    }
    run.decoded = { weights: decode(run.rows.weights), layers };
    return run.decoded;
  }

  // the weight of query r, key j in layer l, head h of a run (NaN where it did not attend)
  function weightOf(data, run, l, h, r, j) {
    if (r < run.rows.shared) run = data.runs[run.rows.from];
    const rows = rowsOf(run, data.attention.heads), lay = rows.layers[l];
    return j < lay.first[r] || j > r ? NaN :
      rows.weights[lay.base + h * lay.total + lay.offsets[r] + j - lay.first[r]];
  }

  // attention_rows.AttentionFrame of frame i of a run, for one layer and head
  function frameOf(data, run, i, layer, head) {
    const lay = rowsOf(run, data.attention.heads).layers[layer];
    const fig = run.frames[i].attention, n = run.frames[i].positions;
    const nCached = i === 0 ? 0 : n - 1;
    const weight = (r, j) => weightOf(data, run, layer, head, r, j);
    const newRowKeys = [];
    for (let j = lay.first[n - 1]; j < n; j++) newRowKeys.push(j);
    return { layer, head, step: i, n, nCached, keyFirst: fig.key_first[layer],
      first: lay.first, weight, newRowKeys, rowsComputed: n - nCached,
      cells: fig.cells[layer], computed: fig.computed[layer],
      recomputeWeights: fig.recompute_weights[layer], newDiff: fig.new_diff[layer][head],
      pastDiff: fig.past_diff === null ? null : fig.past_diff[layer][head] };
  }

  const difference = (d) => (d === 0 ? "0 (identical bits)" : L.exp(d, 1));

  // attention_rows.caption
  function caption(f) {
    const where = `Layer ${f.layer}, head ${f.head}`, k = f.newRowKeys.length, I = L.integer;
    if (f.step === 0)
      return `${where}, prefill: ${I(f.rowsComputed)} rows, ${I(f.computed)} weights ` +
        `computed (${I(f.rowsComputed)} queries against ${I(f.rowsComputed)} new keys); a ` +
        `recomputation computes the same ${I(f.n)} rows, ${I(f.recomputeWeights)} weights.`;
    return `${where}, decode step ${f.step}: 1 row of ${I(k)} weights computed (the query at ` +
      `position ${f.n - 1} against ${I(k - 1)} cached keys and its own); a recomputation ` +
      `would compute ${I(f.n)} rows, ${I(f.recomputeWeights)} weights. The ` +
      `${I(f.nCached)} rows above are the earlier steps' own, unchanged; the recomputation ` +
      `gives them back with max |difference| ${difference(f.pastDiff)}.`;
  }

  // attention_view.weight_colour: cividis at sqrt(weight)
  function colour(att, w) {
    const stops = att.cividis, t = Math.sqrt(Math.min(1, Math.max(0, w))) * (stops.length - 1);
    const k = Math.min(Math.floor(t), stops.length - 2), f = t - k;
    let out = "#";
    for (const i of [1, 3, 5]) {
      const a = parseInt(stops[k].slice(i, i + 2), 16), b = parseInt(stops[k + 1].slice(i, i + 2), 16);
      out += Math.floor(a + (b - a) * f + 0.5).toString(16).padStart(2, "0");
    }
    return out;
  }

  function summary(f) {
    const rows = f.rowsComputed === 1 ? `row ${f.nCached}` : `rows ${f.nCached} to ${f.n - 1}`;
    return `Attention weights of layer ${f.layer}, head ${f.head}: ${f.n} query rows by ` +
      `${f.n} key columns; ${rows} computed this step`;
  }

  // attention_view.heatmap_svg
  function heatmap(att, limit, f) {
    const { cell, every, left, top, right } = att, n = f.n;
    const width = left + limit * cell + right, height = top + limit * cell + 4;
    const out = [`<svg xmlns='http://www.w3.org/2000/svg' width='${width}' height='${height}' ` +
      `viewBox='0 0 ${width} ${height}' role='img' aria-label='${L.esc(summary(f))}' ` +
      "style='background:#FFFFFF;max-width:100%;height:auto' font-family='sans-serif' " +
      "data-part='heatmap'>"];
    for (let p = 0; p < limit; p += every) {
      const c = p < n ? "#222222" : "#767676";
      out.push(`<text x='${left + p * cell + cell / 2}' y='10' font-size='9' ` +
        `text-anchor='middle' fill='${c}'>${p}</text><text x='${left - 4}' ` +
        `y='${top + p * cell + cell / 2 + 3}' font-size='9' text-anchor='end' fill='${c}'>${p}</text>`);
    }
    for (let j = f.keyFirst; j < n; j++) {
      const isNew = j >= f.nCached;
      out.push(`<rect x='${left + j * cell}' y='14' width='${cell - 1}' height='9' ` +
        `fill='${isNew ? att.colours.new : att.colours.cached}' ` +
        `stroke='${isNew ? att.colours.black : att.colours.cached}' stroke-width='1' ` +
        `data-column='${j}' data-source='${isNew ? "new" : "cache"}'/>`);
    }
    for (let i = 0; i < n; i++) {
      for (let j = f.first[i]; j <= i; j++) {
        const w = f.weight(i, j);
        out.push(`<rect x='${left + j * cell}' y='${top + i * cell}' width='${cell - 1}' ` +
          `height='${cell - 1}' fill='${colour(att, w)}'/>`);
      }
    }
    const x = (j) => left + j * cell, y = (i) => top + i * cell;
    let path = `M${x(f.first[0])} ${y(0)}`;
    for (let i = 0; i < n; i++) path += `H${x(i + 1)}V${y(i + 1)}`;
    for (let i = n - 1; i >= 0; i--) path += `H${x(f.first[i])}V${y(i)}`;
    out.push(`<path d='${path}Z' fill='none' stroke='#222222' stroke-width='1'/>`);
    const y0 = top + f.nCached * cell, rows = f.rowsComputed * cell;
    const box = `x='${left - 1}' y='${y0 - 1}' width='${n * cell + 1}' height='${rows + 1}' ` +
      "fill='none'";
    out.push(`<rect ${box} stroke='#000000' stroke-width='3'/><rect ${box} stroke='#FFFFFF' ` +
      `stroke-width='1'/><text x='${left + n * cell + 6}' y='${y0 + rows / 2 + 4}' ` +
      "font-size='11' fill='#222222'>&#9664; this step</text></svg>");
    return out.join("");
  }

  // attention_view.figures_html
  function figures(f) {
    const g = (name, value, shown) => L.figure(name, value, shown);
    const I = L.integer;
    const rows = [
      ["this step", f.step === 0 ? "prefill" : `decode step ${f.step}`],
      ["rows computed", g("rows_computed", f.rowsComputed, I(f.rowsComputed)) + ` of ${I(f.n)}`],
      ["weights computed", g("weights_computed", f.computed, I(f.computed))],
      ["keys read from the cache", g("cached_columns", f.nCached - f.keyFirst,
        I(f.nCached - f.keyFirst))],
      ["keys computed this step", g("new_columns", f.rowsComputed, I(f.rowsComputed))],
      ["weights shown", g("cells_shown", f.cells, I(f.cells))],
      ["a recomputation computes", g("recompute_rows", f.n, I(f.n)) + " rows, " +
        g("recompute_weights", f.recomputeWeights, I(f.recomputeWeights)) + " weights"],
      ["max |difference|, this step's rows", g("new_rows_max_diff", f.newDiff,
        difference(f.newDiff))],
    ];
    if (f.pastDiff !== null)
      rows.push(["max |difference|, earlier rows", g("past_rows_max_diff", f.pastDiff,
        difference(f.pastDiff))]);
    return "<table style='border-collapse:collapse;font-size:13px'>" + rows.map(([k, v]) =>
      `<tr><td style='padding:1px 10px 1px 0;color:#333'>${L.esc(k)}</td>` +
      `<td style='padding:1px 0'>${v}</td></tr>`).join("") + "</table><div " +
      "class='toykv-hint' style='font-size:11px;color:#444444;max-width:340px;margin-top:4px'>" +
      "Differences compare the weights shown with those of a recomputation of the whole " +
      "sequence without the cache.</div>";
  }

  // attention_view.new_row_html
  function newRow(f) {
    const items = f.newRowKeys.map((j) => {
      const w = f.weight(f.n - 1, j);
      return "<span style='display:inline-block;margin-right:10px;white-space:nowrap'>key " +
        `${j}: <span data-quantity="new_row_weight" data-key="${j}" data-value="${String(w)}">` +
        `${L.fixed(w, 3)}</span></span>`;
    }).join("");
    return "<div style='font-size:12px;max-width:760px;line-height:1.6;margin-top:6px'>" +
      "Weights of the " +
      `newest query (row ${f.n - 1}): ${items}</div>`;
  }

  // attention_view.legend_html
  function legend(att) {
    const barWidth = 160, steps = 32;
    let stripes = "", ticks = "";
    for (let k = 0; k < steps; k++)
      stripes += `<rect x='${k * barWidth / steps}' y='0' width='${barWidth / steps + 0.5}' ` +
        `height='10' fill='${colour(att, ((k + 0.5) / steps) ** 2)}'/>`;
    for (const w of att.scale_ticks) {
      const x = Math.sqrt(w) * barWidth;
      ticks += `<line x1='${x}' y1='10' x2='${x}' y2='13' stroke='#222222'/><text x='${x}' ` +
        `y='23' font-size='9' text-anchor='middle' fill='#222222'>${w}</text>`;
    }
    const bar = `<svg xmlns='http://www.w3.org/2000/svg' width='${barWidth + 12}' height='25' ` +
      `viewBox='-6 0 ${barWidth + 12} 25' role='img' aria-label='colour scale: dark blue for ` +
      "weight 0 to light yellow for weight 1, on a square-root scale' " +
      `style='vertical-align:middle' font-family='sans-serif'>${stripes}${ticks}</svg>`;
    const swatch = "display:inline-block;vertical-align:middle;width:12px;height:9px;" +
      "box-sizing:border-box;margin-right:4px";
    const c = att.colours;
    const marks = [[`background:${c.cached};border:1px solid ${c.cached}`, att.legend.cached],
      [`background:${c.new};border:1px solid ${c.black}`, att.legend.new],
      ["background:#FFFFFF;border:3px solid #000000;width:16px;height:12px", att.legend.rows],
      ["background:#FFFFFF;border:1px solid #222222", att.legend.masked]];
    const spans = marks.map(([style, text]) => "<span style='display:inline-block;" +
      `margin-right:12px;white-space:nowrap'><span style='${swatch};${style}'></span>` +
      `${L.esc(text)}</span>`).join("");
    return "<div style='font-size:11px;line-height:1.7;max-width:760px'>attention weight " +
      `(colour: square root of the weight) ${bar}<br>${spans}</div>`;
  }

  // attention_view.view_html
  function view(att, limit, f) {
    return `<div style='font-size:12px'><b>Attention</b>, layer ${f.layer}, head ${f.head}: ` +
      "rows are queries, columns keys (positions)</div><div class='toykv-row' " +
      "style='display:flex;flex-wrap:wrap;gap:12px 24px;align-items:flex-start'><div>" +
      `${heatmap(att, limit, f)}</div><div data-part='attention_figures'>${figures(f)}</div>` +
      `</div>${newRow(f)}${legend(att)}`;
  }

  // Wire the menus; returns show(run, i), which the cache fill calls after each Step/Reset.
  L.attentionView = function (root, data) {
    const att = data.attention;
    const layer = L.control(root, "layer"), head = L.control(root, "head");
    let last = null;
    function show(run, i, moved = false) {
      last = [run, i];
      const f = frameOf(data, run, i, Number(layer.value), Number(head.value));
      L.part(root, "attention_view").innerHTML = view(att, data.limit, f);
      L.part(root, "attention_caption").textContent = caption(f);
      if (moved) L.announce(root, caption(f));          // a new layer or head, said in words
    }
    for (const menu of [layer, head])
      menu.addEventListener("change", () => show(last[0], last[1], true));
    layer.value = String(att.state.layer);
    head.value = String(att.state.head);
    return show;
  };
  L.attentionFrame = frameOf;             // for tests: the page's own reading of the data
  L.attentionCaption = caption;
})();
