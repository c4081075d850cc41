"""Minute-bar files in the layouts people have -> the canonical bars table.

Promise: `read_bars(path, columns, read_format)` opens the file once and returns a DataFrame
with exactly the columns timestamp (datetime64[ns, UTC]), open, high, low, close and, where
the file has one, volume (numbers), sorted by time, exact duplicate timestamps dropped
(keeping the last); its `attrs["read_as"]` says in one line how the file was read,
`attrs["timezone"]` the zone its times were read in (TIMEZONE_ASSUMED when naive times were
taken as UTC for want of `format.timezone`) and `attrs["notes"]` what was cleaned. Any
problem while reading is a DataError naming the file, never another exception.

What it reads, with no user code (docs/data.md):
- CSV with a header, any of `,` `;` tab `|` as delimiter, plain or .gz/.bz2/.xz/.zip, UTF-8
  or (told by its byte-order mark) UTF-16; columns found by the names in `columns:` or their
  usual spellings (MetaTrader's `<DATE>`/`<TIME>`/`<TICKVOL>`, Dukascopy's `Gmt time`,
  Binance's `open_time`, ...), quoted names holding the delimiter too; bid/ask columns
  (FXCM's `"EUR/USD(Open, Bid)*"`, `BidOpen`) by `format.price_side`; yfinance's three
  header rows (`Price,Close,...` / `Ticker,SPY,...` / `Datetime,,...`);
- headerless CSV by column position: epoch first (Binance klines, Kraken), `YYYYMMDD HHMMSS`
  first (histdata.com, NinjaTrader), date and time first (MetaTrader 4), ISO time first, each of them
  also after a symbol column (NSE's `NIFTY,20130101,09:16,...`);
- every line in quotes (a tab-separated export re-saved by a spreadsheet);
- no volume column (the bars then have none);
- decimal commas (66029,31; dots as thousands) in files not separated by commas, headers in
  German, French, Spanish or Italian; `columns:` names only for the files whose header has them;
- Parquet and Feather (pyarrow; only the needed columns are read; numbers stored as text
  converted), freqtrade's JSON candles (`.json`, `.json.gz`);
- times as text, or epoch s/ms/us/ns told apart by each value's size (so one file may switch
  unit); naive times are in `format.timezone` (auto: UTC, said in the read line, except
  histdata's EST for files histdata.com named, DAT_ASCII_*); in a zone with daylight saving the repeated hour of a fall-back day is
  read as its two instants, in file order.

How: settings = what the file's first lines show (sniffing) <- a named preset <- the explicit
`format:` keys, each later one overriding the earlier.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import io
import lzma
import os
import re
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import numpy as np

from rnnfleet.bars.shared_folders import shared_folder_refusal
from rnnfleet.errors import DataError, one_line

PRICE_KEYS = ("open", "high", "low", "close")
DEFAULT_COLUMNS = {
    "timestamp": "timestamp",
    "open": "open",
    "high": "high",
    "low": "low",
    "close": "close",
    "volume": "volume",
}

BAR_KEYS = (*PRICE_KEYS, "volume")
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zip")
TEXT_SUFFIXES = (".csv", ".txt", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")
FEATHER_SUFFIXES = (".feather", ".arrow")
# freqtrade's `json` and `jsongz` candles: one JSON array of [epoch ms, open, high, low, close, volume].
JSON_SUFFIXES = (".json", ".json.gz")
# File names discovery may take as datasets: what read_bars can open (a bare .zip is
# Binance's: one CSV inside).
READABLE_SUFFIXES = (
    *TEXT_SUFFIXES,
    *COMPRESSED_SUFFIXES,
    *(text + packed for text in TEXT_SUFFIXES for packed in COMPRESSED_SUFFIXES),
    *PARQUET_SUFFIXES,
    *FEATHER_SUFFIXES,
    *JSON_SUFFIXES,
)
SNIFF_BYTES = 64 * 1024
DELIMITERS = (",", ";", "\t", "|")
PRICE_SIDES = ("bid", "ask", "mid")
ASK_SUFFIX = "_ask"  # the ask column of a price key, read beside the bid one for price_side mid
# Byte-order marks, longest first (UTF-32's starts with UTF-16's): the encoding each tells.
BYTE_ORDER_MARKS = (
    (b"\xff\xfe\x00\x00", "utf-32", "UTF-32"),
    (b"\x00\x00\xfe\xff", "utf-32", "UTF-32"),
    (b"\xef\xbb\xbf", "utf-8-sig", "UTF-8"),
    (b"\xff\xfe", "utf-16", "UTF-16"),
    (b"\xfe\xff", "utf-16", "UTF-16"),
)
MAX_HEADER_ROWS = 3  # yfinance writes three
# Usual spellings of each column in headers (compared lower-case, without <>), best first.
# European brokers' exports name them in the user's language (German, French, Spanish,
# Italian; accents are ignored: Eröffnung, Clôture, Máximo).
HEADER_ALIASES = {
    "timestamp": ("timestamp", "datetime", "date_time", "time", "open_time", "open time", "gmt time", "local time"),
    "open": ("open", "o", "eroffnung", "eroeffnung", "erster", "ouverture", "apertura"),
    "high": ("high", "h", "hoch", "haut", "plus haut", "maximo", "massimo"),
    "low": ("low", "l", "tief", "bas", "plus bas", "minimo"),
    "close": ("close", "c", "schluss", "schlusskurs", "letzter", "cloture", "cierre", "chiusura"),
    # MetaTrader 5 writes TICKVOL and VOL (exchange volume, 0 for FX): tick volume first.
    "volume": ("volume", "tickvol", "tick_volume", "vol", "v", "volumen", "umsatz", "volume (stuck)"),
}
# Separate date and time columns, where no single column holds the time.
DATE_NAMES = ("date", "datum", "fecha", "data")
TIME_NAMES = ("time", "zeit", "uhrzeit", "heure", "hora", "ora")
# A ';'- or tab-separated file's numbers with a decimal comma (66029,31), thousands maybe
# grouped by dots (1.234.567,5), as European brokers and spreadsheets write them.
DECIMAL_COMMA = re.compile(r"[+-]?(\d{1,3}(\.\d{3})+|\d+),\d+")
THOUSANDS_DOTS = re.compile(r"[+-]?\d{1,3}(\.\d{3})+(,\d+)?")
DECIMAL_POINT = re.compile(r"[+-]?\d*\.\d+([eE][+-]?\d+)?")
BASE_VOLUME = re.compile(r"volume_\((?!currency\))[^)]+\)")
# Bars before this are refused as a misread (a forced epoch unit, a wrong layout), on every path.
EARLIEST_BAR_TIME = "1980-01-01"
# Epoch values from 1973 on: seconds < 1e11 <= milliseconds < 1e14 <= microseconds < 1e17 <= ns.
EPOCH_UNITS = (("s", 1e8, 1e11, 10**9), ("ms", 1e11, 1e14, 10**6), ("us", 1e14, 1e17, 10**3), ("ns", 1e17, 1e20, 1))
# Text time layouts tried on the first value, before pandas' ISO 8601 parser.
TEXT_TIME_FORMATS = (
    "%Y%m%d %H%M%S",  # histdata.com
    "%Y.%m.%d %H:%M:%S",  # MetaTrader
    "%Y.%m.%d %H:%M",
    "%d.%m.%Y %H:%M:%S.%f GMT%z",  # Dukascopy's "Local time" export: its offset, changing at DST
    "%d.%m.%Y %H:%M:%S.%f",  # Dukascopy (day first)
    "%d.%m.%Y %H:%M:%S",
    "%d.%m.%Y %H:%M",  # European brokers (day first)
    "%Y/%m/%d %H:%M:%S",
    "%Y/%m/%d %H:%M",
    "%m/%d/%Y %H:%M:%S",  # FXCM (month first), tried before day first: see text_times
    "%m/%d/%Y %H:%M",
    "%d/%m/%Y %H:%M:%S",
    "%d/%m/%Y %H:%M",
    "%Y%m%d %H:%M:%S",
    "%Y%m%d %H:%M",
)
HISTDATA_ZONE = "Etc/GMT+5"  # histdata.com: EST all year, no daylight saving (UTC-5)
HISTDATA_LIKE_NOTE = (
    "its lines are laid out as histdata.com's, but its name is not one of theirs (DAT_ASCII_...): its times were "
    "read as UTC; histdata.com's files are in EST all year (UTC-5): if it is one of theirs, set format.timezone: "
    "Etc/GMT+5 (or format.preset: histdata)"
)
# histdata.com's own file names (DAT_ASCII_EURUSD_M1_2019.csv, in HISTDATA_COM_ASCII_..._2019.zip):
# only these, or format.preset histdata, are read in its EST. NinjaTrader and others write the
# same line shape in UTC or local time, so the shape alone never sets a zone.
HISTDATA_NAME_PREFIXES = ("DAT_ASCII_", "HISTDATA_COM_")
# The one phrase said (read line, inspect, summary) when naive times are taken as UTC because
# format.timezone is auto and nothing in the file or its layout gives a zone.
NAIVE_AS_UTC = "naive times read as UTC (set format.timezone)"
TIMEZONE_ASSUMED = "UTC (assumed)"
TIMEZONE_EPOCH = "UTC (epoch)"
TIMEZONE_IN_FILE = "in the file"
UTC_HEADERS = ("gmt time", "utc", "utc time", "time (utc)")  # headers that say their times are UTC


@dataclass(frozen=True)
class Layout:
    """How one file is laid out. columns maps timestamp (or date and time) and the five bar
    keys to a header name (header files, Parquet) or a 0-based position (headerless)."""

    kind: str = "csv"  # csv | parquet | feather | json
    header: bool | None = None  # None: not known yet (sniffed)
    delimiter: str | None = None
    columns: dict = field(default_factory=dict)
    timestamp_unit: str = "auto"  # auto | s | ms | us | ns | text
    timestamp_format: str = ""  # strftime layout of text times; "" = recognised from the first value
    timezone: str = "auto"  # zone of naive times; auto = UTC, histdata's EST for histdata's own files
    fields: int = 0  # columns in the file (for the log)
    source: str = "auto"  # preset name, or auto
    encoding: str = "utf-8"  # a Python codec name (told by the byte-order mark)
    quoted_lines: bool = False  # every line one quoted string: the quotes are taken off first
    header_rows: int = 0  # lines before the data (header files: 1, yfinance 3)
    positions: dict = field(default_factory=dict)  # header files: {key: 0-based position} of `columns`
    price_side: str = "bid"  # bid | ask | mid: which prices of a file with bid and ask columns
    bid_ask: bool = False  # the prices came from bid/ask columns
    day: str = ""  # QuantConnect Lean: the file's day (YYYYMMDD), its times milliseconds since that midnight
    price_scale: float = 1.0  # QuantConnect Lean's US equity prices are in ten-thousandths
    histdata_like: bool = False  # histdata.com's lines in a file not named as histdata names its own: read as UTC
    decimal: str = "."  # "," for numbers written 66029,31
    thousands: str | None = None  # "." where such numbers group thousands (1.234,5)


POSITIONS = {key: index for index, key in enumerate(("timestamp", *BAR_KEYS))}
PRESETS = {
    "csv": Layout(header=True),
    "binance": Layout(header=False, delimiter=",", columns=POSITIONS),
    "kraken": Layout(header=False, delimiter=",", columns=POSITIONS),
    "metatrader4": Layout(
        header=False,
        delimiter=",",
        columns={"date": 0, "time": 1, **{key: index + 2 for index, key in enumerate(BAR_KEYS)}},
    ),
    "metatrader5": Layout(
        header=True,
        delimiter="\t",
        columns={"date": "<DATE>", "time": "<TIME>", **{key: f"<{key.upper()}>" for key in PRICE_KEYS}}
        | {"volume": "<TICKVOL>"},
    ),
    "histdata": Layout(
        header=False,
        delimiter=";",
        columns=POSITIONS,
        timestamp_unit="text",
        timestamp_format="%Y%m%d %H%M%S",
        timezone=HISTDATA_ZONE,
    ),
    "dukascopy": Layout(
        header=True,
        delimiter=",",
        columns={"timestamp": "Gmt time", "open": "Open", "high": "High", "low": "Low", "close": "Close"}
        | {"volume": "Volume"},
        timestamp_format="%d.%m.%Y %H:%M:%S.%f",
        timezone="UTC",
    ),
}
FORMAT_PRESETS = ("auto", *PRESETS)
FORMAT_DEFAULTS = {
    "preset": "auto",
    "header": "auto",
    "delimiter": "auto",
    "positions": {},
    "timestamp_unit": "auto",
    "timestamp_format": "",
    "timezone": "auto",
    "price_side": "bid",
}


def read_bars(path: str | os.PathLike, columns: dict | None = None, read_format: dict | None = None):
    """The canonical bars table of one file (see the module's promise). columns: the
    `columns:` config (header names); read_format: the `format:` config."""
    import pandas as pd

    name = str(path)
    requested = lean_layout(name, requested_layout(columns, read_format))
    layout = requested
    cut_notes: list[str] = []
    try:
        check_regular_file(name)
        with open(path, "rb") as raw:  # the one open of the file: sniffed, then parsed
            opened = os.fstat(raw.fileno())
            refusal = shared_folder_refusal(name, opened)
            if refusal:
                raise DataError(refusal)
            if opened.st_size == 0:
                raise DataError(f"{name}: the file is empty")
            kind = file_kind(raw, name)
            if kind in ("parquet", "feather"):
                frame, layout = read_arrow(raw, name, requested, kind)
            elif kind == "json":
                frame, layout = read_json_candles(raw, name, requested)
            else:
                with decompressed(raw, name) as stream:
                    head = stream.read(SNIFF_BYTES)
                    stream.seek(0)
                    encoding = text_encoding(head, name)
                    layout = sniff_text(
                        head.decode(encoding, errors="replace"), name, replace(requested, encoding=encoding)
                    )
                    frame = read_text(stream, name, layout)
                    if stream is raw and not frame.empty and last_line_unterminated(raw):
                        frame, cut_notes = without_cut_last_row(frame, name)
        if frame.empty:
            raise DataError(f"{name}: has a header but no data rows")
        notes = cut_notes + check_numeric(frame, name, layout) + ([HISTDATA_LIKE_NOTE] if layout.histdata_like else [])
        timestamps, time_read_as, time_notes, zone = parse_times(frame, name, layout)
        frame = take_price_side(frame, layout)[[key for key in BAR_KEYS if key in frame]].astype(np.float64)
        if layout.price_scale != 1.0:
            frame[list(PRICE_KEYS)] *= layout.price_scale
    except DataError:
        raise
    except OSError as error:
        raise DataError(f"{name}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise DataError(f"{name}: {undecodable(path, layout.encoding)}") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{name}: the file is empty") from None
    except pd.errors.ParserError as error:
        raise DataError(f"{name}: not a readable CSV ({one_line(error)})") from None
    except MemoryError:
        raise
    except Exception as error:  # whatever else the parsers raise on a file they cannot take
        raise DataError(
            f"{name}: cannot be read as {describe_layout(layout)} ({type(error).__name__}: {one_line(error)}); "
            "check the file, or set `format:` in the config"
        ) from None
    check_plausible_times(timestamps, name, time_read_as, requested)
    frame.insert(0, "timestamp", timestamps.astype("datetime64[ns, UTC]"))  # gaps count in ns
    frame = sorted_unique_by_time(frame, notes + time_notes)
    frame.attrs["read_as"] = f"{describe_layout(layout)}, time from {time_read_as}"
    frame.attrs["timezone"] = zone
    return frame


def file_kind(raw, name: str) -> str:
    """parquet, feather, json (freqtrade's candles) or text, from the file's first bytes and
    its name; the file is left at its start."""
    magic = raw.read(6)
    raw.seek(0)
    suffix = Path(name).suffix.lower()
    if magic[:4] == b"PAR1" or suffix in PARQUET_SUFFIXES:
        return "parquet"
    if magic == b"ARROW1" or suffix in FEATHER_SUFFIXES:
        return "feather"
    return "json" if name.lower().endswith(JSON_SUFFIXES) else "text"


def head_times_zone_free(path: str | os.PathLike, columns: dict | None = None, read_format: dict | None = None) -> bool:
    """Whether the first lines of a text file give their times as epoch numbers or with their
    zone (format.timezone cannot apply), read as read_bars reads them; False where they do
    not, or where that cannot be told from the head alone (Parquet, Feather, a date column, an
    error). freqtrade's JSON candles are epoch numbers."""
    name = str(path)
    try:
        requested = lean_layout(name, requested_layout(columns, read_format))
        with open(path, "rb") as raw:
            kind = file_kind(raw, name)
            if kind != "text":
                return kind == "json"  # freqtrade's candles: epoch milliseconds
            with decompressed(raw, name) as stream:
                head = stream.read(SNIFF_BYTES)
        encoding = text_encoding(head, name)
        layout = sniff_text(head.decode(encoding, errors="replace"), name, replace(requested, encoding=encoding))
        if layout.day or "date" in layout.columns:
            return False
        lines = head[: head.rfind(b"\n") + 1]  # whole lines only
        zone = parse_times(read_text(io.BytesIO(lines), name, layout), name, layout)[3]
    except Exception:  # the job reads the file and says what is wrong with it
        return False
    return zone in (TIMEZONE_EPOCH, TIMEZONE_IN_FILE)


NOT_REGULAR = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def check_regular_file(name: str) -> None:
    """DataError naming what `name` is (links followed) when it is not a regular file: a
    pipe or a device would be read as a stream (or block), not as a file of bars."""
    mode = os.stat(name).st_mode
    for test, what in NOT_REGULAR:
        if test(mode):
            raise DataError(f"{name}: is {what}, not a regular file; give a file of bars")


# QuantConnect Lean's minute trade files: <asset>/<market>/minute/<ticker>/<YYYYMMDD>_trade.zip,
# one headerless CSV inside (milliseconds since the day's midnight, open, high, low, close,
# volume). US equity: times in New York, prices in ten-thousandths of a dollar; crypto: UTC,
# prices as they are (Lean's data format docs).
LEAN_PATH = re.compile(r"(?:^|/)(?P<asset>equity|crypto)/(?P<market>[^/]+)/minute/[^/]+/(?P<day>\d{8})_trade\.zip$")
LEAN_ASSETS = {("equity", "usa"): ("America/New_York", 1e-4), "crypto": ("UTC", 1.0)}


def lean_layout(name: str, requested: Layout) -> Layout:
    """requested, or Lean's layout for a file named as Lean names its minute trade files
    (where format.preset is auto)."""
    match = LEAN_PATH.search(Path(name).as_posix())
    if match is None or requested.source != "auto":
        return requested
    asset = LEAN_ASSETS.get((match["asset"], match["market"])) or LEAN_ASSETS.get(match["asset"])
    if asset is None:
        return requested  # another market's equities: their zone is not known here
    zone, scale = asset
    timezone = zone if requested.timezone == "auto" else requested.timezone
    return replace(
        requested, source="lean", header=False, delimiter=",", columns=dict(POSITIONS), day=match["day"],
        timestamp_unit="ms", timezone=timezone, price_scale=scale,
    )  # fmt: skip


def lean_times(values, name: str, label: str, layout: Layout):
    """Lean's milliseconds since the day's midnight, in the exchange's zone -> UTC."""
    import pandas as pd

    midnight = pd.Timestamp(layout.day)
    naive = pd.Series(midnight + pd.to_timedelta(values.to_numpy(np.int64), unit="ms"), copy=False)
    said = f"milliseconds since {midnight:%Y-%m-%d} (the file's day) in {layout.timezone}"
    return localize(naive, layout.timezone, name, label), f"{label} as {said}", [], layout.timezone


def check_plausible_times(timestamps, name: str, read_as: str, requested: Layout) -> None:
    """DataError when the times read lie before EARLIEST_BAR_TIME or more than a day in the
    future, whichever path read them (sniffed or forced by format:): a wrong unit, layout or
    zone, not bars."""
    import pandas as pd

    if not len(timestamps):
        return
    first, last = timestamps.min(), timestamps.max()
    latest = pd.Timestamp.now(tz="UTC") + pd.Timedelta(days=1)
    if first >= pd.Timestamp(EARLIEST_BAR_TIME, tz="UTC") and last <= latest:
        return
    where = f"before {EARLIEST_BAR_TIME[:4]}" if first < pd.Timestamp(EARLIEST_BAR_TIME, tz="UTC") else "in the future"
    forced = [f"format.{key} = {value!r}" for key, value in (("timestamp_unit", requested.timestamp_unit),
              ("timestamp_format", requested.timestamp_format), ("timezone", requested.timezone))
              if value not in ("auto", "")]  # fmt: skip
    setting = f"check {', '.join(forced)}" if forced else "set format.timestamp_unit or format.timestamp_format"
    raise DataError(
        f"{name}: its times run from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC, {where} (read {read_as}): "
        f"not plausible minute bars; {setting}"
    )


def requested_layout(columns: dict | None, read_format: dict | None) -> Layout:
    """The preset, then the explicit `format:` keys and non-default `columns:` names over it;
    what stays unset is sniffed from the file."""
    settings = {**FORMAT_DEFAULTS, **(read_format or {})}
    layout = PRESETS.get(settings["preset"], Layout())
    layout = replace(layout, source=settings["preset"])
    named = {key: value for key, value in (columns or {}).items() if DEFAULT_COLUMNS.get(key) != value}
    if named:  # for the files whose header has them (sniff_text): a headerless file is never read by them
        layout = replace(layout, columns={**layout.columns, **named})
    if settings["positions"]:
        layout = replace(layout, columns=dict(settings["positions"]))  # a header line is still sniffed
    if settings["header"] != "auto":
        layout = replace(layout, header=bool(settings["header"]))
    if settings["delimiter"] != "auto":
        layout = replace(layout, delimiter=settings["delimiter"])
    for key in ("timestamp_unit", "timezone"):
        if settings[key] != "auto":
            layout = replace(layout, **{key: settings[key]})
    if settings["timestamp_format"]:
        layout = replace(layout, timestamp_format=settings["timestamp_format"], timestamp_unit="text")
    return replace(layout, price_side=settings["price_side"])


@contextlib.contextmanager
def decompressed(raw, name: str) -> Iterator[io.BufferedIOBase]:
    """The file's bytes, decompressed by its suffix, as a seekable binary stream."""
    suffix = Path(name).suffix.lower()
    if suffix == ".gz":
        stream = gzip.GzipFile(fileobj=raw)
    elif suffix == ".bz2":
        stream = bz2.BZ2File(raw)
    elif suffix == ".xz":
        stream = lzma.LZMAFile(raw)
    elif suffix == ".zip":
        archive = zipfile.ZipFile(raw)
        members = [info for info in archive.infolist() if not info.is_dir()]
        if len(members) != 1:
            raise DataError(f"{name}: a .zip must hold exactly one file, this one holds {len(members)}")
        stream = archive.open(members[0])
    else:
        yield raw
        return
    try:
        yield stream
    except (gzip.BadGzipFile, lzma.LZMAError, zipfile.BadZipFile, EOFError) as error:
        raise DataError(f"{name}: not a readable {suffix} file ({error})") from None
    finally:
        stream.close()


def text_encoding(head: bytes, name: str) -> str:
    """The codec of a text file from its first bytes: the one its byte-order mark tells, else
    UTF-8. Zero bytes without a mark are a DataError: UTF-16 without one cannot be told apart
    from a binary file."""
    for mark, codec, _ in BYTE_ORDER_MARKS:
        if head.startswith(mark):
            return codec
    if b"\x00" in head:
        if looks_like_utf16(head):
            raise DataError(
                f"{name}: UTF-16 text saved without a byte-order mark (every other byte is zero); "
                "save it as UTF-8 (or UTF-16 with a byte-order mark)"
            )
        raise DataError(f"{name}: not a text file (binary data, no lines of bars): not a bar file rnnfleet reads")
    return "utf-8"


def looks_like_utf16(head: bytes) -> bool:
    """Mostly ASCII text in UTF-16 without a mark: nearly all of the bytes at even (big
    endian) or odd (little endian) positions are zero."""
    sample = head[: len(head) // 2 * 2]
    if len(sample) < 8:
        return False
    halves = sample[0::2], sample[1::2]
    return any(half.count(0) >= 0.9 * len(half) for half in halves)


def encoding_label(codec: str) -> str:
    return next((label for _, known, label in BYTE_ORDER_MARKS if known == codec), codec.upper())


def undecodable(path: str | os.PathLike, codec: str) -> str:
    """The problem of a file that its codec cannot decode, in words: damaged bytes where the
    rest of the file is UTF-8, else a file saved in another encoding."""
    if codec in ("utf-8", "utf-8-sig"):
        where, damaged_lines, lines = first_undecodable_line(path)
        if damaged_lines and damaged_lines * 100 <= lines:
            return (
                f"damaged bytes{where}, in {damaged_lines} of its {lines:,} lines (the rest is UTF-8 text); "
                "repair or remove the damaged line(s), or fetch the file again"
            )
        return f"not UTF-8 text{where}; save it as UTF-8"
    label = encoding_label(codec)
    return f"its byte-order mark says {label}, but it is not valid {label} text; save it as UTF-8"


def split_line(line: str, delimiter: str) -> list[str]:
    """The cells of one line, quotes honoured (a quoted name may hold the delimiter)."""
    cells = next(csv.reader([line], delimiter=delimiter, skipinitialspace=True), [])
    return [cell.strip().strip("'") for cell in cells]


def quoted_line(line: str) -> bool:
    text = line.strip()
    return len(text) >= 2 and text[0] == text[-1] == '"' and '"' not in text[1:-1]


def unquoted(text: str) -> str:
    """Every line's enclosing quotes taken off (a line ending \\r\\n keeps it)."""
    return re.sub(r'(?m)^[ \t]*"(.*)"[ \t]*(\r?)$', r"\1\2", text)


def sniff_text(sample: str, name: str, requested: Layout) -> Layout:
    """Fill in what `requested` leaves open from the first lines of the file."""
    lines = [line for line in sample.splitlines()[:-1] or sample.splitlines() if line.strip()][:20]
    if not lines:
        raise DataError(f"{name}: the file is empty")
    quoted = requested.quoted_lines or all(map(quoted_line, lines))
    if quoted:
        lines = unquoted("\n".join(lines)).splitlines()
    delimiter = requested.delimiter or sniff_delimiter(lines)
    rows = [split_line(line, delimiter) for line in lines]
    cells = rows[0]
    decimal, thousands = sniff_decimal(rows, delimiter)
    # Which cells are numbers, each read as its file writes numbers (1.234,5 with a decimal comma).
    numeric = [[is_number(as_point_number(cell, decimal, thousands)) for cell in row] for row in rows]
    header = requested.header if requested.header is not None else not any(numeric[0])
    layout = replace(
        requested,
        header=header,
        delimiter=delimiter,
        fields=len(cells),
        quoted_lines=quoted,
        decimal=decimal,
        thousands=thousands,
    )
    named = {key: value for key, value in layout.columns.items() if isinstance(value, str)}
    if header:
        header_rows = 1 + continued_header_rows(rows[1:], numeric[1:])
        check_one_ticker(rows[1:header_rows], name)
        layout = replace(layout, header_rows=header_rows)
        if all(isinstance(value, int) for value in layout.columns.values()) and layout.columns:
            return layout  # positions given, header line(s) skipped
        names = header_names(rows[:header_rows])
        if named and not set(named.values()) & set(names):
            layout = replace(layout, columns={})  # `columns:` names another file's header, not this one's
        found = match_header(names, name, layout.columns, layout.price_side)
        positions = {key: names.index(column) for key, column in found.items()}
        return replace(layout, columns=found, positions=positions, bid_ask=uses_bid_ask(found, names))
    layout = replace(layout, columns={key: value for key, value in layout.columns.items() if key not in named})
    if layout.columns:
        return layout
    return sniff_headerless(cells, lines[0], name, layout)


def sniff_decimal(rows: list[list[str]], delimiter: str) -> tuple[str, str | None]:
    """(decimal mark, thousands mark or None) of a file's numbers: a decimal comma, and dots
    as thousands marks (where a later row has 1.234,5), where a file not separated by commas
    writes its numbers so (66029,31) and none with a decimal point."""
    if delimiter == ",":
        return ".", None
    cells = [cell.strip() for row in rows for cell in row]
    if not any(DECIMAL_COMMA.fullmatch(cell) for cell in cells):
        return ".", None
    if any(DECIMAL_POINT.fullmatch(cell) and not THOUSANDS_DOTS.fullmatch(cell) for cell in cells):
        return ".", None  # decimal points too: the commas are something else
    return ",", "."


def as_point_number(cell: str, decimal: str, thousands: str | None) -> str:
    """A cell's number as Python writes it (1234.5 for 1.234,5 in a decimal-comma file)."""
    if decimal == ".":
        return cell
    return cell.replace(thousands, "").replace(",", ".") if thousands else cell.replace(",", ".")


def continued_header_rows(rows: list[list[str]], numeric: list[list[bool]] | None = None) -> int:
    """How many of the lines after a header line go on naming the columns (yfinance's
    `Ticker,SPY,...` and `Datetime,,...`): lines with a first cell and no number, before any
    data. numeric: which cells are numbers (default: as Python reads them)."""
    numeric = numeric if numeric is not None else [list(map(is_number, cells)) for cells in rows]
    count = 0
    for cells, numbers in zip(rows[: MAX_HEADER_ROWS - 1], numeric, strict=False):
        if not cells or not cells[0] or any(numbers):
            break
        count += 1
    return count


def check_one_ticker(header_rows: list[list[str]], name: str) -> None:
    """A DataError when a header line `Ticker,AAPL,SPY,...` names several tickers (a yfinance
    download of several): one file's bars must be one instrument's."""
    for cells in header_rows:
        if header_key(cells[0]) == "ticker":
            tickers = sorted({cell.strip() for cell in cells[1:] if cell.strip()})
            if len(tickers) > 1:
                raise DataError(
                    f"{name}: holds the bars of {len(tickers)} tickers ({', '.join(tickers)}), a yfinance download "
                    "of several; save each ticker to a file of its own (yf.download('SPY', ...).to_csv(...)), "
                    "one dataset each"
                )


def header_names(rows: list[list[str]]) -> list[str]:
    """The name of each column: the first line's, unless a later header line holds a usual
    spelling there and the first does not (yfinance: `Price` over `Datetime`)."""
    known = {alias for aliases in HEADER_ALIASES.values() for alias in aliases} | set(DATE_NAMES)
    names = []
    for position, first in enumerate(rows[0]):
        below = [cells[position] for cells in rows[1:] if position < len(cells) and cells[position]]
        usual = next((cell for cell in [first, *below] if header_key(cell) in known), first)
        names.append(usual)
    return names


def sniff_delimiter(lines: list[str]) -> str:
    """The delimiter that splits every sample line into the same number (>= 5) of fields."""
    best, best_fields = ",", 0
    for delimiter in DELIMITERS:
        counts = {len(split_line(line, delimiter)) for line in lines}
        if len(counts) == 1 and (fields := counts.pop()) >= 5 and fields > best_fields:
            best, best_fields = delimiter, fields
    return best


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def header_key(name: str) -> str:
    """A column name as the aliases spell it: stripped, lower-case, <> and accents taken off."""
    import unicodedata

    plain = unicodedata.normalize("NFKD", name.strip().strip("<>").strip().lower())
    return "".join(character for character in plain if not unicodedata.combining(character))


def bid_ask_columns(header: list[str]) -> dict[tuple[str, str], str]:
    """{(price key, bid|ask): column} of the columns whose name holds one price word and one
    side: `EUR/USD(Open, Bid)*` (FXCM), `BidOpen`, `open_ask`. The first such column counts."""
    sides = {}
    for column in header:
        words = {word.lower() for word in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", column)}
        keys, side = words & set(PRICE_KEYS), words & {"bid", "ask"}
        if len(keys) == 1 and len(side) == 1:
            sides.setdefault((keys.pop(), side.pop()), column)
    return sides


def uses_bid_ask(found: dict, header: list[str]) -> bool:
    """Whether match_header took the prices from bid/ask columns."""
    return found.get("open") in bid_ask_columns(header).values()


def side_columns(key: str, price_side: str, sides: dict) -> tuple[dict, list[str]]:
    """({key (and key_ask for mid): column}, missing) of a price key in a bid/ask header."""
    wanted = {"bid": [(key, "bid")], "ask": [(key, "ask")], "mid": [(key, "bid"), (key + ASK_SUFFIX, "ask")]}
    found, missing = {}, []
    for found_key, side in wanted[price_side]:
        if (key, side) in sides:
            found[found_key] = sides[(key, side)]
        else:
            missing.append(f"{key} {side} (format.price_side: {price_side})")
    return found, missing


def base_volume_column(header: list[str]) -> str | None:
    """The base asset's volume of the Kaggle Bitstamp/Coinbase minute sets' header
    (`Volume_(BTC)`, beside `Volume_(Currency)`, the quote currency's), or None."""
    return next((column for column in header if BASE_VOLUME.fullmatch(header_key(column))), None)


def match_header(header: list[str], name: str, configured: dict, price_side: str = "bid") -> dict:
    """{key: column name} for the needed columns of a header: the configured names, else the
    usual spellings, else bid/ask columns (the side format.price_side names; the bid key
    holds the bid column and key_ask the ask one for mid); separate date and time columns
    when there is no single time column. Volume is optional unless `columns:` names it."""
    by_key = {header_key(column): column for column in reversed(header)}
    sides = bid_ask_columns(header)
    found, missing = {}, []
    for key in ("timestamp", *BAR_KEYS):
        if key == "timestamp" and "date" in configured:
            continue  # separate date and time columns, below
        if key in configured:
            if configured[key] in header:
                found[key] = configured[key]
            else:
                missing.append(configured[key])
            continue
        spelling = next((alias for alias in HEADER_ALIASES[key] if alias in by_key), None)
        date_name = next((alias for alias in DATE_NAMES if alias in by_key), None)
        if key == "timestamp" and date_name and (spelling in (None, "time")):
            found["date"] = by_key[date_name]
            if time_name := next((alias for alias in TIME_NAMES if alias in by_key), None):
                found["time"] = by_key[time_name]
        elif spelling is not None:
            found[key] = by_key[spelling]
        elif key == "volume" and (base := base_volume_column(header)):
            found[key] = base
        elif key in PRICE_KEYS and any((key, side) in sides for side in ("bid", "ask")):
            found_sides, missing_sides = side_columns(key, price_side, sides)
            found.update(found_sides)
            missing.extend(missing_sides)
        elif key != "volume":
            missing.append(DEFAULT_COLUMNS[key])
    for key in ("date", "time"):
        if key in configured:
            if configured[key] in header:
                found[key] = configured[key]
            else:
                missing.append(configured[key])
    if missing:
        shown = ", ".join(header)
        raise DataError(
            f"{name}: missing required column(s) {', '.join(missing)}; its header is {shown[:200]!r} "
            "(set `columns:` in the config if the file names them differently, or `format:` if it has no header)"
        )
    return found


DATE_CELL = r"\d{4}[.\-/]\d{2}[.\-/]\d{2}|\d{8}"
TIME_CELL = r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?"
SYMBOL_CELL = r"[A-Za-z^][\w^.\-/=& ]*"  # NSE's NIFTY, BANKNIFTY, ^NSEI, EUR/USD


def bar_positions(start: int, fields: int) -> dict:
    """open, high, low, close and (where the line has it) volume from position `start` on."""
    return {key: start + offset for offset, key in enumerate(BAR_KEYS) if start + offset < fields}


def headerless_columns(cells: list[str]) -> tuple[dict, str, bool] | None:
    """(positions, timestamp unit, histdata's) of a headerless line whose cells start with its
    time, or None for a line rnnfleet does not know."""
    first, second = cells[0], cells[1] if len(cells) > 1 else ""
    if re.fullmatch(DATE_CELL, first) and re.fullmatch(TIME_CELL, second):
        if len(cells) >= 6:  # MetaTrader 4 (date, time, open, high, low, close, volume), NSE without volume
            return {"date": 0, "time": 1, **bar_positions(2, len(cells))}, "text", False
        return None
    if len(cells) < 5:
        return None
    columns = {"timestamp": 0, **bar_positions(1, len(cells))}
    if re.fullmatch(r"\d{8} \d{6}", first):  # histdata.com generic ASCII
        return columns, "text", True
    if re.fullmatch(r"\d{9,20}(\.\d*)?", first):  # epoch: Binance, Kraken, ...
        return columns, "auto", False
    if re.match(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}", first):
        return columns, "text", False
    return None


def sniff_headerless(cells: list[str], line: str, name: str, layout: Layout) -> Layout:
    """Column positions of a headerless file, from what its first line holds (the time first,
    or after a symbol column)."""
    known, offset = headerless_columns(cells), 0
    if known is None and len(cells) > 1 and re.fullmatch(SYMBOL_CELL, cells[0]) and not is_number(cells[0]):
        known, offset = headerless_columns(cells[1:]), 1
    if known is None:
        raise DataError(
            f"{name}: has no header and its layout is not one rnnfleet knows (first line {line[:80]!r}); "
            "set `format:` in the config (a preset, or header, delimiter and positions)"
        )
    columns, unit, histdata = known
    columns = {key: position + offset for key, position in columns.items()}
    layout = replace(layout, columns=columns)
    if unit == "text":
        layout = replace(layout, timestamp_unit="text")
    if histdata and layout.timezone == "auto":
        if is_histdata_name(name):
            layout = replace(layout, timezone=HISTDATA_ZONE)
        else:
            layout = replace(layout, histdata_like=True)
    return layout


def is_histdata_name(name: str) -> bool:
    """Whether the file is named as histdata.com names its downloads."""
    return Path(name).name.upper().startswith(HISTDATA_NAME_PREFIXES)


# Bytes that may follow a file's last line end: spaces, tabs, UTF-16's zero bytes.
AFTER_LAST_LINE_END = b" \t\x00"
CUT_LINE = "the last line has no line end (the file may have been cut while it was written)"


def last_line_unterminated(raw) -> bool:
    """Whether an uncompressed text file's last data line lacks its line end: the mark of a
    file cut while it was written (a download or a copy stopped), whose last number may be cut
    short (43.21806 read as 43). Compressed files need no such check: cut, they do not
    decompress."""
    raw.seek(max(raw.seek(0, io.SEEK_END) - 64, 0))
    tail = raw.read().rstrip(AFTER_LAST_LINE_END)
    return bool(tail) and not tail.endswith((b"\n", b"\r"))


def without_cut_last_row(frame, name: str):
    """The frame without its last row, read from a line without its line end, and the note
    that says so; DataError where that row is the file's only one."""
    if len(frame) == 1:
        raise DataError(f"{name}: {CUT_LINE}, and it is the only data line: nothing is left to read")
    return frame.iloc[:-1].copy(), [f"{CUT_LINE}: its last row was left out"]


def read_text(stream, name: str, layout: Layout):
    """The needed columns of a delimited text file, by position, prices parsed straight to
    numbers. A file whose every line is quoted is read whole and unquoted first."""
    import pandas as pd

    wanted = layout.columns
    text_keys = [key for key in ("date", "time") if key in wanted]
    if layout.timestamp_unit == "text":
        text_keys.append("timestamp")
    positions = layout.positions or {key: int(position) for key, position in wanted.items()}
    too_far = [key for key, position in positions.items() if position >= max(layout.fields, 1)]
    if too_far:
        raise DataError(
            f"{name}: has {layout.fields} columns, fewer than format.positions needs "
            f"({', '.join(f'{key} at {positions[key]}' for key in too_far)})"
        )
    source, encoding = stream, layout.encoding
    if layout.quoted_lines:
        source, encoding = io.StringIO(unquoted(stream.read().decode(layout.encoding))), None
    try:
        frame = pd.read_csv(
            source,
            sep=layout.delimiter,
            header=None,
            skiprows=layout.header_rows if layout.header else 0,
            usecols=sorted(set(positions.values())),
            dtype={positions[key]: str for key in text_keys if key in positions},
            encoding=encoding,
            skipinitialspace=True,
            decimal=layout.decimal,
            thousands=layout.thousands,
        )
    except pd.errors.EmptyDataError:
        if layout.header:  # nothing after the header line(s)
            raise DataError(f"{name}: has a header but no data rows") from None
        raise
    return frame.rename(columns={position: key for key, position in positions.items()})


def read_arrow(raw, name: str, requested: Layout, kind: str):
    """The needed columns of a Parquet or Feather (Arrow IPC) file (the others are never read)."""
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    label = "Parquet" if kind == "parquet" else "Feather"
    try:
        stored = pq.ParquetFile(raw) if kind == "parquet" else pa.ipc.open_file(raw)
    except pa.ArrowException as error:
        raise DataError(f"{name}: not a readable {label} file ({error})") from None
    header = list((stored.schema_arrow if kind == "parquet" else stored.schema).names)
    configured = {key: value for key, value in requested.columns.items() if isinstance(value, str)}
    wanted = parquet_columns(header, name, configured, requested.price_side)
    columns = list(dict.fromkeys(wanted.values()))
    if kind == "parquet":
        table = stored.read(columns=columns)
    else:
        raw.seek(0)
        table = feather.read_table(raw, columns=columns, memory_map=False)
    # Arrow's buffers are freed column by column as pandas takes them: the numbers held once.
    # Without pandas' metadata a saved index (df.set_index("timestamp").to_parquet()) stays a column.
    frame = table.to_pandas(self_destruct=True, split_blocks=True, ignore_metadata=True)
    del table
    pa.default_memory_pool().release_unused()  # give Arrow's freed buffers back to the OS
    frame = frame.rename(columns={column: key for key, column in wanted.items()})
    layout = replace(
        requested,
        kind=kind,
        header=True,
        columns=wanted,
        fields=len(header),
        bid_ask=uses_bid_ask(wanted, header),
    )
    return frame, layout


def read_json_candles(raw, name: str, requested: Layout):
    """freqtrade's `json`/`jsongz` candles: [[epoch ms, open, high, low, close, volume], ...]."""
    import json

    import pandas as pd

    with decompressed(raw, name) as stream:
        try:
            rows = json.load(stream)
        except ValueError as error:
            raise DataError(f"{name}: not readable JSON ({one_line(error)})") from None
    widths = {len(row) for row in rows[:1000]} if isinstance(rows, list) and rows else set()
    if not all(isinstance(row, list) for row in rows[:1000]) or not widths or min(widths) < 5:
        raise DataError(
            f"{name}: not freqtrade's candles (one JSON array of [time in epoch ms, open, high, low, close, "
            "volume] rows); a .json file rnnfleet reads holds those"
        )
    keys = ("timestamp", *BAR_KEYS)[: min(widths)]
    frame = pd.DataFrame([row[: len(keys)] for row in rows], columns=list(keys))
    layout = replace(
        requested,
        kind="json",
        header=False,
        columns={key: index for index, key in enumerate(keys)},
        fields=max(widths),
        source="freqtrade" if requested.source == "auto" else requested.source,
    )
    return frame, layout


def parquet_columns(header: list[str], name: str, configured: dict, price_side: str) -> dict[str, str]:
    """match_header for a Parquet file's columns, where pandas' unnamed index (saved as
    `__index_level_0__`) holds the times when no column names them."""
    index = "__index_level_0__"
    try:
        return match_header(header, name, configured, price_side)
    except DataError:
        if index not in header or "timestamp" in configured:
            raise
        named = ["timestamp" if column == index else column for column in header]
        wanted = match_header(named, name, configured, price_side)
        return {**wanted, "timestamp": index} if wanted.get("timestamp") == "timestamp" else wanted


def value_keys(layout: Layout) -> list[str]:
    """The keys of the number columns read: prices (both sides for mid), volume where there is one."""
    return [key for key in layout.columns if key not in ("timestamp", "date", "time")]


def check_numeric(frame, name: str, layout: Layout) -> list[str]:
    """Number columns as numbers: numbers stored as text (a Parquet string column) converted
    in place; a value that is not a number in a column of numbers (a damaged row) made NaN, so
    that its row is dropped and counted like a NaN one (data.drop_non_finite), the first few
    kept in frame.attrs["not_numeric"] as (where: row_place, column, value); DataError naming the
    first where most of a column is not numbers (the layout, not a damaged row). Returns notes
    for the log."""
    import pandas as pd

    notes, not_numeric = [], []
    for key in value_keys(layout):
        if pd.api.types.is_numeric_dtype(frame[key]):
            continue
        values = pd.to_numeric(frame[key], errors="coerce")
        not_numbers = np.flatnonzero((values.isna() & frame[key].notna()).to_numpy())
        if len(not_numbers) * 2 > len(frame):
            bad_row = int(not_numbers[0])
            raise DataError(
                f"{name}: column {column_label(layout, key)} is not numeric "
                f"({row_place(bad_row, layout)} holds {frame[key].iloc[bad_row]!r})"
            )
        not_numeric += [(int(row), column_label(layout, key), str(frame[key].iloc[row])) for row in not_numbers[:3]]
        frame[key] = values
        if not len(not_numbers):  # every value a number, stored as text
            notes.append(f"column {column_label(layout, key)} holds its numbers as text: converted")
    if not_numeric:
        frame.attrs["not_numeric"] = [
            (row_place(row, layout), column, value) for row, column, value in sorted(not_numeric)[:3]
        ]
    return notes


def row_place(row: int, layout: Layout) -> str:
    """Where data row `row` (0-based, in file order) is: 'data row N', and in a text file with
    header lines the file's line too, so that a quoted value can be found in an editor."""
    line = f" (line {row + 1 + layout.header_rows})" if layout.kind == "csv" and layout.header_rows else ""
    return f"data row {row + 1}{line}"


def take_price_side(frame, layout: Layout):
    """For format.price_side mid: each price the mean of its bid and ask columns."""
    if layout.price_side != "mid" or not layout.bid_ask:
        return frame
    for key in PRICE_KEYS:
        frame[key] = (frame[key] + frame.pop(key + ASK_SUFFIX)) / 2
    return frame


def column_label(layout: Layout, key: str) -> str:
    where = layout.columns.get(key, key)
    return f"'{where}'" if isinstance(where, str) else str(where)


def parse_times(frame, name: str, layout: Layout):
    """(UTC timestamps, how they were read, notes, the zone they were read in) from the time
    column(s) of `frame`."""
    import pandas as pd

    if "date" in layout.columns:
        if "time" in layout.columns:
            values = frame["date"].str.cat(frame["time"], sep=" ")
            label = f"columns {column_label(layout, 'date')} + {column_label(layout, 'time')}"
        else:
            values, label = frame["date"], f"column {column_label(layout, 'date')}"
    else:
        values, label = frame["timestamp"], f"column {column_label(layout, 'timestamp')}"
    if layout.day:
        return lean_times(values, name, label, layout)
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        utc = values.dt.tz_convert("UTC").astype("datetime64[ns, UTC]")
        return utc, f"{label} as zoned times, UTC", [], TIMEZONE_IN_FILE
    if pd.api.types.is_datetime64_dtype(values.dtype):
        zone, said, zone_label = naive_zone(layout)
        return localize(values.astype("datetime64[ns]"), zone, name, label), f"{label} as {said}", [], zone_label
    if pd.api.types.is_numeric_dtype(values.dtype) and layout.timestamp_unit != "text":
        return (*epoch_times(values.to_numpy(), name, label, layout.timestamp_unit), TIMEZONE_EPOCH)
    return text_times(values, name, label, layout)


def is_time_zone(zone: str) -> bool:
    """Whether pandas reads naive times in `zone` (the IANA database through zoneinfo; pandas,
    which also knows pytz's and dateutil's names, only asked when zoneinfo does not know it)."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(zone)
        return True
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    import pandas as pd

    try:
        pd.Timestamp("2020-01-01").tz_localize(zone)
        return True
    except Exception:  # pytz, zoneinfo and dateutil each raise their own kinds
        return False


def naive_zone(layout: Layout) -> tuple[str, str, str]:
    """(the zone naive times are read in, how the read line says it, the zone as the
    summary and inspect show it): format.timezone, else UTC said out loud."""
    if layout.timezone == "auto" and header_key(str(layout.columns.get("timestamp", ""))) in UTC_HEADERS:
        return "UTC", "naive times in UTC (the header says so)", "UTC"
    if layout.timezone == "auto":
        return "UTC", NAIVE_AS_UTC, TIMEZONE_ASSUMED
    return layout.timezone, f"naive times in {layout.timezone}", layout.timezone


def epoch_times(values: np.ndarray, name: str, label: str, unit: str):
    """Epoch numbers -> UTC times; unit `auto` takes each value's unit from its size."""
    import pandas as pd

    missing = np.isnan(values) if values.dtype.kind == "f" else np.zeros(len(values), bool)
    if missing.any():
        row = int(missing.nonzero()[0][0])
        raise DataError(f"{name}: {label} has a value that is not a time (data row {row + 1} is empty)")
    notes = []
    if unit == "auto":
        magnitude = np.abs(values)
        to_ns = np.zeros(len(values), dtype=np.int64)
        units_seen = []
        for unit_name, low, high, factor in EPOCH_UNITS:
            this_unit = (magnitude >= low) & (magnitude < high)
            if this_unit.any():
                to_ns[this_unit] = factor
                units_seen.append(unit_name)
        unplaced = to_ns == 0
        if unplaced.any():
            row = int(unplaced.nonzero()[0][0])
            raise DataError(
                f"{name}: {label} holds {values[row].item()!r} (data row {row + 1}), which is no epoch time "
                "from 1973 on in s, ms, us or ns; set format.timestamp_unit, or check the column"
            )
        unit_text = " and ".join(units_seen)
        if len(units_seen) > 1:
            first_change = int(np.nonzero(to_ns != to_ns[0])[0][0])
            notes.append(
                f"epoch timestamps switch unit ({unit_text}; first at data row {first_change + 1}): "
                "each value read in the unit its size shows"
            )
        read_as = f"{label} in epoch {unit_text} (told by the values), UTC"
    else:
        to_ns = np.int64(dict((u, f) for u, _, _, f in EPOCH_UNITS)[unit])
        read_as = f"{label} in epoch {unit} (format.timestamp_unit), UTC"
    if values.dtype.kind == "f":
        nanoseconds = np.round(values * to_ns).astype(np.int64)
    else:
        nanoseconds = values.astype(np.int64) * to_ns
    return pd.Series(pd.to_datetime(nanoseconds, unit="ns", utc=True), copy=False), read_as, notes


def text_time_formats(first_value: str) -> list[str]:
    """The strftime layouts a text time fits, best first, or [ISO8601] when none of the known ones does."""
    fitting = []
    for candidate in TEXT_TIME_FORMATS:
        try:
            datetime.strptime(first_value, candidate)
        except ValueError:
            continue
        fitting.append(candidate)
    return fitting or ["ISO8601"]


def parsed_text_times(values, time_format: str):
    import pandas as pd

    try:
        return pd.to_datetime(values, format=time_format, errors="coerce")
    except (ValueError, TypeError):  # offsets differ between rows: each converted to UTC
        return pd.to_datetime(values, format=time_format, errors="coerce", utc=True)


def text_times(values, name: str, label: str, layout: Layout):
    """Text times -> UTC; naive ones are in layout.timezone."""
    import pandas as pd

    values = values.astype(str) if not pd.api.types.is_string_dtype(values.dtype) else values
    first_value = str(values.iloc[0]).strip()
    formats = [layout.timestamp_format] if layout.timestamp_format else text_time_formats(first_value)
    # A later layout only where the first leaves rows unread (09/06/2016: month first, else day first).
    attempts = []
    for time_format in formats:
        attempts.append((time_format, parsed_text_times(values, time_format)))
        if not attempts[-1][1].isna().any():
            break
    time_format, parsed = attempts[-1] if not attempts[-1][1].isna().any() else attempts[0]
    if parsed.isna().any():
        bad_row = int(parsed.isna().to_numpy().nonzero()[0][0])
        raise DataError(
            f"{name}: {label} has a value that is not a time "
            f"(data row {bad_row + 1} holds {values.iloc[bad_row]!r}; read as {time_format}, "
            "set format.timestamp_format if the file writes times differently)"
        )
    notes = []
    day_first = time_format.replace("%m/%d/", "%d/%m/")
    if day_first != time_format and day_first in formats and not parsed_text_times(values, day_first).isna().any():
        notes.append(
            f"{label}: every date fits both month first and day first; read month first ({time_format}): "
            f"set format.timestamp_format: '{day_first}' if the file writes the day first"
        )
    if parsed.dt.tz is not None:
        utc = parsed.dt.tz_convert("UTC").astype("datetime64[ns, UTC]")
        return utc, f"{label} as {time_format} text, UTC", notes, TIMEZONE_IN_FILE
    zone, said, zone_label = naive_zone(layout)
    timestamps = localize(parsed.astype("datetime64[ns]"), zone, name, label)
    return timestamps, f"{label} as {time_format} text, {said}", notes, zone_label


def localize(naive, zone: str, name: str, label: str):
    """Naive times read in `zone`, as UTC. The hour a fall-back day repeats holds real bars
    (clocks ran through it twice): each repeated time is its earlier (daylight) instant the
    first time the file reaches it and its later (standard) one after the file has gone back,
    so the bars keep their order and none looks like a duplicate."""
    try:
        zoned = naive.dt.tz_localize(zone, ambiguous="NaT", nonexistent="NaT")
        if zoned.isna().any():  # a daylight-saving change: the repeated hour told apart (only then: two more passes)
            zoned = naive.dt.tz_localize(zone, ambiguous=first_pass_of_repeated_hour(naive, zone), nonexistent="NaT")
    except Exception as error:  # an unknown zone name: pytz/zoneinfo raise their own types
        raise DataError(f"{name}: format.timezone {zone!r} is not a time zone ({error})") from None
    if zoned.isna().any():
        row = int(zoned.isna().to_numpy().nonzero()[0][0])
        raise DataError(
            f"{name}: {label} has a time that does not exist in {zone} (data row {row + 1} holds "
            f"{naive.iloc[row]}, in the hour skipped when clocks go forward); check format.timezone"
        )
    return zoned.dt.tz_convert("UTC")


def first_pass_of_repeated_hour(naive, zone: str) -> np.ndarray:
    """For tz_localize's `ambiguous`: True (daylight time) for every time but the repeated
    hour's second pass: an ambiguous time at or before one the file showed earlier on the
    same day (clocks turned back). Raises what tz_localize raises for an unknown zone."""
    as_daylight = naive.dt.tz_localize(zone, ambiguous=np.ones(len(naive), bool), nonexistent="NaT")
    as_standard = naive.dt.tz_localize(zone, ambiguous=np.zeros(len(naive), bool), nonexistent="NaT")
    repeated = (as_daylight != as_standard).to_numpy() & as_daylight.notna().to_numpy()
    daylight = np.ones(len(naive), bool)
    if repeated.any():
        times = naive[repeated]
        latest_before = times.groupby(times.dt.normalize()).cummax().groupby(times.dt.normalize()).shift()
        daylight[repeated] = ~(times <= latest_before).to_numpy()
    return daylight


def describe_layout(layout: Layout) -> str:
    """The first part of the one line saying how a file was read."""
    if layout.kind in ("parquet", "feather"):
        label = "Parquet" if layout.kind == "parquet" else "Feather"
        parts = [f"{layout.source}: {label}, {layout.fields} columns, read {len(set(layout.columns.values()))}"]
    elif layout.kind == "json":
        parts = [f"{layout.source}: JSON candles, {layout.fields} values a row"]
    else:
        shape = "header" if layout.header_rows <= 1 else f"{layout.header_rows}-line header"
        shape = shape if layout.header else "headerless"
        parts = [f"{layout.source}: {shape}, {layout.delimiter!r}-delimited, {layout.fields} columns"]
        if layout.quoted_lines:
            parts.append("each line in quotes")
        if layout.decimal == ",":
            parts.append("decimal comma")
        if layout.encoding not in ("utf-8", "utf-8-sig"):
            parts.append(f"{encoding_label(layout.encoding)} text")
    if layout.bid_ask:
        parts.append(f"{layout.price_side} prices (format.price_side)")
    if layout.columns and "volume" not in layout.columns:
        parts.append("no volume column")
    return ", ".join(parts)


def conflicting_timestamps(frame) -> int:
    """Timestamps the frame holds more than once with different values (rnnfleet.bars.quality
    flags them)."""
    repeated = frame[frame["timestamp"].duplicated(keep=False)]
    if repeated.empty:
        return 0
    distinct = repeated.drop_duplicates()
    return int(distinct.loc[distinct["timestamp"].duplicated(keep=False), "timestamp"].nunique())


def sorted_unique_by_time(frame, notes: list[str]):
    """Rows in time order, exact duplicate timestamps dropped keeping the last;
    attrs["conflicting_duplicates"]: how many of those timestamps held different bars
    (rnnfleet.bars.quality flags them)."""
    if not frame["timestamp"].is_monotonic_increasing:
        frame = frame.sort_values("timestamp", kind="stable")
        notes.append("rows were not in time order and were sorted")
    duplicated = frame["timestamp"].duplicated(keep="last")
    conflicting = 0
    if duplicated.any():
        conflicting = conflicting_timestamps(frame)
        frame = frame[~duplicated]
        notes.append(
            f"{int(duplicated.sum())} duplicate timestamp(s) dropped, keeping the last"
            + (f" ({conflicting} of those timestamps held different bars)" if conflicting else "")
        )
    frame = frame.reset_index(drop=True)
    frame.attrs["notes"] = notes
    frame.attrs["conflicting_duplicates"] = conflicting
    return frame


def first_undecodable_line(path: str | os.PathLike) -> tuple[str, int, int]:
    """(' at line N (it holds ...)' for the first line that is not UTF-8, how many lines are
    not, how many lines there are); ('', 0, 0) for a compressed file. Reads the file again,
    line by line: only on this error path."""
    if Path(path).suffix.lower() in (*COMPRESSED_SUFFIXES, ".zst"):
        return "", 0, 0
    where, damaged, number = "", 0, 0
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                damaged += 1
                if not where:
                    where = f" at line {number} (it holds {line[max(0, error.start - 12) : error.end + 12]!r})"
    return where, damaged, number
