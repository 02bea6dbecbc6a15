// The block pool in the static book: Step, Reset, the iteration slider and the pool size
// replay the states toykv's allocator went through (toykv.widgets.block_pool.record_pool:
// the block owners after every iteration of toykv.scheduler.run_real). Nothing is computed
// here; the squares and figures are drawn as block_pool.frame_html draws them, and
// tests/test_block_pool_view.py compares them with the recording.
(function () {
  "use strict";
  const L = window.toykvLive;
  if (L.blockPool) return;

  const WHAT = { start: "the empty pool", prefill: "a prefill of newly admitted requests",
    decode: "one decode step of every running request" };
  // block_pool.frame_html's squares: a request's number in black, or white on the two
  // darkest colours (AA contrast on each); free blocks grey with a dashed outline
  function blocksHtml(data, frame) {
    const n = data.colours.length;
    return frame.owners.map((o, b) => {
      const bg = o < 0 ? data.free : data.colours[o % n];
      const fg = o >= 0 && data.light_text.includes(o % n) ? "#FFFFFF" : "#000000";
      const edge = o < 0 ? `border:1px dashed ${data.free_border};` : "";
      return `<div data-block='${b}' data-owner='${o}' title='block ${b}: ` +
        `${o < 0 ? "free" : "request " + o}' style='width:26px;height:26px;display:flex;` +
        `align-items:center;justify-content:center;font-size:11px;border-radius:3px;` +
        `box-sizing:border-box;${edge}background:${bg};color:${fg}'>${o < 0 ? "" : o}</div>`;
    }).join("");
  }

  // the pool in words, for screen readers: the squares' picture is role=img with this label
  function poolWords(run, frame) {
    const owners = [...new Set(frame.owners.filter((o) => o >= 0))].sort((a, b) => a - b);
    return `the pool's ${run.num_blocks} blocks: ${frame.used} used` +
      (owners.length ? ` (by request${owners.length > 1 ? "s" : ""} ${owners.join(", ")})` : "") +
      `, ${frame.free} free`;
  }

  // what the status line says after a move (L.announce)
  function said(run, frame) {
    return `Iteration ${frame.iteration} of ${run.frames.length - 1}, ${WHAT[frame.kind]}: ` +
      `${poolWords(run, frame)}; ${frame.running} requests running, ${frame.waiting} waiting; ` +
      `${frame.held} tokens held.`;
  }

  function statsHtml(run, frame) {
    const f = (name, v) => L.figure(name, v, L.integer(v));
    const rows = [
      ["iteration", L.figure("iteration", frame.iteration, String(frame.iteration)) +
        ` of ${run.frames.length - 1}: ${WHAT[frame.kind]}`],
      ["blocks used", f("used", frame.used) + ` of ${run.num_blocks}`],
      ["blocks free", f("free", frame.free)],
      ["requests running", f("running", frame.running)],
      ["requests waiting", f("waiting", frame.waiting)],
      ["tokens held", f("held", frame.held) + ` in ${frame.used * run.block_size} slots`],
    ];
    return "<table style='border-collapse:collapse;font-size:13px'>" + rows.map(([k, v]) =>
      `<tr><td style='padding:1px 10px 1px 0;color:#333'>${L.esc(k)}</td>` +
      `<td style='padding:1px 0'>${v}</td></tr>`).join("") + "</table>";
  }

  L.blockPool = function (root) {
    const data = L.data(root);
    const step = L.control(root, "step"), reset = L.control(root, "reset");
    const size = L.control(root, "size"), slider = L.control(root, "iteration");
    let run = data.runs[data.state.size];

    function show(moved = true) {
      const i = Number(slider.value), frame = run.frames[i];
      L.part(root, "view").innerHTML =
        "<div style='display:grid;grid-template-columns:repeat(12,26px);gap:3px;" +
        `margin:4px 0' data-part='blocks' role='img' aria-label='${poolWords(run, frame)}'>` +
        blocksHtml(data, frame) + "</div>" + statsHtml(run, frame) +
        `<div class='toykv-hint'>${run.num_blocks} blocks of ${run.block_size} tokens, ` +
        `${run.batching} batching; ${run.preemptions} preemptions in this run. Recorded ` +
        "from toykv's allocator; every request's tokens equal its tokens alone.</div>";
      step.disabled = i === run.frames.length - 1;
      if (step.disabled && document.activeElement === step) reset.focus();  // keyboard stays on
      slider.setAttribute("aria-valuetext", `iteration ${i}`);
      root.dataset.iteration = String(i);
      if (moved) L.announce(root, said(run, frame));
    }

    step.addEventListener("click", () => {
      slider.value = String(Math.min(Number(slider.value) + 1, run.frames.length - 1));
      show();
    });
    reset.addEventListener("click", () => { slider.value = "0"; show(); });
    slider.addEventListener("input", show);
    size.addEventListener("change", () => {
      run = data.runs[size.value];
      slider.max = String(run.frames.length - 1);
      slider.value = "0";
      show();
    });
    slider.max = String(run.frames.length - 1);
    slider.value = String(data.state.iteration);
    show(false);
  };
})();
