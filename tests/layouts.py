"""The same bars written in every layout users have (README "Your data" lists them), and one
real run over all of them plus the documented odd cases (a 31-bar day, a weekend gap, gaps
everywhere, a zero price): for tests/unit/test_formats.py and the tests of that run in
tests/workflow/. The fixtures every_layout and layouts_run are offered to every test by
tests/conftest.py; session-scoped, so the run happens once however many modules use it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import snakemake, write_config

from rnnfleet.synthetic import synthetic_bars

ROWS = 400
SEQ_LEN = 30
BAR_KEYS = ["open", "high", "low", "close", "volume"]
NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
HISTDATA_DATASET = "DAT_ASCII_EURUSD_M1_1m"


def reference_bars(rows: int = ROWS, start: str = "2024-01-02 00:00") -> pd.DataFrame:
    """Bars whose numbers survive text exactly (6 decimals), with UTC timestamps."""
    bars = synthetic_bars(rows, seed=7)
    for key in BAR_KEYS:
        bars[key] = [float(f"{value:.6f}") for value in bars[key]]
    bars["timestamp"] = pd.date_range(start, periods=rows, freq="min", tz="UTC").astype("datetime64[ns, UTC]")
    return bars


def epoch(bars: pd.DataFrame, unit: str) -> np.ndarray:
    return bars["timestamp"].array.asi8 // NS_PER[unit]


def numbers(bars: pd.DataFrame) -> pd.DataFrame:
    return bars[BAR_KEYS]


def headered(bars: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([bars["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S"), numbers(bars)], axis=1)


def binance(bars: pd.DataFrame, unit: str) -> pd.DataFrame:
    """The 12 columns of Binance's kline files."""
    open_time = epoch(bars, unit)
    return pd.DataFrame(
        {
            "open_time": open_time,
            **numbers(bars),
            "close_time": open_time + 60 * NS_PER["s"] // NS_PER[unit] - 1,
            "quote_volume": (bars["volume"] * bars["close"]).round(4),
            "trades": 17,
            "taker_base": (bars["volume"] / 2).round(4),
            "taker_quote": (bars["volume"] * bars["close"] / 2).round(4),
            "ignore": 0,
        }
    )


def write_headerless(frame: pd.DataFrame, path: Path, sep: str = ",") -> None:
    frame.to_csv(path, sep=sep, header=False, index=False)


def write_every_layout(bars: pd.DataFrame, folder: Path) -> dict[str, str]:
    """{dataset: what its preprocess log must say about how it was read}; files in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    text = headered(bars)
    for dataset, suffix, sep in [
        ("COMMA_1m", ".csv", ","),
        ("SEMICOLON_1m", ".txt", ";"),
        ("TAB_1m", ".tsv", "\t"),
        ("GZ_1m", ".csv.gz", ","),
        ("BZ2_1m", ".csv.bz2", ";"),
        ("XZ_1m", ".csv.xz", ","),
        ("ZIP_1m", ".csv.zip", ","),
    ]:
        text.to_csv(folder / f"{dataset}{suffix}", sep=sep, index=False)
        expected[dataset] = f"auto: header, {sep!r}-delimited, 6 columns, time from column 'timestamp' as ISO8601"
    write_headerless(text, folder / "NOHEADER_ISO_1m.csv")
    expected["NOHEADER_ISO_1m"] = "auto: headerless, ','-delimited, 6 columns, time from column 0 as ISO8601 text"
    zulu = text.assign(timestamp=bars["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    zulu.to_csv(folder / "ZULU_1m.csv", index=False)
    expected["ZULU_1m"] = "time from column 'timestamp' as ISO8601 text, UTC"
    for unit in ("ms", "us"):
        write_headerless(binance(bars, unit), folder / f"BINANCE-{unit.upper()}-1m-2024-01-02.csv")
        expected[f"BINANCE-{unit.upper()}-1m-2024-01-02"] = (
            f"auto: headerless, ','-delimited, 12 columns, time from column 0 in epoch {unit} (told by the values), UTC"
        )
    write_headerless(pd.DataFrame({"t": epoch(bars, "s"), **numbers(bars), "trades": 5}), folder / "KRAKEN_1m.csv")
    expected["KRAKEN_1m"] = "headerless, ','-delimited, 7 columns, time from column 0 in epoch s"
    for unit in NS_PER:
        pd.DataFrame({"timestamp": epoch(bars, unit), **numbers(bars)}).to_csv(
            folder / f"EPOCH_{unit.upper()}_1m.csv", index=False
        )
        expected[f"EPOCH_{unit.upper()}_1m"] = f"time from column 'timestamp' in epoch {unit} (told by the values)"
    mixed = pd.DataFrame({"timestamp": epoch(bars, "ms"), **numbers(bars)})
    mixed.loc[ROWS // 2 :, "timestamp"] = epoch(bars, "us")[ROWS // 2 :]
    mixed.to_csv(folder / "MIXED_1m.csv", index=False)
    expected["MIXED_1m"] = "in epoch ms and us (told by the values)"
    write_headerless(
        pd.DataFrame(
            {
                "date": bars["timestamp"].dt.strftime("%Y.%m.%d"),
                "time": bars["timestamp"].dt.strftime("%H:%M"),
                **numbers(bars),
            }
        ),
        folder / "MT4_1m.csv",
    )
    expected["MT4_1m"] = "headerless, ','-delimited, 7 columns, time from columns 0 + 1 as %Y.%m.%d %H:%M text"
    pd.DataFrame(
        {
            "<DATE>": bars["timestamp"].dt.strftime("%Y.%m.%d"),
            "<TIME>": bars["timestamp"].dt.strftime("%H:%M:%S"),
            **{f"<{key.upper()}>": bars[key] for key in BAR_KEYS[:4]},
            "<TICKVOL>": bars["volume"],
            "<VOL>": 0,
            "<SPREAD>": 12,
        }
    ).to_csv(folder / "MT5_1m.csv", sep="\t", index=False)
    expected["MT5_1m"] = "header, '\\t'-delimited, 9 columns, time from columns '<DATE>' + '<TIME>'"
    est = bars["timestamp"].dt.tz_convert("Etc/GMT+5")  # histdata.com: EST all year
    # Named as histdata.com names its files (DAT_ASCII_<symbol>_M1_<year>), with 1m for `pattern`.
    write_headerless(
        pd.DataFrame({"t": est.dt.strftime("%Y%m%d %H%M%S"), **numbers(bars)}),
        folder / f"{HISTDATA_DATASET}.csv",
        sep=";",
    )
    expected[HISTDATA_DATASET] = "as %Y%m%d %H%M%S text, naive times in Etc/GMT+5"
    # NinjaTrader's export: the same line shape as histdata's, times in UTC; nothing in the file
    # says so, so they are read as UTC and said to be assumed, never as histdata's EST.
    write_headerless(
        pd.DataFrame({"t": bars["timestamp"].dt.strftime("%Y%m%d %H%M%S"), **numbers(bars)}),
        folder / "NINJATRADER_1m.txt",
        sep=";",
    )
    expected["NINJATRADER_1m"] = "as %Y%m%d %H%M%S text, naive times read as UTC (set format.timezone)"
    pd.DataFrame(
        {
            "Gmt time": bars["timestamp"].dt.strftime("%d.%m.%Y %H:%M:%S.000"),
            **{key.capitalize(): bars[key] for key in BAR_KEYS},
        }
    ).to_csv(folder / "DUKASCOPY_1m.csv", index=False)
    expected["DUKASCOPY_1m"] = "time from column 'Gmt time' as %d.%m.%Y %H:%M:%S.%f text, naive times in UTC"
    pd.DataFrame(
        {"symbol": "BTCUSDT", "timestamp": bars["timestamp"], **numbers(bars), "trades": 9, "vwap": bars["close"]}
    ).to_parquet(folder / "PARQUET_1m.parquet", index=False)
    expected["PARQUET_1m"] = "auto: Parquet, 9 columns, read 6, time from column 'timestamp' as zoned times, UTC"
    return expected


@pytest.fixture(scope="session")
def every_layout(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("layouts")
    return folder, write_every_layout(reference_bars(), folder)


def file_of(folder: Path, dataset: str) -> Path:
    return next(path for path in folder.iterdir() if path.name.startswith(dataset + "."))


def gapped_bars(gaps_after: list[int], gap: str, rows: int = ROWS) -> pd.DataFrame:
    bars = reference_bars(rows, start="2024-01-05 20:00")  # a Friday evening
    shift = np.zeros(rows, dtype="timedelta64[ns]")
    for bar in gaps_after:
        shift[bar + 1 :] += pd.Timedelta(gap).to_timedelta64()
    bars["timestamp"] = bars["timestamp"] + shift
    return bars


ODD_CASES = {
    "ZEROPRICE_1m": "zero or negative price in data row 51",
    "OUTAGE_1m": "too few rows for one training window plus validation and test: 31 usable rows",
    "CHOPPED_1m": "gap(s) longer than preprocess.max_gap=15min leave no piece long enough",
}


@pytest.fixture(scope="session")
def layouts_run(every_layout, tmp_path_factory):
    """One real run: preprocess every layout and the odd cases; train COMMA and WEEKEND."""
    workdir = tmp_path_factory.mktemp("layouts_run")
    shutil.copytree(every_layout[0], workdir / "data")
    headered(reference_bars(31)).to_csv(workdir / "data" / "OUTAGE_1m.csv", index=False)
    headered(gapped_bars([199], "2D")).to_csv(workdir / "data" / "WEEKEND_1m.csv", index=False)
    headered(gapped_bars(list(range(20, ROWS, 25)), "1h")).to_csv(workdir / "data" / "CHOPPED_1m.csv", index=False)
    headered(reference_bars(100)).to_csv(workdir / "data" / "EURUSD_5m.csv", index=False)  # decoys
    (workdir / "data" / "notes_1m.md").write_text("not a dataset\n")
    zero_price = headered(reference_bars(100))
    zero_price.loc[50, "low"] = 0.0
    zero_price.to_csv(workdir / "data" / "ZEROPRICE_1m.csv", index=False)
    write_config(workdir, data_dir="data", train={"seq_len": SEQ_LEN})
    datasets = [*every_layout[1], *ODD_CASES, "WEEKEND_1m"]
    targets = [f"prep/{name}.npz" for name in datasets] + ["models/COMMA_1m.pt", "models/WEEKEND_1m.pt"]
    return workdir, snakemake(workdir, *targets, check=False)


def preprocess_log(workdir: Path, dataset: str) -> str:
    return (workdir / "logs" / "preprocess" / f"{dataset}.log").read_text()


# Layouts of real files that hold more than the bars, or less (issue 24): each builder writes
# the reference bars as its source does. FXCM-style files give their bid side the reference
# prices; files without volume are compared with a plain CSV without volume.
ASK_SPREAD = 0.0002
FXCM_SYMBOL = "EUR/USD"


def without_volume(bars: pd.DataFrame) -> pd.DataFrame:
    return headered(bars).drop(columns="volume")


def write_nse(bars: pd.DataFrame, path: Path) -> None:
    """NSE/India index export: symbol, date, time, OHLC, no volume, no header, CRLF."""
    pd.DataFrame(
        {
            "symbol": "NIFTY",
            "date": bars["timestamp"].dt.strftime("%Y%m%d"),
            "time": bars["timestamp"].dt.strftime("%H:%M"),
            **numbers(bars)[BAR_KEYS[:4]],
        }
    ).to_csv(path, header=False, index=False, lineterminator="\r\n")


def write_fxcm(bars: pd.DataFrame, path: Path) -> None:
    """FXCM bid/ask export: quoted names holding commas, ask then bid OHLC, no volume, times
    month first, newest row first."""
    columns = {"Date": bars["timestamp"].dt.strftime("%m/%d/%Y %H:%M:%S")}
    for side in ("Ask", "Bid"):
        for key in BAR_KEYS[:4]:
            prices = bars[key] + (ASK_SPREAD if side == "Ask" else 0.0)
            columns[f"{FXCM_SYMBOL}({key.capitalize()}, {side}){'*' if side == 'Bid' else ''}"] = prices.round(6)
    pd.DataFrame(columns).iloc[::-1].to_csv(path, index=False)


def write_yfinance(bars: pd.DataFrame, path: Path, tickers: tuple[str, ...] = ("SPY",)) -> None:
    """yfinance.download(...).to_csv(): three header rows, columns Close, High, Low, Open,
    Volume, each once per ticker (a download of several: the same bars for each here)."""
    order = [key for key in ["close", "high", "low", "open", "volume"] for _ in tickers]
    lines = [
        ",".join(["Price", *(key.capitalize() for key in order)]),
        ",".join(["Ticker", *tickers * (len(order) // len(tickers))]),
        "Datetime" + "," * len(order),
    ]
    times = bars["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S+00:00")
    body = pd.concat([times, bars[order]], axis=1).to_csv(header=False, index=False)
    path.write_text("\n".join(lines) + "\n" + body)


def write_mt5_quoted(bars: pd.DataFrame, path: Path) -> None:
    """An MT5 export re-saved by a spreadsheet: each line one quoted string, tabs inside."""
    body = pd.concat([bars["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S"), numbers(bars)], axis=1)
    lines = body.to_csv(sep="\t", header=False, index=False).splitlines()
    path.write_text("".join(f'"{line}"\n' for line in lines))


def mt5_frame(bars: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "<DATE>": bars["timestamp"].dt.strftime("%Y.%m.%d"),
            "<TIME>": bars["timestamp"].dt.strftime("%H:%M:%S"),
            **{f"<{key.upper()}>": bars[key] for key in BAR_KEYS[:4]},
            "<TICKVOL>": bars["volume"],
            "<VOL>": 0,
            "<SPREAD>": 12,
        }
    )


def write_mt5_utf16(bars: pd.DataFrame, path: Path) -> None:
    """An MT5 bars export as MT5 saves it: UTF-16 LE with a byte-order mark, CRLF."""
    text = mt5_frame(bars).to_csv(sep="\t", index=False, lineterminator="\r\n")
    path.write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))


def write_parquet_text_close(bars: pd.DataFrame, path: Path) -> None:
    """A Parquet file whose close column holds the numbers as strings."""
    frame = pd.DataFrame({"timestamp": bars["timestamp"], **numbers(bars)})
    frame["close"] = frame["close"].map(repr)
    frame.to_parquet(path, index=False)


# {dataset: (builder, file suffix, what its read line must say, whether it has volume)}
def write_dukascopy_local(bars: pd.DataFrame, path: Path, zone: str = "America/New_York") -> None:
    """Dukascopy's "Local time" export: each bar's local time with its own offset (GMT-0500)."""
    local = bars["timestamp"].dt.tz_convert(zone)
    times = local.dt.strftime("%d.%m.%Y %H:%M:%S.000 GMT%z")
    pd.DataFrame({"Local time": times, **{key.capitalize(): bars[key] for key in BAR_KEYS}}).to_csv(path, index=False)


def write_kaggle_bitstamp(bars: pd.DataFrame, path: Path) -> None:
    """The Kaggle Bitstamp minute set: epoch seconds, volume in the base and quote currency."""
    pd.DataFrame(
        {
            "Timestamp": epoch(bars, "s"),
            **{key.capitalize(): bars[key] for key in ("open", "high", "low", "close")},
            "Volume_(BTC)": bars["volume"],
            "Volume_(Currency)": bars["volume"] * bars["close"],
            "Weighted_Price": bars["close"],
        }
    ).to_csv(path, index=False)


def decimal_commas(values: pd.Series, decimals: int = 6) -> list[str]:
    """Numbers as German software writes them: 2.750,570000 (dots group thousands)."""
    return [f"{value:,.{decimals}f}".translate(str.maketrans(",.", ".,")) for value in values]


def write_european(bars: pd.DataFrame, path: Path) -> None:
    """A German broker's minute export, laid out as onvista's and Lang & Schwarz's downloads
    are (no real minute file was found in a public repository to trim): a UTF-8 byte-order
    mark, `;`, the header in German with a currency column, day-first dates and the times
    apart, decimal commas, thousands grouped by dots."""
    frame = pd.DataFrame(
        {
            "Datum": bars["timestamp"].dt.strftime("%d.%m.%Y"),
            "Zeit": bars["timestamp"].dt.strftime("%H:%M"),
            **{
                german: decimal_commas(bars[key]) for key, german in zip(BAR_KEYS[:4], EUROPEAN_NAMES[2:6], strict=True)
            },
            "Währung": "EUR",
            "Volumen": decimal_commas(bars["volume"]),
        }
    )
    path.write_bytes(b"\xef\xbb\xbf" + frame.to_csv(sep=";", index=False).encode())


EUROPEAN_NAMES = ["Datum", "Zeit", "Eröffnung", "Hoch", "Tief", "Schluss", "Währung", "Volumen"]

REAL_LAYOUTS = {
    "EUROPEAN_1m": (
        write_european,
        ".csv",
        "auto: header, ';'-delimited, 8 columns, decimal comma, time from columns 'Datum' + 'Zeit' as %d.%m.%Y %H:%M text",
        True,
    ),
    "NSE_1m": (
        write_nse,
        ".csv",
        "auto: headerless, ','-delimited, 7 columns, no volume column, time from columns 1 + 2 as %Y%m%d %H:%M text",
        False,
    ),
    "FXCM_1m": (
        write_fxcm,
        ".csv",
        "auto: header, ','-delimited, 9 columns, bid prices (format.price_side), "
        "no volume column, time from column 'Date' as %m/%d/%Y %H:%M:%S text",
        False,
    ),
    "YFINANCE_1m": (
        write_yfinance,
        ".csv",
        "auto: 3-line header, ','-delimited, 6 columns, time from column 'Datetime' as ISO8601 text, UTC",
        True,
    ),
    "MT5QUOTED_1m": (
        write_mt5_quoted,
        ".csv",
        "auto: headerless, '\\t'-delimited, 6 columns, each line in quotes, time from column 0 as ISO8601 text",
        True,
    ),
    "MT5UTF16_1m": (
        write_mt5_utf16,
        ".csv",
        "auto: header, '\\t'-delimited, 9 columns, UTF-16 text, time from columns '<DATE>' + '<TIME>'",
        True,
    ),
    "DUKASLOCAL_1m": (
        write_dukascopy_local,
        ".csv",
        "auto: header, ','-delimited, 6 columns, time from column 'Local time' as %d.%m.%Y %H:%M:%S.%f GMT%z text, UTC",
        True,
    ),
    "BITSTAMP_1m": (
        write_kaggle_bitstamp,
        ".csv",
        "auto: header, ','-delimited, 8 columns, time from column 'Timestamp' in epoch s (told by the values), UTC",
        True,
    ),
    "PARQUETTEXT_1m": (
        write_parquet_text_close,
        ".parquet",
        "auto: Parquet, 6 columns, read 6, time from column 'timestamp' as zoned times, UTC",
        True,
    ),
}


def write_real_layouts(bars: pd.DataFrame, folder: Path) -> None:
    """Every REAL_LAYOUTS file of `bars` in folder, beside the two plain CSVs they read like
    (PLAIN_1m with volume, PLAINNOVOL_1m without)."""
    folder.mkdir(parents=True, exist_ok=True)
    for dataset, (builder, suffix, _, _) in REAL_LAYOUTS.items():
        builder(bars, folder / f"{dataset}{suffix}")
    headered(bars).to_csv(folder / "PLAIN_1m.csv", index=False)
    without_volume(bars).to_csv(folder / "PLAINNOVOL_1m.csv", index=False)
