// toykv live views in the static book: what all three share (exact arithmetic, Python's
// number formats, an SVG line plot, small DOM helpers). Every number the views show comes
// from data toykv wrote into the page; tests/test_static_twins.py checks the results
// against toykv. Loaded once per page, however many views it has.
(function () {
  "use strict";
  if (window.toykvLive) return;
  const L = (window.toykvLive = {});

  // -- exact arithmetic ------------------------------------------------------------
  function bitLength(n) { return n === 0n ? 0 : n.toString(2).length; }

  // a / b for BigInts a >= 0, b > 0: the double nearest the exact quotient, as Python's
  // int / int gives it (both below 2^53 need no care: IEEE division is correctly rounded).
  L.ratio = function (a, b) {
    if (a === 0n) return 0;
    const safe = 2n ** 53n;
    if (a < safe && b < safe) return Number(a) / Number(b);
    const shift = Math.max(0, 66 - (bitLength(a) - bitLength(b)));
    const scaled = a << BigInt(shift);
    let q = scaled / b;
    q = (q << 1n) | (scaled % b === 0n ? 0n : 1n);     // a sticky bit decides the rounding
    return Number(q) * Math.pow(2, -(shift + 1));      // Number(BigInt) rounds to nearest
  };

  L.min = (a, b) => (a < b ? a : b);
  L.max = (a, b) => (a > b ? a : b);

  // -- Python's number formats ---------------------------------------------------------
  function group(digits) { return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

  // toFixed / toExponential round ties away from zero; Python rounds them to even. A tie
  // shows as a 5 followed by zeros in 25 further exact digits (JavaScript prints doubles'
  // exact decimal expansions); then the truncated form is used if its last digit is even.
  function evenTies(x, digits, method) {
    const rounded = x[method](digits);
    const longer = x[method](digits + 25);
    const [mantissa, exponent] = longer.split("e");
    if (mantissa.slice(-25) !== "5" + "0".repeat(24)) return rounded;
    let truncated = mantissa.slice(0, -25).replace(/\.$/, "");
    const last = truncated.replace(/\D/g, "").slice(-1);
    if (Number(last) % 2 !== 0) return rounded;
    return exponent === undefined ? truncated : truncated + "e" + exponent;
  }

  // Python f"{x:,.{d}f}" (x a Number, or a BigInt when d is 0)
  L.fixed = function (x, d) {
    if (typeof x === "bigint") return (x < 0n ? "-" : "") + group((x < 0n ? -x : x).toString());
    const negative = x < 0 || Object.is(x, -0);
    const text = evenTies(Math.abs(x), d, "toFixed");
    const [whole, fraction] = text.split(".");
    return (negative && Number(text) !== 0 ? "-" : "") + group(whole) +
      (fraction !== undefined ? "." + fraction : "");
  };

  // Python f"{x:.{d}e}": two exponent digits at least
  L.exp = function (x, d) {
    const text = evenTies(x, d, "toExponential");
    return text.replace(/e([+-])(\d)$/, "e$10$2");
  };

  // Python f"{x:,g}" (6 significant digits, trailing zeros dropped)
  L.general = function (x, grouped) {
    if (x === 0) return "0";
    const e = Number(L.exp(Math.abs(x), 5).split("e")[1]);
    let text;
    if (e < -4 || e >= 6) {
      const [m, ex] = L.exp(x, 5).split("e");
      text = m.replace(/\.?0+$/, "") + "e" + ex;
    } else {
      text = evenTies(Math.abs(x), 5 - e, "toFixed").replace(/(\.\d*?)0+$/, "$1")
        .replace(/\.$/, "");
      const [whole, fraction] = text.split(".");
      text = (x < 0 ? "-" : "") + (grouped ? group(whole) : whole) +
        (fraction !== undefined ? "." + fraction : "");
    }
    return text;
  };

  L.integer = (n) => L.fixed(BigInt(n), 0);

  const DECIMAL = [[10n ** 12n, "TB"], [10n ** 9n, "GB"], [10n ** 6n, "MB"], [10n ** 3n, "kB"]];
  const BINARY = [[2n ** 40n, "TiB"], [2n ** 30n, "GiB"], [2n ** 20n, "MiB"], [2n ** 10n, "KiB"]];

  // toykv.widgets._style._scaled: n is a BigInt (exact bytes) or a Number
  function scaled(n, units, digits) {
    for (const [size, name] of units) {
      if (typeof n === "bigint" ? n >= size : n >= Number(size)) {
        const value = typeof n === "bigint" ? L.ratio(n, size) : n / Number(size);
        return L.fixed(value, digits) + " " + name;
      }
    }
    const whole = typeof n === "bigint" || Number.isInteger(n);
    return (typeof n === "bigint" ? L.fixed(n, 0) : L.fixed(n, whole ? 0 : digits)) + " B";
  }
  L.decimalBytes = (n, digits = 2) => scaled(n, DECIMAL, digits);
  L.binaryBytes = (n, digits = 2) => scaled(n, BINARY, digits);
  L.bothBytes = (n, digits = 2) => `${L.binaryBytes(n, digits)} (${L.decimalBytes(n, digits)})`;

  // -- DOM helpers -----------------------------------------------------------------------
  L.esc = (text) => String(text).replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" })[c]);

  // <tag data-quantity=name data-value=exact>shown</tag>; exact: BigInt, Number or bool
  L.figure = function (name, exact, shown, tag = "b", extra = "") {
    return `<${tag} data-quantity="${name}" data-value="${L.esc(String(exact))}"${extra}>` +
      `${shown}</${tag}>`;
  };

  L.data = (root) => JSON.parse(root.querySelector("script[data-part=data]").textContent);
  L.part = (root, name) => root.querySelector(`[data-part="${name}"]`);
  L.control = (root, name) => root.querySelector(`[data-control="${name}"]`);

  // What a reader's move changed, in words, on the twin's status line (a role=status region,
  // hidden from sight: the figures themselves change on screen). Called after a move only,
  // never on load, so a screen reader speaks it once, when it is news.
  L.announce = function (root, text) {
    const status = L.part(root, "status");
    if (status) status.textContent = text;
  };

  // Number inputs apply on Enter and when they lose focus (a change), not on every key.
  L.onApply = function (input, apply) {
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); apply(); }
    });
    input.addEventListener("change", apply);
  };

  // A slider over a list of values: one step per value, so the arrow keys move one
  // position; data-value and aria-valuetext say the value it stands on.
  L.stepSlider = function (input, values, label, onMove) {
    const show = () => {
      const value = values[Number(input.value)];
      input.dataset.value = String(value);
      input.setAttribute("aria-valuetext", label(value));
      const out = input.parentElement.querySelector("output");
      if (out) out.textContent = label(value);
      return value;
    };
    input.addEventListener("input", () => onMove(show()));
    show();
    return () => values[Number(input.value)];
  };

  // -- an SVG line plot (toykv.widgets._svg_plot, ported) ---------------------------------------
  // spec: {series: [{label, colour, dash, width, xs, ys, shape, mark_every} or {.., y} or
  // {.., x}] (a curve's shape rides on every mark_every-th point and its legend), markers:
  // [{label, x, y, colour, shape}], title, xlabel, ylabel, width, height, ylinear: [lo, hi]
  // (a linear y axis; default log-log fitted to the data), yticks (labels for a linear axis)}
  const FONT = "font-family='sans-serif' fill='#222222'";
  function plain(v) { return v >= 1 ? L.fixed(v, 0) : L.general(v); }
  function ticks(lo, hi) {
    const decades = [];
    for (let d = Math.ceil(lo); d <= Math.floor(hi); d++) decades.push(d);
    if (decades.length >= 3) {
      const step = decades.length <= 7 ? 1 : 2;
      return decades.filter((_, i) => i % step === 0).map((d) => Math.pow(10, d));
    }
    const out = [];
    for (let d = Math.floor(lo); d <= Math.ceil(hi); d++) {
      for (const m of [1, 2, 5]) {
        const v = m * Math.pow(10, d);
        if (lo <= Math.log10(v) && Math.log10(v) <= hi) out.push(v);
      }
    }
    return out;
  }
  function dash(d) { return d ? ` stroke-dasharray='${d}'` : ""; }
  // _svg_plot._shape: circle, square, triangle, down, diamond or cross, outlined in black
  function shapeSvg(shape, colour, cx, cy, r) {
    const style = `fill='${colour}' stroke='#000000' stroke-width='1.2'`;
    const polygon = (points) => "<polygon points='" + points.map(([dx, dy]) =>
      `${(cx + dx).toFixed(1)},${(cy + dy).toFixed(1)}`).join(" ") + `' ${style}/>`;
    if (shape === "square")
      return `<rect x='${(cx - r).toFixed(1)}' y='${(cy - r).toFixed(1)}' width='${2 * r}' ` +
        `height='${2 * r}' ${style}/>`;
    if (shape === "triangle") return polygon([[0, -r - 1], [r + 1, r], [-r - 1, r]]);
    if (shape === "down") return polygon([[0, r + 1], [r + 1, -r], [-r - 1, -r]]);
    if (shape === "diamond") return polygon([[0, -r - 1], [r + 1, 0], [0, r + 1], [-r - 1, 0]]);
    if (shape === "cross") {
      const a = r + 0.5, w = r / 2.5;
      return polygon([[-a, -a + w], [-a + w, -a], [0, -w], [a - w, -a], [a, -a + w], [w, 0],
        [a, a - w], [a - w, a], [0, w], [-a + w, a], [-a, a - w], [-w, 0]]);
    }
    return `<circle cx='${cx.toFixed(1)}' cy='${cy.toFixed(1)}' r='${r}' ${style}/>`;
  }
  const markerShape = (m, cx, cy) => shapeSvg(m.shape, m.colour, cx, cy, 5);

  L.plot = function (spec) {
    const width = spec.width || 640, height = spec.height || 410;
    const markers = spec.markers || [];
    const entries = spec.series.filter((s) => s.label).concat(markers.filter((m) => m.label));
    const legendRows = Math.ceil(entries.length / 2);
    const left = 70, right = 36, top = 26, bottom = 44 + 17 * legendRows;
    const plotW = width - left - right, plotH = height - top - bottom;
    const xs = [], ys = [];
    for (const s of spec.series) {
      (s.xs || []).forEach((x) => { if (x > 0) xs.push(x); });
      (s.ys || []).forEach((y) => { if (y > 0) ys.push(y); });
      if (s.y !== undefined && s.y > 0) ys.push(s.y);
    }
    markers.forEach((m) => { if (m.y > 0) ys.push(m.y); });
    const x0 = Math.log10(Math.min(...xs)), x1 = Math.log10(Math.max(...xs));
    const linear = spec.ylinear;
    const y0 = linear ? linear[0] : Math.log10(Math.min(...ys) / 2);
    const y1 = linear ? linear[1] : Math.log10(Math.max(...ys) * 2);
    const px = (x) => left + (Math.log10(x) - x0) / (x1 - x0) * plotW;
    const py = (y) => top + (y1 - (linear ? y : Math.log10(y))) / (y1 - y0) * plotH;
    const out = [`<svg xmlns='http://www.w3.org/2000/svg' width='${width}' height='${height}' ` +
      `viewBox='0 0 ${width} ${height}' role='img' aria-label='${L.esc(spec.title)}' ` +
      `style='background:#FFFFFF;max-width:100%;height:auto'><title>${L.esc(spec.title)}</title>`];
    for (const v of ticks(x0, x1)) {
      const x = px(v);
      out.push(`<line x1='${x.toFixed(1)}' y1='${top}' x2='${x.toFixed(1)}' y2='${top + plotH}' ` +
        `stroke='#DDDDDD'/><text x='${x.toFixed(1)}' y='${top + plotH + 14}' font-size='11' ` +
        `text-anchor='middle' ${FONT}>${plain(v)}</text>`);
    }
    const yticks = linear ? (spec.yticks || []) : ticks(y0, y1).map((v) => [v, plain(v)]);
    for (const [v, text] of yticks) {
      const y = py(v);
      out.push(`<line x1='${left}' y1='${y.toFixed(1)}' x2='${left + plotW}' y2='${y.toFixed(1)}' ` +
        `stroke='#DDDDDD'/><text x='${left - 5}' y='${(y + 4).toFixed(1)}' font-size='11' ` +
        `text-anchor='end' ${FONT}>${text}</text>`);
    }
    for (const s of spec.series) {
      const style = `fill='none' stroke='${s.colour}' stroke-width='${s.width || 2}'${dash(s.dash)}`;
      if (s.y !== undefined) {
        out.push(`<line x1='${left}' y1='${py(s.y).toFixed(1)}' x2='${left + plotW}' ` +
          `y2='${py(s.y).toFixed(1)}' ${style}/>`);
      } else if (s.x !== undefined) {
        out.push(`<line x1='${px(s.x).toFixed(1)}' y1='${top}' x2='${px(s.x).toFixed(1)}' ` +
          `y2='${top + plotH}' ${style}/>`);
      } else {
        const points = s.xs.map((x, i) => [x, s.ys[i]])
          .filter(([x, y]) => x > 0 && (linear || y > 0))
          .map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" ");
        if (points) out.push(`<polyline points='${points}' ${style} stroke-linejoin='round'/>`);
      }
    }
    for (const s of spec.series) {       // their shapes above every line
      if (!s.shape || !s.xs) continue;
      s.xs.forEach((x, i) => {
        if (i % (s.mark_every || 8) === 0 && x > 0 && (linear || s.ys[i] > 0))
          out.push(shapeSvg(s.shape, s.colour, px(x), py(s.ys[i]), 3.5));
      });
    }
    for (const m of markers) out.push(markerShape(m, px(m.x), py(m.y)));
    out.push(`<rect x='${left}' y='${top}' width='${plotW}' height='${plotH}' fill='none' ` +
      `stroke='#444444'/>`);
    out.push(`<text x='${left + plotW / 2}' y='16' font-size='13' text-anchor='middle' ` +
      `font-weight='bold' ${FONT}>${L.esc(spec.title)}</text>`);
    out.push(`<text x='${left + plotW / 2}' y='${top + plotH + 31}' font-size='12' ` +
      `text-anchor='middle' ${FONT}>${L.esc(spec.xlabel)}</text>`);
    out.push(`<text transform='translate(16 ${top + plotH / 2}) rotate(-90)' font-size='12' ` +
      `text-anchor='middle' ${FONT}>${L.esc(spec.ylabel)}</text>`);
    entries.forEach((entry, i) => {
      const x = left + (i % 2) * (plotW / 2), y = top + plotH + 48 + 17 * Math.floor(i / 2);
      const sample = markers.includes(entry) ? markerShape(entry, x + 12, y - 4)
        : `<line x1='${x}' y1='${y - 4}' x2='${x + 24}' y2='${y - 4}' stroke='${entry.colour}' ` +
          `stroke-width='${entry.width || 2}'${dash(entry.dash)}/>` +
          (entry.shape ? shapeSvg(entry.shape, entry.colour, x + 12, y - 4, 3.5) : "");
      out.push(`${sample}<text x='${x + 30}' y='${y}' font-size='11' ${FONT}>` +
        `${L.esc(entry.label)}</text>`);
    });
    out.push("</svg>");
    return out.join("");
  };
})();
