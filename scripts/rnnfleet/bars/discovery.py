"""Which files in data_dir make which dataset: one directory walk at parse time, no file opened.

Two ways (docs/data.md):
- `pattern` (the default): a glob on the file names directly in data_dir; each matching
  file is one dataset, named by the file name without its extension.
- `datasets.files`: a path pattern relative to data_dir holding `{dataset}`, e.g.
  `**/{dataset}-1m-*`; every file whose path matches belongs to the dataset that
  `{dataset}` names (a symbol's daily and monthly files, in folders of their own or not).

Promise: discovery lists each folder once (os.scandir) and takes each member file's size
and modification time (ns) from its directory entry, so the fingerprint of a dataset
(its files' names, sizes and times, and those of their `.CHECKSUM` files, found in the same
listing) costs no open and no extra listing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatch

from rnnfleet.bars.formats import COMPRESSED_SUFFIXES, READABLE_SUFFIXES, TEXT_SUFFIXES
from rnnfleet.bars.joining import CHECKSUM_SUFFIX
from rnnfleet.errors import UserError

# A dataset name becomes part of output paths: no path separators, no leading dot,
# nothing a shell or a file system could misread.
DATASET_NAME = r"[\w][\w.+=@,-]*"
# The longest file name made from a dataset name is the hidden temporary file beside its
# metrics (rnnfleet.atomic_files.atomic_write): .<name>.json.<8 random characters>.partial.
# File systems allow 255 bytes per name.
MAX_DATASET_NAME_BYTES = 255 - len("..json.12345678.partial")
PLACEHOLDER = "{dataset}"
# `1m` as an interval in a name: not 11m, 21m (a digit before) nor 1mo, 1month (a letter
# after, but for 1min, 1minute).
ONE_MINUTE_MARK = re.compile(r"(?<![0-9])1m(?![a-hj-z0-9])")


@dataclass
class Datasets:
    """{dataset: its data files, in path order}, the fingerprint of each dataset's files,
    and the data files that have a `.CHECKSUM` beside them."""

    files: dict[str, list[str]] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    checksummed: set[str] = field(default_factory=set)
    # {path: why}: entries named like a bar file that are not one (a folder, a dangling link).
    skipped: dict[str, str] = field(default_factory=dict)
    # How the datasets were found where no setting chose it (a QuantConnect Lean tree), or "".
    note: str = ""
    # {path: how its name became a dataset name}: exporters' names that are no dataset name as
    # they stand (EXPORTER_NAMES).
    renamed: dict[str, str] = field(default_factory=dict)


# File names of exporters that hold no valid dataset name, or no `1m` (so no match for the
# default pattern), and the dataset name each gives: TradingView's chart export
# ("BINANCE_BTCUSDT, 1.csv": exchange, symbol, interval in minutes) and Dukascopy's
# ("EURUSD_Candlestick_1_M_BID_01.01.2024-31.01.2024.csv"), whose files of one symbol and side,
# one per period exported, are one dataset (joined as datasets.files joins period files).
EXPORTER_NAMES = (
    ("TradingView export", re.compile(r"(?P<symbol>[^,/]+), 1(?: \((?P<copy>\d+)\))?\.csv"), "{symbol}_1m{copy}"),
    (
        "Dukascopy export",
        re.compile(r"(?P<symbol>[A-Za-z0-9.]+)_Candlestick_1_M_(?P<side>BID|ASK)_(?P<period>[0-9.]+-[0-9.]+)\.csv"),
        "{symbol}_{side}_1m",
    ),
)
# The exporters whose files of one dataset name are its period files, not two copies.
PERIOD_EXPORTERS = ("Dukascopy export",)


# QuantConnect Lean's minute trade files (rnnfleet.bars.formats.LEAN_PATH): one dataset per ticker
# where data_dir is a Lean data folder and neither `pattern` nor `datasets.files` finds files.
LEAN_FILES = "*/*/minute/{dataset}/*_trade.zip"
# The trees of period files that datasets.files serves, as `rnnfleet init` tries them on a
# data folder whose files the default pattern does not take (docs/data.md).
PERIOD_FILE_LAYOUTS = (
    ("Binance Data Vision's tree of daily and monthly files", "**/{dataset}-1m-*"),
    ("histdata.com's yearly files", "DAT_ASCII_{dataset}_M1_*"),
    ("one folder per symbol", "{dataset}/*"),
)
LEAN_ASSET_FOLDERS = ("equity", "crypto")
# freqtrade's candle files (`freqtrade download-data`): spot BTC_USDT-1m.json, futures
# BTC_USDT_USDT-1m-futures.feather in the exchange folder's futures/; json, jsongz, feather, parquet.
FREQTRADE_NAME = re.compile(
    r"[A-Za-z0-9]+_[A-Za-z0-9]+(?:_[A-Za-z0-9]+)?-1m(?:-futures)?\.(?:json|json\.gz|feather|parquet)"
)
FREQTRADE_FILES = (
    ("spot", "{dataset}-1m.*"),
    ("futures", "futures/{dataset}-1m-futures.*"),
    ("futures", "{dataset}-1m-futures.*"),  # data_dir is the futures folder
)


def dataset_name(file_name: str) -> str:
    """File name without its extension, and without .csv/.txt/.tsv/.json before a compression
    suffix (Binance's `BTCUSDT-1m-2024-01.zip` -> `BTCUSDT-1m-2024-01`, freqtrade's
    `BTC_USDT-1m.json.gz` -> `BTC_USDT-1m`)."""
    stem, extension = os.path.splitext(file_name)
    if extension.lower() in COMPRESSED_SUFFIXES:
        inner_stem, inner = os.path.splitext(stem)
        if inner.lower() in (*TEXT_SUFFIXES, ".json"):
            stem = inner_stem
    return stem


def exporters_dataset_name(file_name: str) -> tuple[str, str]:
    """(the dataset name of an exporter's file name, which exporter's) for EXPORTER_NAMES,
    else (the file's own dataset_name, "")."""
    for source, shape, name in EXPORTER_NAMES:
        if match := shape.fullmatch(file_name):
            parts = {key: value or "" for key, value in match.groupdict().items()}
            parts["copy"] = f"_{parts['copy']}" if parts.get("copy") else ""
            return name.format(**parts).replace(" ", "_"), source
    return dataset_name(file_name), ""


def is_bar_file_name(file_name: str) -> bool:
    """A name rnnfleet reads (rnnfleet.bars.formats.READABLE_SUFFIXES), not hidden."""
    return not file_name.startswith(".") and file_name.lower().endswith(READABLE_SUFFIXES)


def hidden_dataset_file(file_name: str, relative: str, pattern: str, regex: re.Pattern | None) -> bool:
    """A hidden file that would be a dataset's file without its leading dot (a copy an editor
    or a sync tool left, or one hidden on purpose): skipped, but said."""
    if not file_name.startswith(".") or not is_bar_file_name(file_name.lstrip(".")):
        return False
    if regex is None:
        return fnmatch(file_name.lstrip("."), pattern)
    return regex.fullmatch(relative[: len(relative) - len(file_name)] + file_name.lstrip(".")) is not None


def path_regex(files_pattern: str) -> re.Pattern:
    """The regex of a `datasets.files` pattern on '/'-separated paths relative to data_dir:
    `**/` any folders (none too), `*` and `?` within one name, `[...]` as in a glob,
    `{dataset}` the dataset name (the shortest that lets the rest match)."""
    parts, position = [], 0
    while position < len(files_pattern):
        if files_pattern.startswith(PLACEHOLDER, position):
            parts.append(f"(?P<dataset>{DATASET_NAME}?)")
            position += len(PLACEHOLDER)
        elif files_pattern.startswith("**/", position):
            parts.append("(?:[^/]+/)*")
            position += 3
        elif files_pattern[position] == "*":
            parts.append("[^/]*")
            position += 1
        elif files_pattern[position] == "?":
            parts.append("[^/]")
            position += 1
        elif files_pattern[position] == "[" and "]" in files_pattern[position + 2 :]:
            end = files_pattern.index("]", position + 2)
            inside = files_pattern[position + 1 : end]
            parts.append("[" + ("^" + inside[1:] if inside.startswith("!") else inside).replace("\\", "\\\\") + "]")
            position = end + 1
        else:
            parts.append(re.escape(files_pattern[position]))
            position += 1
    return re.compile("".join(parts))


def check_files_pattern(files_pattern: str) -> None:
    if files_pattern.count(PLACEHOLDER) != 1 or files_pattern.startswith("/") or ".." in files_pattern.split("/"):
        raise UserError(
            f"config key 'datasets.files' = {files_pattern!r}: must hold {PLACEHOLDER} exactly once and be "
            "relative to data_dir without '..', e.g. '**/{dataset}-1m-*'"
        )


def walk(
    folder: str, relative: str, max_depth: int | None, walked: frozenset = frozenset()
) -> Iterator[tuple[str, os.DirEntry]]:
    """(path relative to the top, entry) of every entry under folder that is not a folder
    walked into: files, and also folders below max_depth (how many folder levels below the
    top are walked; None: all), so that one named like a dataset is seen; hidden folders
    skipped. A link to a folder is followed unless it leads back into the folders being
    walked (a loop, or a link to a parent): such a link is yielded as an entry."""
    walked = walked | {folder}  # paths: their identities are looked up only where a link needs them
    with os.scandir(folder) as entries:
        subfolders = []
        for entry in entries:
            if is_folder(entry) and not entry.name.startswith(".") and (max_depth is None or max_depth > 0):
                if entry.is_symlink() and folder_identity(entry.path) in map(folder_identity, walked):
                    yield relative + entry.name, entry
                    continue
                subfolders.append(entry)
            elif not (is_folder(entry) and entry.name.startswith(".")):
                yield relative + entry.name, entry
    for entry in sorted(subfolders, key=lambda item: item.name):
        depth = None if max_depth is None else max_depth - 1
        yield from walk(entry.path, f"{relative}{entry.name}/", depth, walked)


def is_folder(entry: os.DirEntry) -> bool:
    """A folder, or a link to one; False for a link that leads nowhere (a loop of links)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def folder_identity(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def entry_problem(entry: os.DirEntry) -> str | None:
    """Why an entry named like a bar file is not one (None: it is a file). From the
    listing's file type; only a symbolic link costs a stat (of its target)."""
    try:
        if entry.is_file():
            return None
    except OSError as error:  # a loop of symbolic links
        return f"is a symbolic link that cannot be followed ({error.strerror})"
    if entry.is_symlink():
        target = os.readlink(entry.path)
        if is_folder(entry):
            return f"is a symbolic link to {target!r}, which is a folder"
        if os.path.exists(entry.path):
            return f"is a symbolic link to {target!r}, which is not a regular file"
        return f"is a symbolic link to {target!r}, which does not exist"
    if entry.is_dir():
        return "is a folder, not a file (a dataset is one file)"
    return "is not a regular file (a pipe, socket or device)"


def names_one_minute(file_name: str, pattern: str) -> bool:
    """Where the pattern asks for `1m` (the default `*1m*`), the name must hold it as an
    interval: `AAPL_1mo.csv`, `X_11m.csv` are other intervals; `X_1min.csv` is one minute."""
    return "1m" not in pattern or ONE_MINUTE_MARK.search(dataset_name(file_name)) is not None


def fingerprint(entries: list[os.DirEntry]) -> str:
    """Short digest of the files' names, sizes and modification times: changes when a file is
    added, removed or replaced, even by one with an older time (`cp -p`, `rsync -a`)."""
    return fingerprint_of([(entry.path, entry.stat()) for entry in entries])


def fingerprint_of(files: list[tuple[str, os.stat_result]]) -> str:
    """fingerprint() of (path, its os.stat) pairs."""
    digest = hashlib.sha256()
    for path, status in files:
        digest.update(f"{path}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def check_data_dir(data_dir: str) -> None:
    """UserError naming the config key when data_dir is not a folder."""
    if not os.path.isdir(data_dir):
        raise UserError(
            f"config key 'data_dir' = {data_dir!r} is not a folder; allowed: an existing folder holding "
            "the bar files (set data_dir in config.yaml or --config data_dir=...)"
        )


def discover_datasets(data_dir: str, pattern: str, files_pattern: str = "") -> Datasets:
    """The datasets in data_dir (see the module doc); UserError naming the config key when
    none is found, two files give one name, or a name cannot be an output path."""
    check_data_dir(data_dir)
    if files_pattern:
        check_files_pattern(files_pattern)
        regex = path_regex(files_pattern)
        max_depth = None if "**" in files_pattern else files_pattern.count("/")
    else:
        regex, max_depth = None, 0
    members: dict[str, list[os.DirEntry]] = {}
    member_sources: dict[str, str] = {}  # dataset name -> the exporter its first file came from, or ""
    other_names, same_name, folder_names = [], [], []
    found_names: dict[str, str] = {}  # path -> how an exporter's file name became a dataset name
    checksum_entries: dict[str, os.DirEntry] = {}  # data file path -> its .CHECKSUM
    found_problems: dict[str, str] = {}
    for relative, entry in walk(data_dir, "", max_depth):
        if entry.name.endswith(CHECKSUM_SUFFIX):
            checksum_entries[entry.path.removesuffix(CHECKSUM_SUFFIX)] = entry
            continue
        if hidden_dataset_file(entry.name, relative, pattern, regex):
            found_problems[entry.path] = "is hidden (its name starts with a dot); rename it to train it"
            continue
        if not is_bar_file_name(entry.name):
            other_names.append(relative)
            if is_folder(entry):
                folder_names.append(relative)
            continue
        if regex is None:
            name, source = exporters_dataset_name(entry.name)
            shown_name = f"{name}.csv" if source else entry.name
            if not fnmatch(shown_name, pattern) or not names_one_minute(shown_name, pattern):
                other_names.append(relative)
                continue
            if source:
                found_names[entry.path] = f"{source}: dataset {name}"
            if name in members and not (source in PERIOD_EXPORTERS and member_sources[name] == source):
                same_name.append(f"{members[name][0].path!r} and {entry.path!r}")
                continue
        else:
            match = regex.fullmatch(relative)
            if match is None:
                other_names.append(relative)
                continue
            name = match.group("dataset")
        if problem := entry_problem(entry):
            found_problems[entry.path] = problem
            continue
        members.setdefault(name, []).append(entry)
        member_sources.setdefault(name, source if regex is None else "")
    if not members:
        message = no_match_message(data_dir, pattern, files_pattern, other_names, folder_names)
        if files_pattern or not set(folder_names) & set(LEAN_ASSET_FOLDERS):
            raise UserError(message)
        try:
            lean = discover_datasets(data_dir, pattern, LEAN_FILES)
        except UserError:
            raise UserError(message) from None
        lean.note = (
            f"data_dir {data_dir!r} is a QuantConnect Lean data folder: one dataset per ticker of its minute "
            f"trade files (as datasets.files {LEAN_FILES!r})"
        )
        return lean
    if same_name:
        raise UserError(
            f"data_dir {data_dir!r}: two files give the same dataset name; keep one of: {'; '.join(same_name)}"
        )
    bad_names = sorted(name for name in members if not re.fullmatch(DATASET_NAME, name))
    if bad_names:
        raise UserError(
            f"data_dir {data_dir!r}: dataset file names may hold only letters, digits and . _ + = @ , - "
            f"(and must not start with a dot or dash); rename: "
            f"{', '.join(repr(members[n][0].path) for n in bad_names)}"
        )
    long_names = sorted(name for name in members if len(name.encode()) > MAX_DATASET_NAME_BYTES)
    if long_names:
        raise UserError(
            f"data_dir {data_dir!r}: dataset names may be at most {MAX_DATASET_NAME_BYTES} bytes long "
            f"(the hidden temporary files beside the outputs add {255 - MAX_DATASET_NAME_BYTES} "
            f"to a file-name limit of 255); shorten: {', '.join(repr(members[n][0].path) for n in long_names)}"
        )
    found = Datasets(skipped=found_problems, renamed=found_names)
    for name in sorted(members):
        entries = sorted(members[name], key=lambda entry: entry.path)
        found.files[name] = [entry.path for entry in entries]
        checksums = [checksum_entries[entry.path] for entry in entries if entry.path in checksum_entries]
        found.checksummed.update(entry.path for entry in entries if entry.path in checksum_entries)
        found.fingerprints[name] = fingerprint(entries + checksums)
    return found


def no_match_message(
    data_dir: str, pattern: str, files_pattern: str, other_names: list[str], folder_names: list[str] = ()
) -> str:
    holds = f"it holds {', '.join(sorted(other_names)[:5])}" if other_names else "it is empty"
    if len(other_names) > 5:
        holds += f" and {len(other_names) - 5} more"
    if folder_names and not files_pattern:
        return (
            f"config key 'pattern' = {pattern!r} matches no file in data_dir {data_dir!r} ({holds}); "
            f"data_dir holds folders ({', '.join(sorted(folder_names)[:5])}): a symbol split over period files "
            "in folders (Binance Data Vision's tree, monthly or daily files) is one dataset by "
            'datasets.files, e.g. `datasets: {files: "**/{dataset}-1m-*"}` in config.yaml (docs/data.md)'
        )
    if files_pattern:
        return (
            f"config key 'datasets.files' = {files_pattern!r} matches no file under data_dir {data_dir!r} "
            f"({holds}); allowed: a path pattern relative to data_dir with {PLACEHOLDER}, e.g. '**/{{dataset}}-1m-*'"
        )
    return (
        f"config key 'pattern' = {pattern!r} matches no file in data_dir {data_dir!r} ({holds}); "
        f"allowed: a glob on the names of bar files ({' '.join(READABLE_SUFFIXES)}), e.g. '*1m*'"
    )


def period_files_layout(data_dir: str, pattern: str = "*1m*") -> tuple[str, str, list[str]] | None:
    """(the layout's words, its datasets.files, the datasets it gives) for a data_dir whose
    files `pattern` does not take but one of PERIOD_FILE_LAYOUTS does (the first that
    finds a dataset); None where the default finds datasets, or nothing fits."""
    try:
        discover_datasets(data_dir, pattern)
        return None
    except UserError:
        pass
    for words, files_pattern in PERIOD_FILE_LAYOUTS:
        try:
            found = discover_datasets(data_dir, pattern, files_pattern)
        except UserError:
            continue
        return words, files_pattern, list(found.files)
    return None


def freqtrade_layout(data_dir: str) -> tuple[str, str, list[str]] | None:
    """(the layout's words, its datasets.files, the datasets it gives: the pairs) for a
    freqtrade exchange folder (user_data/data/<exchange>: spot candles in it, futures in its
    futures/) or for user_data/data itself (its first exchange folder holding one-minute
    candles); spot where both are there. None where data_dir holds no freqtrade candles."""
    exchanges = [(data_dir, "")] + [
        (entry.path, f"{entry.name}/")
        for entry in sorted(os.scandir(data_dir), key=lambda entry: entry.name)
        if is_folder(entry) and not entry.name.startswith(".")
    ]
    holding = []
    for folder, prefix in exchanges:
        for market, files_pattern in FREQTRADE_FILES:
            market_folder, name_pattern = os.path.split(os.path.join(folder, files_pattern))
            names = path_regex(name_pattern)
            if os.path.isdir(market_folder) and any(
                FREQTRADE_NAME.fullmatch(name) and names.fullmatch(name) for name in os.listdir(market_folder)
            ):
                holding.append((prefix, market, prefix + files_pattern))
                break
        if holding and not prefix:
            break  # data_dir is an exchange folder itself
    if not holding:
        return None
    prefix, market, files_pattern = holding[0]
    found = discover_datasets(data_dir, "*1m*", files_pattern)
    exchange = prefix.rstrip("/") or os.path.basename(os.path.abspath(data_dir))
    others = [other.rstrip("/") for other, _, _ in holding[1:]]
    words = f"freqtrade's data folder ({exchange}, {market} candles, one file per pair)" + (
        f"; the other exchange folders ({', '.join(others)}) are projects of their own (--data .../<exchange>)"
        if others
        else ""
    )
    return words, files_pattern, list(found.files)
