"""Bar files in folders other accounts can write: nothing of a file reaches outputs they can read
unless they could read the file themselves.

A run reads its bars with its user's rights and publishes what it read (error lines quoting a
header or a field, prices in the forecasts) with that user's umask, usually readable by every
account. Where another account can add entries to the folder a bar file sits in (a team folder,
mode 2775, or one open to all, 1777), it could link there a file only the run's user can read,
and read it back from the outputs: a confused deputy. So, on POSIX systems:

- The writers of a file's folder are every account (the folder is world-writable) or the
  members of its group (group-writable); above that folder, a folder counts only where its
  writers could rename the entries in it (writable, without the sticky bit).
- Such a file is read only if those writers could read it themselves: the file (links followed)
  readable by them (world-readable; or group-readable with that group) and every folder on its
  real path searchable by them. A file owned by the account that put its entry there (neither
  the run's user nor root) is that account's own, and is read.
- Otherwise shared_folder_refusal returns one line naming the file, the folder and who can
  write it, and nothing of the file is read (the line quotes none of it).

Elsewhere (Windows: file modes do not say this) nothing is refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

EVERYONE = -1  # as a writer: every account


def folder_writers(folder: Path) -> dict[int, Path]:
    """{group id (EVERYONE for every account): the folder it can write} for those that can
    add or rename entries in `folder`, or rename a folder above it (see the module doc)."""
    writers: dict[int, Path] = {}
    for level, current in enumerate([folder, *folder.parents]):
        try:
            mode, group = (info := os.stat(current)).st_mode, info.st_gid
        except OSError:
            continue
        if level and mode & stat.S_ISVTX:
            continue  # a sticky folder: only an entry's owner renames it
        if mode & stat.S_IWOTH:
            writers.setdefault(EVERYONE, current)
        if mode & stat.S_IWGRP:
            writers.setdefault(group, current)
    return writers


def readable_by(writer: int, info: os.stat_result, permission: int) -> bool:
    """Whether `writer` (a group id, or EVERYONE) has `permission` (R_OK or X_OK) on a file
    or folder whose os.stat is `info`, not counting any account's ownership."""
    others, group = (stat.S_IROTH, stat.S_IRGRP) if permission == os.R_OK else (stat.S_IXOTH, stat.S_IXGRP)
    return bool(info.st_mode & others) or (writer != EVERYONE and info.st_gid == writer and info.st_mode & group)


def who(writer: int) -> str:
    if writer == EVERYONE:
        return "every account"
    import grp

    try:
        return f"group {grp.getgrgid(writer).gr_name}"
    except KeyError:
        return f"group id {writer}"


def shared_folder_refusal(path: str, opened: os.stat_result) -> str | None:
    """The one line refusing the bar file at `path` (opened: the os.fstat of the file as
    opened) under the module's rule; None when it may be read."""
    if os.name != "posix":
        return None
    entry = Path(os.path.abspath(path))
    writers = folder_writers(entry.parent)
    if not writers:
        return None
    entry_owner = os.lstat(entry).st_uid
    if opened.st_uid == entry_owner and entry_owner not in (os.geteuid(), 0):
        return None  # the account that put it there owns it
    real = Path(os.path.realpath(entry))
    for writer in sorted(writers):
        blocked = None if readable_by(writer, opened, os.R_OK) else "the file"
        for folder in real.parents:
            if blocked:
                break
            try:
                if not readable_by(writer, os.stat(folder), os.X_OK):
                    blocked = f"the folder {folder}"
            except OSError:
                blocked = f"the folder {folder}"
        if blocked:
            linked = f" (a link to {real})" if real != entry else ""
            return (
                f"{path}: refused: {who(writer)} can write the folder {writers[writer]} "
                f"(mode {stat.S_IMODE(os.stat(writers[writer]).st_mode):o}), but cannot read {blocked}{linked}; "
                "its content would reach outputs they can read. Make it readable to them, or keep it out of "
                "the shared folder"
            )
    return None
