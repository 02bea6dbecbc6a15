"""A small line plot as inline SVG: log-log for the size calculator's memory against context,
log-x with a linear y axis for the share explorer's share against context.

Written by hand rather than drawn with matplotlib: a matplotlib PNG took 90-170 ms per update
on the course's 2-core machine (more than the whole update may take), this string takes well
under a millisecond, stays sharp at any zoom, and the static book shows it like any HTML.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

FONT = "font-family='sans-serif' fill='#222222'"


@dataclass(frozen=True)
class Series:
    """A curve (xs and ys), or a horizontal line at y, or a vertical line at x (inside the
    curves' range); dash is an SVG stroke-dasharray ('' is solid), so lines differ in pattern
    as well as colour. A curve with a shape (a Marker's) carries it on every mark_every-th
    point and in its legend sample, so curves of one dash differ in greyscale too."""

    label: str
    colour: str
    dash: str = ""
    width: float = 2.0
    xs: tuple = ()
    ys: tuple = ()
    y: float | None = None
    x: float | None = None
    shape: str = ""
    mark_every: int = 8


@dataclass(frozen=True)
class Marker:
    """A point; shape is one of SHAPES (told apart without colour). An empty label keeps it
    out of the legend."""

    label: str
    x: float
    y: float
    colour: str
    shape: str = "circle"


def loglog_svg(series, marker, title: str, xlabel: str, ylabel: str,
               width: int = 640, height: int = 410, ylinear=None, yticks=()) -> str:
    """The plot as an <svg> element: log-log axes fitted to the data, a legend below.

    marker: a Marker, a list of them, or None. ylinear=(low, high): a linear y axis over that
    range instead, with yticks [(value, label), ...]. Series and markers with an empty label
    stay out of the legend (toykv/widgets/static/live_common.js draws the same plot)."""
    markers = [] if marker is None else [marker] if isinstance(marker, Marker) else list(marker)
    entries = [e for e in list(series) + markers if e.label]
    legend_rows = (len(entries) + 1) // 2
    left, right, top = 70, 36, 26
    bottom = 44 + 17 * legend_rows
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for s in series for x in s.xs if x > 0]
    ys = [y for s in series for y in s.ys if y > 0] + [s.y for s in series if s.y and s.y > 0]
    ys += [m.y for m in markers if m.y > 0]
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    if ylinear:
        y0, y1 = ylinear
    else:
        y0, y1 = math.log10(min(ys) / 2), math.log10(max(ys) * 2)

    def px(x):
        return left + (math.log10(x) - x0) / (x1 - x0) * plot_w

    def py(y):
        return top + (y1 - (y if ylinear else math.log10(y))) / (y1 - y0) * plot_h

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' role='img' aria-label='{_esc(title)}' "
           f"style='background:#FFFFFF'><title>{_esc(title)}</title>"]
    for value in _ticks(x0, x1):
        x = px(value)
        out.append(f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{top + plot_h}' "
                   f"stroke='#DDDDDD'/><text x='{x:.1f}' y='{top + plot_h + 14}' font-size='11' "
                   f"text-anchor='middle' {FONT}>{_plain(value)}</text>")
    y_ticks = yticks if ylinear else [(value, _plain(value)) for value in _ticks(y0, y1)]
    for value, text in y_ticks:
        y = py(value)
        out.append(f"<line x1='{left}' y1='{y:.1f}' x2='{left + plot_w}' y2='{y:.1f}' "
                   f"stroke='#DDDDDD'/><text x='{left - 5}' y='{y + 4:.1f}' font-size='11' "
                   f"text-anchor='end' {FONT}>{_esc(text)}</text>")
    for s in series:                       # every value lies inside the axes: no clipping needed
        out.append(_series_path(s, px, py, left, top, plot_w, plot_h, bool(ylinear)))
    for s in series:                       # their shapes above every line
        out += [_shape(s.shape, s.colour, px(x), py(y), 3.5)
                for i, (x, y) in enumerate(zip(s.xs, s.ys)) if s.shape and i % s.mark_every == 0
                and x > 0 and (ylinear or y > 0)]
    for m in markers:
        out.append(_marker(m, px(m.x), py(m.y)))
    out.append(f"<rect x='{left}' y='{top}' width='{plot_w}' height='{plot_h}' fill='none' "
               f"stroke='#444444'/>")
    out.append(f"<text x='{left + plot_w / 2}' y='16' font-size='13' text-anchor='middle' "
               f"font-weight='bold' {FONT}>{_esc(title)}</text>")
    out.append(f"<text x='{left + plot_w / 2}' y='{top + plot_h + 31}' font-size='12' "
               f"text-anchor='middle' {FONT}>{_esc(xlabel)}</text>")
    out.append(f"<text transform='translate(16 {top + plot_h / 2}) rotate(-90)' font-size='12' "
               f"text-anchor='middle' {FONT}>{_esc(ylabel)}</text>")
    for i, entry in enumerate(entries):
        x = left + (i % 2) * (plot_w / 2)
        y = top + plot_h + 48 + 17 * (i // 2)
        if isinstance(entry, Marker):
            sample = _marker(entry, x + 12, y - 4)
        else:
            sample = (f"<line x1='{x}' y1='{y - 4}' x2='{x + 24}' y2='{y - 4}' "
                      f"stroke='{entry.colour}' stroke-width='{entry.width}'"
                      f"{_dash(entry.dash)}/>")
            if entry.shape:
                sample += _shape(entry.shape, entry.colour, x + 12, y - 4, 3.5)
        out.append(f"{sample}<text x='{x + 30}' y='{y}' font-size='11' {FONT}>"
                   f"{_esc(entry.label)}</text>")
    out.append("</svg>")
    return "".join(out)


SHAPES = ("circle", "square", "triangle", "diamond", "down", "cross")


def _marker(m: Marker, cx: float, cy: float) -> str:
    return _shape(m.shape, m.colour, cx, cy, 5)


def _shape(shape: str, colour: str, cx: float, cy: float, r: float) -> str:
    """One of SHAPES, filled with colour and outlined in black (so even a pale colour stands
    out on white), centred on (cx, cy) with radius r."""
    style = f"fill='{colour}' stroke='#000000' stroke-width='1.2'"

    def polygon(points):
        return "<polygon points='" + " ".join(f"{cx + dx:.1f},{cy + dy:.1f}"
                                               for dx, dy in points) + f"' {style}/>"
    if shape == "square":
        return f"<rect x='{cx - r:.1f}' y='{cy - r:.1f}' width='{2 * r}' height='{2 * r}' {style}/>"
    if shape == "triangle":
        return polygon([(0, -r - 1), (r + 1, r), (-r - 1, r)])
    if shape == "down":
        return polygon([(0, r + 1), (r + 1, -r), (-r - 1, -r)])
    if shape == "diamond":
        return polygon([(0, -r - 1), (r + 1, 0), (0, r + 1), (-r - 1, 0)])
    if shape == "cross":               # an X of two bars, a third of r wide
        a, w = r + 0.5, r / 2.5
        return polygon([(-a, -a + w), (-a + w, -a), (0, -w), (a - w, -a), (a, -a + w), (w, 0),
                        (a, a - w), (a - w, a), (0, w), (-a + w, a), (-a, a - w), (-w, 0)])
    return f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='{r}' {style}/>"


def _series_path(s, px, py, left, top, plot_w, plot_h, ylinear=False) -> str:
    style = f"fill='none' stroke='{s.colour}' stroke-width='{s.width}'{_dash(s.dash)}"
    if s.y is not None:
        return f"<line x1='{left}' y1='{py(s.y):.1f}' x2='{left + plot_w}' " \
               f"y2='{py(s.y):.1f}' {style}/>"
    if s.x is not None:
        return f"<line x1='{px(s.x):.1f}' y1='{top}' x2='{px(s.x):.1f}' " \
               f"y2='{top + plot_h}' {style}/>"
    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(s.xs, s.ys)
                      if x > 0 and (ylinear or y > 0))
    return f"<polyline points='{points}' {style} stroke-linejoin='round'/>" if points else ""


def _ticks(low: float, high: float) -> list[float]:
    """Tick values between 10**low and 10**high: decades (every other one when there are
    many), or 1-2-5 steps when fewer than three decades fit."""
    decades = list(range(math.ceil(low), math.floor(high) + 1))
    if len(decades) >= 3:
        step = 1 if len(decades) <= 7 else 2
        return [10.0 ** d for d in decades[::step]]
    values = [m * 10.0 ** d for d in range(math.floor(low), math.ceil(high) + 1)
              for m in (1, 2, 5)]
    return [v for v in values if low <= math.log10(v) <= high]


def _plain(value) -> str:
    """Tick labels as plain numbers: 1,000,000 rather than 1e6; 0.01 stays 0.01."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _dash(dash: str) -> str:
    return f" stroke-dasharray='{dash}'" if dash else ""


def _esc(text) -> str:
    return html.escape(str(text), quote=True)
