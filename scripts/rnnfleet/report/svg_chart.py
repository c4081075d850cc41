"""Line charts written as SVG text, without a plotting library: the report's per-dataset
loss curve is drawn once for every trained dataset, so its cost counts per dataset.

What it promises:
- A chart is panels stacked top to bottom, each with lines, shaded bands, vertical marks,
  a title, axis labels and a legend on the right; the axes span the panel's own data (5%
  margins, as matplotlib's defaults), with round tick values (integers on an `integer` axis,
  UTC clock times and dates on a `time` axis whose x values are epoch seconds).
- Points that are not finite break a line and are left out of the limits.
- Text stays text (laid out by the viewer in its sans-serif font), coordinates are rounded
  to a tenth of a pixel, and the same chart gives the same bytes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

WIDTH = 800
PLOT_LEFT, PLOT_RIGHT = 84, 560  # the legend is right of the plot
LEGEND_LEFT, LEGEND_WIDTH, LEGEND_ROW = 576, 214, 18
TITLE_SIZE, TEXT_SIZE, TITLE_ROW = 13, 11, 17
AXIS_COLOUR, AXIS_WIDTH = "#000", 0.8
MARK_WIDTH = 1.5
MARGIN = 0.05  # of the data's span, on each side
TICKS_WANTED = 6
INTEGER_TICKS_WANTED = 8  # every epoch of a short training
# Tick steps of a time axis: seconds (whole minutes, hours, days, weeks), then months.
TIME_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400)
MONTH_STEPS = (1, 2, 3, 6, 12, 24, 60, 120)


@dataclass(frozen=True)
class Line:
    xs: Sequence[float]
    ys: Sequence[float]
    label: str
    colour: str
    width: float = 1.5
    dash: str = ""  # an SVG stroke-dasharray, e.g. "6 3"; "" for a solid line
    markers: bool = False  # a dot at each point


@dataclass(frozen=True)
class Band:
    """The region between lows and highs, shaded."""

    xs: Sequence[float]
    lows: Sequence[float]
    highs: Sequence[float]
    label: str
    colour: str
    opacity: float = 0.12


@dataclass(frozen=True)
class Mark:
    """A vertical line across the whole panel at x."""

    x: float
    label: str
    colour: str
    dash: str = "2 3"


@dataclass(frozen=True)
class Panel:
    title: str  # lines separated by "\n"
    x_label: str
    y_label: str
    plot_height: int
    lines: tuple[Line, ...] = ()
    bands: tuple[Band, ...] = ()  # drawn in order: the widest first
    marks: tuple[Mark, ...] = ()
    x_axis: str = "number"  # "number", "integer", or "time" (x in epoch seconds, UTC)

    def x_limits(self) -> tuple[float, float]:
        xs = [x for line in self.lines for x in line.xs] + [x for band in self.bands for x in band.xs]
        return padded_limits(xs + [mark.x for mark in self.marks])

    def y_limits(self) -> tuple[float, float]:
        ys = [y for line in self.lines for y in line.ys]
        ys += [y for band in self.bands for y in (*band.lows, *band.highs)]
        return padded_limits(ys)


def is_finite(value: float | None) -> bool:
    """A value drawn: not None, NaN or infinite."""
    return value is not None and math.isfinite(value)


def padded_limits(values: Sequence[float]) -> tuple[float, float]:
    """(low, high) around the finite values, MARGIN of their span wider on each side."""
    finite = [float(value) for value in values if is_finite(value)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    span = high - low or abs(low) or 1.0
    return low - MARGIN * span, high + MARGIN * span


def step_decimals(step: float) -> int:
    """The fewest decimals that write multiples of step exactly (0.25 -> 2, 5 -> 0)."""
    for decimals in range(13):
        if abs(round(step, decimals) - step) <= step * 1e-6:
            return decimals
    return 12


def number_ticks(low: float, high: float, integer: bool = False) -> list[tuple[float, str]]:
    """(value, label) of round ticks within [low, high]: steps of 1, 2, 2.5 or 5 x 10^k."""
    rough = (high - low) / ((INTEGER_TICKS_WANTED if integer else TICKS_WANTED) - 1)
    magnitude = 10.0 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough * 0.999)
    if integer:
        step = float(max(1, math.ceil(step)))
    decimals = step_decimals(step)
    ticks = []
    for index in range(math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9) + 1):
        value = index * step
        label = f"{value:.{decimals}f}" if decimals <= 6 else f"{value:.3g}"
        ticks.append((value, "0" if float(label) == 0 else label))
    return ticks


def time_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """(epoch seconds, label) at whole minutes, hours, days or months (UTC); the date is
    written under the first tick and wherever it changes (the year, for days and months)."""
    step = next((step for step in TIME_STEPS if (high - low) / step <= TICKS_WANTED + 1), None)
    if step is None:
        moments = month_starts(low, high)
    else:
        moments = [datetime.fromtimestamp(index * step, tz=UTC) for index in range(math.ceil(low / step), math.floor(high / step) + 1)]  # fmt: skip
    ticks, previous = [], None
    for moment in moments:
        if step is not None and step < 86400:
            label = moment.strftime("%H:%M")
            if previous is None or moment.date() != previous.date():
                label += "\n" + moment.strftime("%Y-%m-%d")
        else:
            label = moment.strftime("%b %d" if step is not None else "%b")
            if previous is None or moment.year != previous.year:
                label += f"\n{moment.year}"
        ticks.append((moment.timestamp(), label))
        previous = moment
    return ticks


def month_starts(low: float, high: float) -> list[datetime]:
    """The first days of every 1, 2, 3, 6, ... months within [low, high], at most about
    TICKS_WANTED of them."""
    first, last = datetime.fromtimestamp(low, tz=UTC), datetime.fromtimestamp(high, tz=UTC)
    months = (last.year - first.year) * 12 + last.month - first.month
    every = next((step for step in MONTH_STEPS if months / step <= TICKS_WANTED + 1), MONTH_STEPS[-1])
    starts = []
    for index in range(first.year * 12 + first.month - 1, last.year * 12 + last.month):
        moment = datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)
        if index % every == 0 and low <= moment.timestamp() <= high:
            starts.append(moment)
    return starts


def number(value: float) -> str:
    """A coordinate to a tenth of a pixel, written short."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def text_element(x: float, y: float, text: str, size: int, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{number(x)}" y="{number(y)}" font-size="{size}" text-anchor="{anchor}"{extra}>'
        f"{html.escape(text, quote=False)}</text>"
    )


def finite_runs(xs: Sequence[float], ys: Sequence[float]) -> list[list[tuple[float, float]]]:
    """The points as runs of consecutive finite points (a gap where a value is not finite)."""
    runs, run = [], []
    for x, y in zip(xs, ys, strict=True):
        if is_finite(x) and is_finite(y):
            run.append((x, y))
        elif run:
            runs.append(run)
            run = []
    return [*runs, run] if run else runs


class Frame:
    """A panel's plot area on the page: data coordinates to pixels."""

    def __init__(self, panel: Panel, top: float):
        self.top, self.bottom = top, top + panel.plot_height
        self.x_low, self.x_high = panel.x_limits()
        self.y_low, self.y_high = panel.y_limits()

    def x(self, value: float) -> float:
        return PLOT_LEFT + (value - self.x_low) / (self.x_high - self.x_low) * (PLOT_RIGHT - PLOT_LEFT)

    def y(self, value: float) -> float:
        return self.bottom - (value - self.y_low) / (self.y_high - self.y_low) * (self.bottom - self.top)

    def points(self, run: list[tuple[float, float]]) -> str:
        return " ".join(f"{number(self.x(x))},{number(self.y(y))}" for x, y in run)


def stroke(colour: str, width: float, dash: str = "") -> str:
    """The stroke attributes of a line: colour, width and dashes ("": solid)."""
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return f'stroke="{colour}" stroke-width="{width}"{dashes}'


def line_elements(frame: Frame, line: Line) -> list[str]:
    elements = []
    for run in finite_runs(line.xs, line.ys):
        elements.append(
            f'<polyline points="{frame.points(run)}" fill="none" {stroke(line.colour, line.width, line.dash)} '
            'stroke-linejoin="round"/>'
        )
        if line.markers:
            elements += [
                f'<circle cx="{number(frame.x(x))}" cy="{number(frame.y(y))}" r="3.5" fill="{line.colour}"/>'
                for x, y in run
            ]
    return elements


def band_element(frame: Frame, band: Band) -> str:
    inside = [
        (x, low, high)
        for x, low, high in zip(band.xs, band.lows, band.highs, strict=True)
        if is_finite(x) and is_finite(low) and is_finite(high)
    ]
    if not inside:
        return ""
    upper = frame.points([(x, high) for x, _, high in inside])
    lower = frame.points([(x, low) for x, low, _ in reversed(inside)])
    return f'<polygon points="{upper} {lower}" fill="{band.colour}" fill-opacity="{band.opacity}" stroke="none"/>'


def axis_elements(frame: Frame, panel: Panel) -> tuple[list[str], float]:
    """The frame, the ticks and their labels, the axis labels; and the x label's baseline,
    which the tick labels' rows push down."""
    left, right, top, bottom = PLOT_LEFT, PLOT_RIGHT, frame.top, frame.bottom
    elements = [
        f'<rect x="{left}" y="{number(top)}" width="{right - left}" height="{number(bottom - top)}" '
        f'fill="none" {stroke(AXIS_COLOUR, AXIS_WIDTH)}/>'
    ]
    x_ticks = (
        time_ticks(frame.x_low, frame.x_high)
        if panel.x_axis == "time"
        else number_ticks(frame.x_low, frame.x_high, integer=panel.x_axis == "integer")
    )
    label_rows = 1
    for value, label in x_ticks:
        x = frame.x(value)
        elements.append(f'<line x1="{number(x)}" y1="{number(bottom)}" x2="{number(x)}" y2="{number(bottom + 4)}" {stroke(AXIS_COLOUR, AXIS_WIDTH)}/>')  # fmt: skip
        for row, part in enumerate(label.split("\n")):
            elements.append(text_element(x, bottom + 17 + row * 13, part, TEXT_SIZE, "middle"))
        label_rows = max(label_rows, label.count("\n") + 1)
    for value, label in number_ticks(frame.y_low, frame.y_high):
        y = frame.y(value)
        elements.append(f'<line x1="{left - 4}" y1="{number(y)}" x2="{left}" y2="{number(y)}" {stroke(AXIS_COLOUR, AXIS_WIDTH)}/>')  # fmt: skip
        elements.append(text_element(left - 7, y + 4, label, TEXT_SIZE, "end"))
    x_label_baseline = bottom + 19 + label_rows * 13
    elements.append(text_element((left + right) / 2, x_label_baseline, panel.x_label, 12, "middle"))
    middle = (top + bottom) / 2
    elements.append(
        text_element(16, middle, panel.y_label, 12, "middle", f' transform="rotate(-90 16 {number(middle)})"')
    )
    return elements, x_label_baseline


def line_sample(strokes: str) -> str:
    """A legend row's short line, its place left to fill in (x, x2, y)."""
    return f'<line x1="{{x}}" y1="{{y}}" x2="{{x2}}" y2="{{y}}" {strokes}/>'


def legend_elements(panel: Panel, top: float) -> list[str]:
    """One row per labelled line, band and mark, in a box right of the plot."""
    rows = []
    for line in panel.lines:
        sample = line_sample(stroke(line.colour, line.width, line.dash))
        if line.markers:
            sample += f'<circle cx="{{middle}}" cy="{{y}}" r="3.5" fill="{line.colour}"/>'
        rows.append((sample, line.label))
    for mark in panel.marks:
        rows.append((line_sample(stroke(mark.colour, MARK_WIDTH, mark.dash)), mark.label))
    for band in panel.bands:
        rows.append((f'<rect x="{{x}}" y="{{top}}" width="24" height="9" fill="{band.colour}" fill-opacity="{band.opacity}"/>', band.label))  # fmt: skip
    if not rows:
        return []
    elements = [
        f'<rect x="{LEGEND_LEFT}" y="{number(top)}" width="{LEGEND_WIDTH}" height="{len(rows) * LEGEND_ROW + 8}" '
        'fill="#fff" stroke="#ccc" stroke-width="0.8" rx="3"/>'
    ]
    for index, (sample, label) in enumerate(rows):
        y = top + 4 + LEGEND_ROW * index + LEGEND_ROW / 2
        x = LEGEND_LEFT + 8
        elements.append(sample.format(x=x, x2=x + 24, y=number(y), middle=x + 12, top=number(y - 4.5)))
        elements.append(text_element(x + 32, y + 4, label, TEXT_SIZE))
    return elements


def chart_svg(panels: Sequence[Panel]) -> bytes:
    """The panels, stacked, as one SVG document."""
    body, top = [], 0.0
    for panel in panels:
        title_lines = [line for line in panel.title.split("\n") if line]
        for row, title_line in enumerate(title_lines):
            body.append(text_element(12, top + 18 + row * TITLE_ROW, title_line, TITLE_SIZE))
        frame = Frame(panel, top + 26 + TITLE_ROW * len(title_lines))
        body += [band_element(frame, band) for band in panel.bands]
        for mark in panel.marks:
            x = number(frame.x(mark.x))
            body.append(f'<line x1="{x}" y1="{number(frame.top)}" x2="{x}" y2="{number(frame.bottom)}" {stroke(mark.colour, MARK_WIDTH, mark.dash)}/>')  # fmt: skip
        for line in panel.lines:
            body += line_elements(frame, line)
        axis, x_label_baseline = axis_elements(frame, panel)
        body += axis + legend_elements(panel, frame.top)
        top = x_label_baseline + 15
    height = math.ceil(top)
    head = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        'font-family="DejaVu Sans, Arial, sans-serif">\n'
        f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>\n'
    )
    return (head + "\n".join(element for element in body if element) + "\n</svg>\n").encode()
