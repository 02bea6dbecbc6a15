// The size calculator in the static book: the controls of toykv.widgets.SizeCalculator, and
// its figures computed in the page from the per-model constants toykv wrote into it
// (static_twin.size_calculator_data). The sums are those of toykv.sizing, in exact BigInt
// arithmetic: bytes = (full layers x S + sliding layers x min(S, w)) x values per layer x b
// + linear layers x state values x b, for each of B sequences. tests/test_static_twins.py
// compares every figure with toykv's size_report over every zoo model, variant, precision,
// context and batch.
(function () {
  "use strict";
  const L = window.toykvLive;
  if (L.sizeCalculator) return;
  const GiB = 2n ** 30n;

  // bytes of `values` values at b bytes each (b2 = 2b: 8, 4, 2 or 1), or an Error
  function whole(values, b2, what) {
    const twice = values * b2;
    if (twice % 2n !== 0n) {
      const b = Number(b2) / 2;
      throw new Error(`${what}: ${values} values x ${b} bytes = ${Number(twice) / 2} bytes, ` +
        "not a whole number of bytes");
    }
    return twice / 2n;
  }

  // toykv.sizing.kv_cache_bytes for one sequence of S tokens
  function sequenceBytes(layout, S, b2) {
    const stored = BigInt(layout.full) * S +
      BigInt(layout.sliding) * (layout.sliding ? L.min(S, BigInt(layout.window)) : 0n);
    const values = stored * BigInt(layout.values_per_layer) +
      BigInt(layout.linear) * BigInt(layout.state_values);
    return whole(values, b2, "kv_cache_bytes");
  }

  function bytesPerToken(layout, b2) {
    return whole(BigInt(layout.values_per_token), b2, "kv_bytes_per_token");
  }

  // Every number toykv's size_report returns, for one setting (an Error for bad input).
  // s: {model, variant, kvHeads, precision (string), context (BigInt), batch (BigInt),
  // gpu (Number, GiB)}; options.curves false skips the plotted curves
  function report(data, s, options = {}) {
    const m = data.models.find((entry) => entry.key === s.model);
    const layoutOf = (key) => key === "gqa" ? m.gqa[String(s.kvHeads)] : m.variants[key];
    const layout = layoutOf(s.variant);
    if (!layout) throw new Error(`GQA does not fit ${m.key} (${m.n_heads} query heads)`);
    if (layout.error) throw new Error(layout.error);
    const b2 = BigInt(Math.round(2 * Number(s.precision)));
    const S = s.context, B = s.batch;
    const gpuBytes = BigInt(Math.floor(s.gpu * 2 ** 30));   // exact: a power-of-two scaling
    const sequence = sequenceBytes(layout, S, b2);
    const batchBytes = B * sequence;
    const weights = BigInt(m.weight_bytes), active = BigInt(m.active_weight_bytes);
    // toykv.sizing.weight_bytes_read: an untied embedding adds one looked-up row per sequence
    const read = BigInt(m.read_weight_bytes) +
      (L.min(B, BigInt(m.vocab_size)) - 1n) * BigInt(m.embedding_row_bytes);
    const share = batchBytes + read === 0n ? 0 : L.ratio(batchBytes, batchBytes + read);
    const room = gpuBytes - weights;
    let fit = room / sequence;                              // BigInt: truncates toward 0
    if (fit < 0n) fit = 0n;
    const curve = (lay) => options.curves === false ? []
      : data.curve_contexts.map((n) => B * sequenceBytes(lay, BigInt(n), b2));
    const variants = data.variants.map(([label, key]) => {
      const lay = layoutOf(key);
      if (!lay || lay.error) return { key, label, fits: false };
      return { key, label, fits: true, layout: lay, bytes_per_token: bytesPerToken(lay, b2),
        batch_bytes: B * sequenceBytes(lay, S, b2) };
    });
    const mha = variants.find((row) => row.key === "mha");
    variants.forEach((row) => {
      row.share_of_mha = row.fits && mha.fits && mha.batch_bytes !== 0n
        ? L.ratio(row.batch_bytes, mha.batch_bytes) : null;
    });
    return {
      model: m, layout, variant: s.variant, bytes_per_value: Number(s.precision),
      context: S, batch: B, gpu_memory_gib: s.gpu, gpu_bytes: gpuBytes,
      full_layers: layout.full, sliding_layers: layout.sliding, linear_layers: layout.linear,
      sliding_window: layout.window, max_seq_len: m.max_seq_len,
      values_per_token: BigInt(layout.values_per_token),
      bytes_per_token: bytesPerToken(layout, b2), sequence_bytes: sequence,
      bytes_per_token_at_context: L.ratio(sequence, S), batch_bytes: batchBytes,
      gpus_of_kv: L.ratio(batchBytes, gpuBytes), weight_bytes: weights,
      active_weight_bytes: active, weight_bytes_read: read, weights_fit: weights <= gpuBytes, sequences_fit: fit,
      kv_share: share, relative_decode_speed: 1 - share,
      curve_bytes: curve(layout), curve_bytes_as_built: layout.same_as_built ? null
        : curve(m.variants["as built"]), variants,
      windowed: Boolean(layout.sliding || layout.linear),
    };
  }

  // -- what is shown (toykv.widgets.size_calculator_view, ported) ------------------------------
  function texts(r) {
    const pct = (x) => L.fixed(100 * x, 1) + "%";
    return {
      values_per_token: L.integer(r.values_per_token),
      bytes_per_token: `${L.integer(r.bytes_per_token)} B (${L.binaryBytes(r.bytes_per_token, 1)})`,
      bytes_per_token_at_context: `${L.fixed(roundHalfEven(r.bytes_per_token_at_context), 0)} B ` +
        `(${L.binaryBytes(r.bytes_per_token_at_context, 1)})`,
      batch_bytes: L.bothBytes(r.batch_bytes), batch_bytes_exact: `${L.integer(r.batch_bytes)} B`,
      gpu_memory: `${L.general(r.gpu_memory_gib, true)} GiB`, gpus_of_kv: L.fixed(r.gpus_of_kv, 2),
      weight_bytes: L.bothBytes(r.weight_bytes), sequences_fit: L.integer(r.sequences_fit),
      kv_share: pct(r.kv_share), relative_decode_speed: L.fixed(r.relative_decode_speed, 3),
    };
  }

  function roundHalfEven(x) {            // Python's round() of a float to an integer
    const f = Math.floor(x), diff = x - f;
    if (diff > 0.5) return f + 1;
    if (diff < 0.5) return f;
    return f % 2 === 0 ? f : f + 1;
  }

  function notes(r) {
    const t = texts(r), out = [];
    const gpu = `one ${t.gpu_memory} GPU`;
    const layers = r.full_layers + r.sliding_layers + r.linear_layers;
    if (!r.weights_fit) {
      out.push(`The weights alone (${t.weight_bytes} at bf16) do not fit in ${gpu}, so no ` +
        "sequence fits beside them.");
    } else if (r.sequences_fit === 0n) {
      out.push(`Not even one sequence of ${L.integer(r.context)} tokens fits beside the weights ` +
        `on ${gpu}.`);
    }
    if (r.sliding_layers) {
      const grows = r.context > BigInt(r.sliding_window) ? "stop growing there"
        : "would stop growing past it";
      out.push(`${r.sliding_layers} of ${layers} layers slide over ` +
        `${L.integer(r.sliding_window)} tokens and ${grows}: bytes/token is the rate inside the ` +
        "window, the whole batch counts the window.");
    }
    if (r.linear_layers) {
      out.push(`${r.linear_layers} linear-attention layers keep a fixed state per sequence: ` +
        "counted in the whole batch, not in bytes/token.");
    }
    if (r.context > BigInt(r.max_seq_len)) {
      out.push(`${L.integer(r.context)} tokens is beyond this model's maximum context ` +
        `(${L.integer(r.max_seq_len)}): the figures are what the cache would hold.`);
    }
    if (r.variant !== "as built") {
      out.push("Weights and active parameters are the model's own: the variant's different " +
        "K/V projection sizes are not counted in them.");
    }
    if (r.bytes_per_value === 0.5) {
      out.push("int4: 0.5 bytes per value; the quantization scales are not counted.");
    }
    return out;
  }

  function numbersHtml(data, r) {
    const t = texts(r), terms = Object.fromEntries(data.terms);
    const f = L.figure;
    const perToken = r.windowed ? "bytes / token, inside the window" : "bytes / token";
    const rows = [
      ["values / token", "values one more token adds to the cache, summed over the layers",
        f("values_per_token", r.values_per_token, t.values_per_token)],
      [perToken, "values / token x bytes per value" + (r.windowed
        ? "; sliding layers add this only until their window is full" : ""),
      f("bytes_per_token", r.bytes_per_token, t.bytes_per_token)],
    ];
    if (r.windowed) {
      rows.push([`bytes / token at ${L.integer(r.context)} tokens`, "one sequence's cache " +
        "divided by its tokens: windows and fixed states counted",
      f("bytes_per_token_at_context", r.bytes_per_token_at_context,
        t.bytes_per_token_at_context)]);
    }
    rows.push(
      [`whole batch (${L.integer(r.batch)} x ${L.integer(r.context)} tokens)`,
        "the cache of every sequence", f("batch_bytes", r.batch_bytes, t.batch_bytes) +
        `<br><span style='font-size:11px'>${t.batch_bytes_exact}</span>` +
        f("sequence_bytes", r.sequence_bytes, "", "span", " hidden")],
      [`GPUs of KV (${t.gpu_memory} each)`, "whole batch / one GPU's memory: the cache alone, " +
        "without the weights", f("gpus_of_kv", r.gpus_of_kv, t.gpus_of_kv) +
        f("gpu_bytes", r.gpu_bytes, "", "span", " hidden")],
      ["weights (bf16, all parameters)", "what must sit in memory beside the cache",
        f("weight_bytes", r.weight_bytes, t.weight_bytes, "span") +
        `<br><span style='font-size:11px'>${L.fixed(r.model.total_params / 1e9, 2)}B ` +
        `parameters, ${L.fixed(r.model.active_params / 1e9, 2)}B active</span>` +
        f("active_weight_bytes", r.active_weight_bytes, "", "span", " hidden") +
        f("weight_bytes_read", r.weight_bytes_read, "", "span", " hidden")],
      ["sequences that fit beside them on one GPU", "(GPU memory - weights) // one sequence's " +
        "cache", f("sequences_fit", r.sequences_fit, t.sequences_fit)],
      ["KV share of a decode step", terms["KV share"], f("kv_share", r.kv_share, t.kv_share)],
      ["relative decode speed (1 - share)", terms["relative decode speed"],
        f("relative_decode_speed", r.relative_decode_speed, t.relative_decode_speed)],
    );
    const cells = rows.map(([label, tip, value]) => `<tr title='${L.esc(tip)}'><td ` +
      `style='padding:1px 10px 1px 0;color:#333'>${L.esc(label)}</td><td style='padding:1px 0'>` +
      `${value}</td></tr>`).join("");
    return `<div style='font-size:13px;line-height:1.35'><table style='border-collapse:collapse'>` +
      `${cells}</table><div style='font-size:11px;color:#444;max-width:400px;margin-top:4px'>` +
      `${L.esc(data.units_note)}</div></div>`;
  }

  function variantsHtml(r) {
    const head = ["variant", "KV heads", "bytes / token", "whole batch", "vs MHA"];
    const cells = head.map((h) => `<th style='padding:1px 8px;text-align:left'>${h}</th>`).join("");
    let body = "";
    for (const row of r.variants) {
      let shown;
      if (!row.fits) {
        shown = [row.label, "does not fit", "", "", ""];
      } else {
        const lay = row.layout;
        const label = row.key === "as built" ? `as built (${lay.attention.toUpperCase()})`
          : row.label;
        const heads = lay.latent ? `latent ${lay.kv_lora_rank}+${lay.rope_head_dim}`
          : String(lay.n_kv_heads);
        const share = row.share_of_mha === null ? "" : L.fixed(100 * row.share_of_mha, 1) + "%";
        shown = [L.esc(label), L.esc(heads),
          `<span data-variant="${row.key}" data-variant-quantity="bytes_per_token" ` +
          `data-value="${row.bytes_per_token}">${L.binaryBytes(row.bytes_per_token, 1)}</span>`,
          `<span data-variant="${row.key}" data-variant-quantity="batch_bytes" ` +
          `data-value="${row.batch_bytes}">${L.binaryBytes(row.batch_bytes)}</span>`, share];
      }
      const bold = row.key === r.variant ? " style='font-weight:bold'" : "";
      body += `<tr${bold}>` + shown.map((c) => `<td style='padding:1px 8px'>${c}</td>`).join("") +
        "</tr>";
    }
    const inside = r.windowed ? ", inside the window" : "";
    return `<div style='font-size:12px;line-height:1.35;margin-top:6px'><b>Every attention ` +
      `variant for ${L.esc(r.model.key)}</b> at ${L.integer(r.batch)} x ${L.integer(r.context)} ` +
      `tokens (same layers, heads and head_dim; MLA with DeepSeek-V2's latent of 512 plus a ` +
      `rotary key of 64; bytes / token${inside}; the chosen one in bold)<table ` +
      `style='border-collapse:collapse'><tr>${cells}</tr>${body}</table></div>`;
  }

  function sourceHtml(m, C) {
    const flag = m.verified ? "" : `<b style='color:${C.vermillion_text}'>UNVERIFIED:</b> some numbers of ` +
      "this entry are not confirmed by its sources (see the notes). ";
    const sources = m.sources.map((src) => `<li>${L.esc(src)}</li>`).join("");
    const extra = m.notes ? `<div>${L.esc(m.notes)}</div>` : "";
    return `<div style='font-size:11px;line-height:1.35;color:#333;margin-top:6px'>${flag}` +
      `<b>Sources for ${L.esc(m.key)}:</b><ul style='margin:0'>${sources}</ul>${extra}</div>`;
  }

  function plotSvg(data, r, kvHeads) {
    const t = texts(r), C = data.colours;
    const precision = Object.fromEntries(data.precisions.map(([label, b]) =>
      [String(b), label.split(" ")[0]]))[String(r.bytes_per_value)];
    const built = `as built (${r.variants[0].layout.attention.toUpperCase()})`;
    let variant = Object.fromEntries(data.variants.map(([label, key]) => [key, label]))[r.variant]
      .split(" (")[0];
    if (variant === "as built") variant = built;
    else if (r.variant === "gqa") variant = `GQA with ${kvHeads} KV heads`;
    const xs = data.curve_contexts, gib = (b) => L.ratio(b, GiB);
    const series = [{ label: `KV cache, ${variant}, ${precision}`, colour: C.blue, width: 2.4, xs,
      ys: r.curve_bytes.map(gib) }];
    if (r.curve_bytes_as_built) {
      series.push({ label: `KV cache, ${built}`, colour: C.grey, dash: "2 3", width: 1.6, xs,
        ys: r.curve_bytes_as_built.map(gib) });
    }
    series.push(
      { label: `weights, bf16 (${L.binaryBytes(r.weight_bytes)})`, colour: C.orange, dash: "8 4",
        width: 2, y: gib(r.weight_bytes) },
      { label: `one GPU (${t.gpu_memory})`, colour: C.black, dash: "10 3 2 3", width: 1.2,
        y: gib(r.gpu_bytes) });
    if (xs[0] < r.max_seq_len && r.max_seq_len < xs[xs.length - 1]) {
      series.push({ label: `model's maximum context (${L.integer(r.max_seq_len)})`,
        colour: C.sky_blue, dash: "6 3", width: 1.5, x: r.max_seq_len });
    }
    const S = Number(r.context), markers = [];
    if (xs[0] <= S && S <= xs[xs.length - 1]) {
      markers.push({ label: `${L.integer(r.context)} tokens: ${L.binaryBytes(r.batch_bytes)}`,
        x: S, y: gib(r.batch_bytes), colour: C.vermillion });
    }
    const title = `KV cache of ${L.integer(r.batch)} sequence${r.batch !== 1n ? "s" : ""}: ` +
      r.model.key;
    return L.plot({ series, markers, title, xlabel: "context per sequence (tokens)",
      ylabel: "memory (GiB = 2^30 bytes)" });
  }

  // what the status line says after a move (L.announce)
  function said(data, r, s) {
    const t = texts(r);
    const variant = Object.fromEntries(data.variants.map(([label, key]) => [key, label]))[r.variant];
    const precision = Object.fromEntries(data.precisions.map(([label, b]) =>
      [String(b), label]))[String(r.bytes_per_value)];
    return `${r.model.key}, ${variant}` + (r.variant === "gqa" ? ` with ${s.kvHeads} KV heads` : "") +
      `, ${precision}: the cache of ${L.integer(r.batch)} x ${L.integer(r.context)} tokens ` +
      `holds ${t.batch_bytes}; ${t.sequences_fit} sequences fit beside the weights on one ` +
      `${t.gpu_memory} GPU; the cache is ${t.kv_share} of a decode step's bytes.`;
  }

  // -- reading the controls ------------------------------------------------------------------
  function readBatch(text, max) {
    const clean = text.trim().replace(/[,_\s]/g, "");
    if (!/^\d+$/.test(clean) || BigInt(clean) < 1n || BigInt(clean) > BigInt(max)) {
      throw new Error(`batch must be a whole number from 1 to ${L.integer(max)}, got ` +
        `${JSON.stringify(text)}`);
    }
    return BigInt(clean);
  }

  function readGpu(text, [low, high]) {
    const value = Number(text.trim());
    if (text.trim() === "" || !Number.isFinite(value) || value < low || value > high) {
      throw new Error(`gpu_memory_gib must be a number >= ${L.general(low)} and <= ` +
        `${L.general(high)}, got ${JSON.stringify(text)}`);
    }
    return value;
  }

  L.sizeCalculator = function (root) {
    const data = L.data(root);
    const c = (name) => L.control(root, name);
    const context = L.stepSlider(c("context"), data.contexts,
      (n) => L.integer(n) + " tokens" + (n === 1e6 ? " (10^6)" : ""), () => update());
    const kvChoices = () => {           // GQA's KV heads: the divisors toykv sized for this model
      const m = data.models.find((entry) => entry.key === c("model").value);
      const select = c("kv_heads");
      select.innerHTML = Object.keys(m.gqa).map(Number).sort((a, b) => a - b)
        .map((k) => `<option value="${k}">${k}</option>`).join("");
      select.value = String(m.gqa_default);
    };

    function settings() {
      return { model: c("model").value, variant: c("attention").value,
        kvHeads: Number(c("kv_heads").value), precision: c("precision").value,
        context: BigInt(context()), batch: readBatch(c("batch").value, data.max_count),
        gpu: readGpu(c("gpu_memory_gib").value, data.gpu_memory_gib) };
    }

    function update(moved = true) {
      L.part(root, "kv_heads_box").hidden = c("attention").value !== "gqa";
      let s, r;
      try {
        s = settings();
        r = report(data, s);
      } catch (err) {
        L.part(root, "message").innerHTML = `<div class='toykv-problem'><b>Problem:</b> ` +
          `${L.esc(err.message)}</div>`;
        for (const part of ["numbers", "variants", "source", "plot"]) L.part(root, part).innerHTML = "";
        root.dataset.state = "problem";
        return;
      }
      L.part(root, "message").innerHTML = notes(r).map((note) => `<div class='toykv-note'>` +
        `<b>Note:</b> ${L.esc(note)}</div>`).join("");
      L.part(root, "numbers").innerHTML = numbersHtml(data, r);
      L.part(root, "variants").innerHTML = variantsHtml(r);
      L.part(root, "source").innerHTML = sourceHtml(r.model, data.colours);
      L.part(root, "plot").innerHTML = plotSvg(data, r, s.kvHeads);
      root.dataset.state = "ok";
      if (moved) L.announce(root, said(data, r, s));
    }

    c("model").addEventListener("change", () => { kvChoices(); update(); });
    c("attention").addEventListener("change", update);
    c("kv_heads").addEventListener("change", update);
    c("precision").addEventListener("change", update);
    L.onApply(c("batch"), update);
    L.onApply(c("gpu_memory_gib"), update);
    kvChoices();
    c("kv_heads").value = String(data.state.kv_heads);
    update(false);
    root.toykv = { report: () => report(data, settings()), update };
  };
  L.sizeCalculatorReport = report;        // for tests: the page's own arithmetic
})();
